// Process helpers for tests: ChildProcess (common/child_process.h) and Run().
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/child_process.h"

namespace logdex::testing {

using Process = ChildProcess;

// Runs a command to completion; returns its exit code and output.
inline int Run(const std::string& command, std::string* output = nullptr) {
  std::string cmd = command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  std::string out;
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The port a serve process listens on (it is started with --http HOST:0 and
// prints "http: listening on HOST:PORT"): the kernel picks it, so parallel
// tests never collide. -1 when the line does not come within the timeout.
inline int ListeningPort(const Process& serve, int timeout_ms = 30'000) {
  static const std::string kLine = "http: listening on ";
  int port = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string log = serve.Log();
    const size_t at = log.find(kLine);
    if (at != std::string::npos) {
      const size_t colon = log.find(':', at + kLine.size());
      port = colon == std::string::npos ? -1 : std::atoi(log.c_str() + colon + 1);
      if (port > 0) return port;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

}  // namespace logdex::testing
