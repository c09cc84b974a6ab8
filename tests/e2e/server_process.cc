#include "e2e/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <regex>

extern char** environ;

namespace kvtier::testing {

std::string kvtier_binary() {
  const char* b = std::getenv("KVTIER_BINARY");
  return b ? b : "";
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  if (reader_.joinable()) reader_.join();
  if (out_fd_ >= 0) ::close(out_fd_);
}

bool ServerProcess::start(const std::vector<std::string>& args, double timeout_s) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  std::vector<std::string> argv_s = {kvtier_binary(), "serve", "--port", "0"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    pid_ = -1;
    ::close(fds[0]);
    log_ = std::string("posix_spawn failed: ") + std::strerror(rc);
    return false;
  }
  out_fd_ = fds[0];
  // Read until the "listening" line (or timeout / exit).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  const std::regex re("listening on http://[^:]+:([0-9]+)");
  std::smatch m;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{out_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n <= 0) break;
    std::lock_guard lk(mu_);
    log_.append(buf, size_t(n));
    if (std::regex_search(log_, m, re)) {
      port_ = std::stoi(m[1]);
      break;
    }
  }
  if (port_ == 0) return false;
  reader_ = std::thread([this] {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(out_fd_, buf, sizeof buf);
      if (n <= 0) return;
      std::lock_guard lk(mu_);
      log_.append(buf, size_t(n));
    }
  });
  return true;
}

void ServerProcess::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int ServerProcess::wait_exit(double timeout_s) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
  if (reader_.joinable()) reader_.join();
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return -(100 + WTERMSIG(st));
  return -1;
}

std::string ServerProcess::log() const {
  std::lock_guard lk(mu_);
  return log_;
}

}  // namespace kvtier::testing
