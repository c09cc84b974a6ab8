#include "io/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kvtier {
namespace {

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string path, bool direct) : fd_(fd), path_(std::move(path)), direct_(direct) {}
  ~PosixFile() override { ::close(fd_); }

  Result<size_t> read(uint64_t offset, std::span<std::byte> buf) override {
    size_t done = 0;
    while (done < buf.size()) {
      ssize_t n = ::pread(fd_, buf.data() + done, buf.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "pread " + path_);
      }
      if (n == 0) break;  // end of file
      done += static_cast<size_t>(n);
    }
    return done;
  }

  Status write(uint64_t offset, std::span<const std::byte> buf) override {
    size_t done = 0;
    while (done < buf.size()) {
      ssize_t n = ::pwrite(fd_, buf.data() + done, buf.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, "pwrite " + path_);
      }
      if (n == 0) return Status::IOError("pwrite " + path_ + ": wrote 0 bytes");
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  Status sync() override {
    if (::fdatasync(fd_) != 0) return Status::FromErrno(errno, "fdatasync " + path_);
    return Status::Ok();
  }
  Status truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Status::FromErrno(errno, "ftruncate " + path_);
    return Status::Ok();
  }
  Result<uint64_t> size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::FromErrno(errno, "fstat " + path_);
    return static_cast<uint64_t>(st.st_size);
  }
  bool direct() const override { return direct_; }
  const std::string& path() const override { return path_; }
  int native_handle() const override { return fd_; }

 private:
  int fd_;
  std::string path_;
  bool direct_;
};

// Synchronous stand-in when io_uring cannot be set up (old kernel, seccomp).
class SyncQueue final : public IoQueue {
 public:
  explicit SyncQueue(uint32_t depth) : depth_(depth) {}
  Status run(std::span<IoOp> ops) override {
    Status first;
    for (IoOp& op : ops) {
      op.done = 0;
      if (op.kind == IoKind::kRead) {
        auto r = op.file->read(op.offset, {op.buf, op.len});
        if (!r.ok()) op.status = r.status();
        else {
          op.done = *r;
          op.status = op.done == op.len ? Status::Ok() : Status::IOError("short read of " + op.file->path());
        }
      } else {
        op.status = op.file->write(op.offset, {op.buf, op.len});
        if (op.status.ok()) op.done = op.len;
      }
      if (!op.status.ok() && first.ok()) first = op.status;
    }
    return first;
  }
  uint32_t depth() const override { return depth_; }
  bool async() const override { return false; }

 private:
  uint32_t depth_;
};

class UringQueue final : public IoQueue {
 public:
  explicit UringQueue(uint32_t depth) : depth_(depth) {}
  ~UringQueue() override {
    if (ready_) io_uring_queue_exit(&ring_);
  }
  bool init() { return ready_ = (io_uring_queue_init(depth_, &ring_, 0) == 0); }

  Status run(std::span<IoOp> ops) override { return run_impl(ops, nullptr, depth_); }
  Status run_notify(std::span<IoOp> ops, const std::function<void(size_t)>& on_done, uint32_t max_inflight) override {
    return run_impl(ops, &on_done, max_inflight ? std::min(max_inflight, depth_) : depth_);
  }
  uint32_t depth() const override { return depth_; }
  bool async() const override { return true; }
  bool reusable() const override { return !broken_; }

