// ScratchDir: a bench's own directory, made fresh inside the one it is given and removed with its
// contents on every way out (never the given directory itself: `--dir /tmp` must not empty /tmp).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "kvtier/status.h"

namespace kvtier {

class ScratchDir {
 public:
  // `<parent>/kvtier-bench-<name>-<pid>-<n>`; the system temp directory when `parent` is empty.
  ScratchDir(const std::string& parent, const std::string& name) {
    static int counter = 0;
    std::error_code ec;
    const std::filesystem::path base = parent.empty() ? std::filesystem::temp_directory_path(ec) : std::filesystem::path(parent);
    path_ = base / ("kvtier-bench-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  // Makes it, empty. Close what was opened in it before the ScratchDir goes.
  Status create() const {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::create_directories(path_, ec);
    if (ec) return Status::IOError("cannot create " + path_.string() + ": " + ec.message());
    return Status::Ok();
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kvtier
