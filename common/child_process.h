// ChildProcess: a child started with arguments (args[0] is the program's
// path), its stdout and stderr going to a log file, stopped by a signal.
// Destruction kills it if it still runs. Used by `logdex demo`, the
// benchmarks that run `serve`, and the process tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace logdex {

class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> args, const std::string& log_path) : log_(log_path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~ChildProcess() {
    if (running()) {
      kill(pid_, SIGKILL);
      Wait();
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  bool running() {
    if (pid_ <= 0 || exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
      return false;
    }
    return true;
  }
  void Signal(int sig) {
    if (running()) kill(pid_, sig);
  }
  // Waits for exit; returns the exit code, or 128 + signal.
  int Wait() {
    if (!exited_ && pid_ > 0) {
      waitpid(pid_, &status_, 0);
      exited_ = true;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  // Waits up to `ms` for exit; false if it still runs.
  bool WaitFor(int ms) {
    for (int i = 0; i < ms / 10; ++i) {
      if (!running()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return !running();
  }
  // What it has written so far.
  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace logdex