 private:
  Status run_impl(std::span<IoOp> ops, const std::function<void(size_t)>* on_done, uint32_t max_inflight) {
    size_t next = 0, inflight = 0, completed = 0;
    for (IoOp& op : ops) {
      op.status = broken_ ? Status::Unavailable("io_uring queue failed earlier") : Status::Ok();
      op.done = 0;
    }
    if (broken_) return ops.empty() ? Status::Ok() : ops.front().status;
    // Queues ops until max_inflight are in the ring; true if any was queued.
    auto fill = [&] {
      bool queued = false;
      while (next < ops.size() && inflight < max_inflight) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (!sqe) break;
        IoOp& op = ops[next];
        if (op.kind == IoKind::kRead)
          io_uring_prep_read(sqe, op.file->native_handle(), op.buf, static_cast<unsigned>(op.len), op.offset);
        else
          io_uring_prep_write(sqe, op.file->native_handle(), op.buf, static_cast<unsigned>(op.len), op.offset);
        io_uring_sqe_set_data64(sqe, next);
        ++next;
        ++inflight;
        queued = true;
      }
      return queued;
    };
    std::vector<size_t> reaped_ops;
    std::vector<uint8_t> finished(ops.size(), 0);  // completed (for fail_remaining: the others failed)
    Status first;
    while (completed < ops.size()) {
      // One system call submits what was queued and waits for a completion
      // unless one is already there; then every completion present is reaped
      // before the queue is refilled, so submissions go out in batches.
      if (fill() || io_uring_cq_ready(&ring_) == 0) {
        int rc = io_uring_submit_and_wait(&ring_, io_uring_cq_ready(&ring_) ? 0 : 1);
        if (rc == -EINTR) continue;
        if (rc < 0) return fail_remaining(ops, finished, inflight, Status::FromErrno(-rc, "io_uring_submit_and_wait"));
      }
      reaped_ops.clear();
      unsigned head;
      io_uring_cqe* cqe = nullptr;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        const size_t index = io_uring_cqe_get_data64(cqe);
        IoOp& op = ops[index];
        --inflight;
        ++completed;
        finished[index] = 1;
        finish(op, cqe->res);
        if (!op.status.ok() && first.ok()) first = op.status;
        reaped_ops.push_back(index);
      }
      io_uring_cq_advance(&ring_, static_cast<unsigned>(reaped_ops.size()));
      if (!on_done) continue;
      // The callbacks (e.g. verifying what was read) run while the refilled
      // queue keeps the device busy, not while it sits drained.
      if (fill()) {
        int rc = io_uring_submit(&ring_);
        if (rc < 0 && rc != -EINTR) {
          for (size_t index : reaped_ops) (*on_done)(index);
          return fail_remaining(ops, finished, inflight, Status::FromErrno(-rc, "io_uring_submit"));
        }
      }
      for (size_t index : reaped_ops) (*on_done)(index);
    }
    return first;
  }

  static void finish(IoOp& op, int res) {
    if (res < 0) {
      op.status = Status::FromErrno(-res, op.kind == IoKind::kRead ? "io_uring read " + op.file->path()
                                                                   : "io_uring write " + op.file->path());
      return;
    }
    op.done = static_cast<size_t>(res);
    if (op.done == op.len) return;
    // A short transfer on a regular file: finish the rest synchronously (rare:
    // signals, end of file). A read that still falls short is an error.
    std::span<std::byte> rest(op.buf + op.done, op.len - op.done);
    if (op.kind == IoKind::kRead) {
      auto r = op.file->read(op.offset + op.done, rest);
      if (!r.ok()) { op.status = r.status(); return; }
      op.done += *r;
      if (op.done != op.len) op.status = Status::IOError("short read of " + op.file->path());
    } else {
      op.status = op.file->write(op.offset + op.done, rest);
      if (op.status.ok()) op.done = op.len;
    }
  }

  // A ring-level failure: reap what is in flight so no buffer is written after
  // return. Requests the kernel never took (a failed submit) are not in flight:
  // waiting for them would never end. They stay queued in the ring, so it is
  // never used again. Every op that did not complete fails with `st`: those
  // never queued, those queued and never taken, and those still in flight if
  // the wait itself fails (they kept the Ok they started with, and a write
  // that never happened passed for done).
  Status fail_remaining(std::span<IoOp> ops, std::vector<uint8_t>& finished, size_t inflight, Status st) {
    broken_ = true;
    inflight -= std::min<size_t>(inflight, io_uring_sq_ready(&ring_));
    while (inflight > 0) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) break;
      const size_t index = io_uring_cqe_get_data64(cqe);
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --inflight;
      finished[index] = 1;
      finish(ops[index], res);
    }
    for (size_t i = 0; i < ops.size(); ++i)
      if (!finished[i]) ops[i].status = st;
    return st;
  }

  uint32_t depth_;
  io_uring ring_{};
  bool ready_ = false;
  bool broken_ = false;  // a ring-level failure: see fail_remaining
};

