// Small helpers shared by the end-to-end tests: a temporary directory and
// JSON over loopback HTTP to a ServerProcess.
#pragma once

#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "test_http.h"

namespace kvtier::testing {

// A fresh directory under the system's temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("kvtier_e2e_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// status 0 when no response came back; body is discarded JSON when it did not parse.
struct Reply {
  int status = 0;
  nlohmann::json body;
};

inline Reply to_reply(const httplib::Result& r) {
  if (!r) return {};
  return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
}

inline Reply post_json(int port, const std::string& path, const nlohmann::json& body, const httplib::Headers& headers = {}) {
  auto c = kvtier::testing::local_client(port);
  return to_reply(c.Post(path, headers, body.dump(), "application/json"));
}

inline Reply get_json(int port, const std::string& path) {
  auto c = kvtier::testing::local_client(port);
  return to_reply(c.Get(path));
}

}  // namespace kvtier::testing
