// FaultFileSystem: a FileSystem wrapper that injects faults, for tests.
//
// Rules say which call fails and how: the Nth matching call (1-based,
// counted per rule) and the `times - 1` matching calls after it fire (times
// = 0: every call from the Nth on). Kinds: kError (EIO, nothing done),
// kNoSpace (ENOSPC, nothing done), kShortIo (half the bytes are transferred,
// then an error — a torn write or a truncated read), kFlipBytes (a read
// succeeds but one byte in the middle of the buffer is inverted), kDelay
// (the call sleeps, then proceeds), kBrokenRing (a queue's op completes,
// but its queue then reports a failure of the ring itself:
// IoQueue::reusable() false; File calls ignore it). Faults apply to File
// calls and to the ops of IoQueue batches alike; FaultOp::kQueue is the
// creation of a queue (kError or kNoSpace fail it). While recording is on, every read and write
// (of at least one byte) is also logged with its byte range, so tests can
// check the I/O pattern.
//
// Thread safety: all methods are thread-safe. Ownership: wraps `inner`
// (not owned; must outlive this object and every File it opens).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "io/file_system.h"

namespace kvtier {

// kHold (open only): the call waits until release_held() (a stalled file system, for as long as the test says).
enum class FaultKind : uint8_t { kError = 0, kNoSpace, kShortIo, kFlipBytes, kDelay, kBrokenRing, kHold };
enum class FaultOp : uint8_t { kAny = 0, kRead, kWrite, kSync, kOpen, kQueue, kRemove };
inline constexpr int kNumFaultOps = static_cast<int>(FaultOp::kRemove) + 1;

struct FaultRule {
  FaultKind kind = FaultKind::kError;
  FaultOp op = FaultOp::kAny;  // kWrite also matches truncate; kSync matches sync and sync_dir
  uint64_t nth = 1;
  uint64_t times = 1;
  std::string path_contains;  // empty: any path
  std::chrono::microseconds delay{1000};
};

class FaultFileSystem final : public FileSystem {
 public:
  explicit FaultFileSystem(FileSystem& inner) : inner_(inner) {}

  void add_rule(const FaultRule& rule);
  void clear_rules();
  // How many faults have fired so far (all rules).
  uint64_t fired() const;
  // Lets every kHold call (waiting or to come) go on.
  void release_held();
  // How many calls of kind `op` went through (kAny: all).
  uint64_t calls(FaultOp op) const;

  struct IoCall {
    FaultOp op;  // kRead or kWrite
    std::string path;
    uint64_t offset;
    size_t len;
  };
  void record(bool on);
  std::vector<IoCall> recorded() const;  // reads and writes since recording was turned on, in call order

  // The fault (if any) the next call of kind `op` on `path` suffers (a read
  // or write of [offset, offset + len)). Counts the call. Public so the
  // wrapped File and IoQueue can ask; tests rarely need it.
  struct Decision {
    bool fire = false;
    FaultKind kind = FaultKind::kError;
    std::chrono::microseconds delay{0};
  };
  Decision decide(FaultOp op, const std::string& path, uint64_t offset = 0, size_t len = 0);

  Result<std::unique_ptr<File>> open(const std::string& path, const OpenOptions& options) override;
  Status remove(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status create_dirs(const std::string& path) override;
  Result<std::vector<std::string>> list_dir(const std::string& path) override;
  Status sync_dir(const std::string& path) override;
  Result<std::unique_ptr<DirLock>> lock_dir(const std::string& dir) override { return inner_.lock_dir(dir); }
  Result<std::unique_ptr<IoQueue>> create_queue(uint32_t depth) override;

 private:
  struct RuleState {
    FaultRule rule;
    uint64_t seen = 0;
  };
  FileSystem& inner_;
  mutable std::mutex mu_;
  std::vector<RuleState> rules_;
  uint64_t fired_ = 0;
  uint64_t calls_[kNumFaultOps] = {};
  std::condition_variable held_cv_;  // kHold calls wait on it
  bool released_ = false;
  bool recording_ = false;
  std::vector<IoCall> recorded_;
};

}  // namespace kvtier