class PosixDirLock final : public DirLock {
 public:
  explicit PosixDirLock(int fd) : fd_(fd) {}
  ~PosixDirLock() override {  // releases the flock
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_;
};

Result<std::unique_ptr<DirLock>> lock_dir_file(const std::string& dir) {
  const std::string path = dir + "/kvtier.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  // A read-only file system (an emergency remount after disk errors): nothing can be written there,
  // so the lock is taken on the file as it is, read-only, and the cache starts to serve what the
  // directory holds (its writes fail and the tier degrades). Without a lock file, none is needed.
  const bool read_only = fd < 0 && errno == EROFS;
  if (read_only) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (read_only && fd < 0 && errno == ENOENT) return std::unique_ptr<DirLock>(new PosixDirLock(-1));
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    (void)!::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) return Status::FromErrno(err, "flock " + path);
    return Status::FailedPrecondition(dir + " is in use by another kvtier (process " +
                                      std::string(pid, ::strnlen(pid, sizeof pid)) +
                                      "): two caches on one directory would overwrite each other's files");
  }
  if (read_only) return std::unique_ptr<DirLock>(new PosixDirLock(fd));
  const std::string mine = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, mine.data(), mine.size(), 0) != ssize_t(mine.size())) {
    const int err = errno;
    ::close(fd);
    return Status::FromErrno(err, "write " + path);
  }
  return std::unique_ptr<DirLock>(new PosixDirLock(fd));
}

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<DirLock>> lock_dir(const std::string& dir) override { return lock_dir_file(dir); }
  Result<std::unique_ptr<File>> open(const std::string& path, const OpenOptions& o) override {
    int flags = o.read_only ? O_RDONLY : O_RDWR;
    if (o.create) flags |= O_CREAT;
    if (o.create && o.exclusive) flags |= O_EXCL;
    if (o.truncate) flags |= O_TRUNC;
    flags |= O_CLOEXEC | O_NONBLOCK;  // a FIFO's open would wait for a writer; cleared below
    bool direct = o.direct;
    int fd = ::open(path.c_str(), flags | (direct ? O_DIRECT : 0), 0600);
    if (fd < 0 && direct && errno == EINVAL) {  // tmpfs and friends refuse O_DIRECT
      direct = false;
      // Such a filesystem creates the file before it refuses O_DIRECT: with O_EXCL the name
      // did not exist (else EEXIST), so the file is ours to remove before the buffered open.
      if (flags & O_EXCL) (void)::unlink(path.c_str());
      fd = ::open(path.c_str(), flags, 0600);
    }
    if (fd < 0 && errno == EEXIST) return Status::FailedPrecondition("open " + path + ": exists");
    if (fd < 0) return Status::FromErrno(errno, "open " + path);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
      ::close(fd);
      return Status::FailedPrecondition("open " + path + ": not a regular file");
    }
    return std::unique_ptr<File>(new PosixFile(fd, path, direct));
  }

  Status remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return Status::FromErrno(errno, "unlink " + path);
    return Status::Ok();
  }
  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return Status::FromErrno(errno, "rename " + from);
    return Status::Ok();
  }
  Status create_dirs(const std::string& path) override {
    if (path.empty()) return Status::InvalidArgument("create_dirs: empty path");
    for (size_t pos = 1; pos <= path.size(); ++pos) {
      if (pos != path.size() && path[pos] != '/') continue;
      std::string prefix = path.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir " + prefix);
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
    if (!S_ISDIR(st.st_mode)) return Status::FailedPrecondition(path + " is not a directory");
    return Status::Ok();
  }
  Result<std::vector<std::string>> list_dir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (!d) return Status::FromErrno(errno, "opendir " + path);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
  Status sync_dir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open dir " + path);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return Status::FromErrno(err, "fsync dir " + path);
    return Status::Ok();
  }
  Result<std::unique_ptr<IoQueue>> create_queue(uint32_t depth) override {
    if (depth == 0 || depth > 4096) return Status::InvalidArgument("IoQueue depth must be in 1..4096");
    auto q = std::make_unique<UringQueue>(depth);
    if (!q->init()) return std::unique_ptr<IoQueue>(new SyncQueue(depth));
    return std::unique_ptr<IoQueue>(std::move(q));
  }
};

}  // namespace

FileSystem& FileSystem::posix() {
  static PosixFileSystem fs;
  return fs;
}

Status reserve_open_files(uint64_t files, const std::string& what) {
  constexpr uint64_t kReserve = 256;  // sockets, the model file, logs: what the rest of the process opens
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return Status::FromErrno(errno, "getrlimit(RLIMIT_NOFILE)");
  const uint64_t want = files + kReserve;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < want) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? want : std::min<uint64_t>(want, lim.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < want)
    return Status::InvalidArgument(what + " keeps " + std::to_string(files) + " files open, and with " +
                                   std::to_string(kReserve) + " for the rest of the process that is more than " +
                                   std::to_string(lim.rlim_cur) + ", the most this process may open (ulimit -n; hard limit " +
                                   (lim.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_max)) +
                                   "): raise the limit, or keep fewer files");
  return Status::Ok();
}

}  // namespace kvtier
