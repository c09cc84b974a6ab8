// The storage seam: every byte kvtier puts on a file system goes through
// FileSystem / File / IoQueue, so tests can swap in a fault-injecting
// implementation (io/fault_file_system.h).
//
// File: positional reads and writes, sync, truncate. Opening with
// `direct = true` asks for O_DIRECT; where the file system refuses it (tmpfs)
// the file silently falls back to buffered I/O and `File::direct()` says
// which one is in effect. With O_DIRECT, callers keep offsets, lengths and
// buffer addresses aligned to kIoAlign (io/aligned_buffer.h).
// IoQueue: batched asynchronous reads/writes through one io_uring ring with a
// bounded queue depth (falls back to synchronous pread/pwrite when io_uring
// is unavailable). One IoQueue serves one thread at a time.
//
// Errors are Status values: ENOSPC → kNoSpace, EIO and short transfers →
// kIOError, a missing path → kNotFound.
// Thread safety: FileSystem and File methods may be called from any thread
// (positional I/O has no shared cursor); an IoQueue is single-threaded.
// Ownership: a File closes its descriptor on destruction; the caller owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

// open() opens regular files only (a FIFO, device or directory is FailedPrecondition, without
// waiting on it).
struct OpenOptions {
  bool create = false;     // create when missing
  bool exclusive = false;  // with create: FailedPrecondition where the name exists (a symlink too)
  bool truncate = false;   // drop existing contents
  bool read_only = false;  // open O_RDONLY
  bool direct = false;     // ask for O_DIRECT (falls back to buffered where unsupported)
};

class File {
 public:
  virtual ~File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Reads up to `buf.size()` bytes at `offset`; fewer only at end of file.
  virtual Result<size_t> read(uint64_t offset, std::span<std::byte> buf) = 0;
  // Writes all of `buf` at `offset`, or returns an error (a short write is kIOError).
  virtual Status write(uint64_t offset, std::span<const std::byte> buf) = 0;
  virtual Status sync() = 0;  // fdatasync
  virtual Status truncate(uint64_t size) = 0;
  virtual Result<uint64_t> size() = 0;
  // True when O_DIRECT is in effect for this file.
  virtual bool direct() const = 0;
  virtual const std::string& path() const = 0;
  // The OS descriptor, for IoQueue implementations of the same FileSystem.
  virtual int native_handle() const = 0;

 protected:
  File() = default;
};

enum class IoKind : uint8_t { kRead = 0, kWrite = 1 };

// One operation of a batch. Inputs are set by the caller; `status` and
// `done` are filled by IoQueue::run. A transfer shorter than `len` is an
// error (kIOError) for both reads and writes.
struct IoOp {
  IoKind kind = IoKind::kRead;
  File* file = nullptr;
  uint64_t offset = 0;
  std::byte* buf = nullptr;  // read target or write source (not modified by writes)
  size_t len = 0;
  Status status;
  size_t done = 0;
};

class IoQueue {
 public:
  virtual ~IoQueue() = default;
  IoQueue(const IoQueue&) = delete;
  IoQueue& operator=(const IoQueue&) = delete;

  // Runs every op, keeping at most depth() in flight; returns when all are
  // complete. Returns OK when every op succeeded, else the first failure
  // (each op also carries its own status).
  virtual Status run(std::span<IoOp> ops) = 0;
  // As run(), and calls `on_done(i)` on the calling thread once ops[i] is
  // complete (status set) while later ops may still be in flight, so the
  // caller can consume results (verify, copy) under the I/O of the rest.
  // At most `max_inflight` ops (0: depth()) are in flight: a device that
  // completes everything queued at once still has reads to do while the
  // first results are consumed. The default runs the whole batch first,
  // then reports every op.
  virtual Status run_notify(std::span<IoOp> ops, const std::function<void(size_t)>& on_done, uint32_t max_inflight = 0) {
    (void)max_inflight;
    Status st = run(ops);
    for (size_t i = 0; i < ops.size(); ++i) on_done(i);
    return st;
  }
  virtual uint32_t depth() const = 0;
  // True when backed by io_uring (false: synchronous fallback).
  virtual bool async() const = 0;
  // False once the queue itself failed (not one op: the ring): requests may
  // be left in it, so it must not run another batch; its owner drops it.
  virtual bool reusable() const { return true; }

 protected:
  IoQueue() = default;
};

// A directory's lock, held until destroyed (FileSystem::lock_dir).
class DirLock {
 public:
  virtual ~DirLock() = default;
};

// Makes room for `files` more open files in this process, besides a reserve for its sockets and
// other files: raises the soft RLIMIT_NOFILE (never past the hard one) where it is lower. A clear
// error naming `what` and both limits where even the hard limit is too low (past it, open() fails
// with EMFILE at some later moment, for whatever the process opens then: a client's connection too).
Status reserve_open_files(uint64_t files, const std::string& what);

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The process-wide POSIX file system (Linux, io_uring when available).
  static FileSystem& posix();

  virtual Result<std::unique_ptr<File>> open(const std::string& path, const OpenOptions& options) = 0;
  virtual Status remove(const std::string& path) = 0;
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // mkdir -p; OK when it already exists as a directory.
  virtual Status create_dirs(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, sorted, without "." and "..".
  virtual Result<std::vector<std::string>> list_dir(const std::string& path) = 0;
  virtual Status sync_dir(const std::string& path) = 0;
  // Takes `dir`'s lock without waiting: an exclusive flock on dir + "/kvtier.lock" (created; it
  // holds the holder's pid). FailedPrecondition, naming the holder, while another process (or
  // another lock of this one) holds it.
  virtual Result<std::unique_ptr<DirLock>> lock_dir(const std::string& dir) = 0;
  // A batched-I/O queue of the given depth (1..4096).
  virtual Result<std::unique_ptr<IoQueue>> create_queue(uint32_t depth) = 0;

 protected:
  FileSystem() = default;
};

}  // namespace kvtier
