// Process helpers for tests: ChildProcess (common/child_process.h) and Run().
#pragma once

#include <cstdio>
#include <string>

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

}  // namespace logdex::testing
