#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "io/aligned_buffer.h"
#include "io/fault_file_system.h"

namespace kvtier {
namespace {

class TempDir {
 public:
  explicit TempDir(const std::string& base = "/tmp") {
    std::string tmpl = base + "/kvtier-io-XXXXXX";
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

AlignedBuffer pattern(size_t n, uint8_t seed) {
  AlignedBuffer b(n);
  for (size_t i = 0; i < n; ++i) b.data()[i] = std::byte(uint8_t(i * 31 + seed));
  return b;
}

TEST(FileSystem, WriteReadSyncTruncateList) {
  TempDir dir;
  FileSystem& fs = FileSystem::posix();
  ASSERT_TRUE(fs.create_dirs(dir.path() + "/a/b").ok());
  auto f = fs.open(dir.path() + "/a/b/f", {.create = true, .direct = true});
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto src = pattern(3 * kIoAlign, 1);
  ASSERT_TRUE((*f)->write(kIoAlign, src.span()).ok());
  ASSERT_TRUE((*f)->sync().ok());
  EXPECT_EQ(*(*f)->size(), 4 * kIoAlign);
  AlignedBuffer dst(3 * kIoAlign);
  auto n = (*f)->read(kIoAlign, dst.span());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3 * kIoAlign);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), dst.size()), 0);
  ASSERT_TRUE((*f)->truncate(2 * kIoAlign).ok());
  EXPECT_EQ(*(*f)->read(0, dst.span()), 2 * kIoAlign);  // short only at end of file
  auto names = fs.list_dir(dir.path() + "/a/b");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"f"});
  ASSERT_TRUE(fs.remove(dir.path() + "/a/b/f").ok());
  EXPECT_EQ(fs.open(dir.path() + "/a/b/f", {}).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs.list_dir(dir.path() + "/missing").ok());
}

// Buffers for direct I/O come in whole huge pages, aligned to one, zero-filled.
TEST(AlignedBuffer, IoBuffersAreWholeHugePages) {
  for (size_t n : {size_t(0), size_t(1), size_t(136) << 10, kHugePage, kHugePage + 1}) {
    SCOPED_TRACE(n);
    AlignedBuffer b = AlignedBuffer::for_io(n);
    EXPECT_EQ(b.size(), align_up(std::max<size_t>(n, 1), kHugePage));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHugePage, 0u);
    EXPECT_EQ(b.data()[0], std::byte{0});
    EXPECT_EQ(b.data()[b.size() - 1], std::byte{0});
  }
}

TEST(FileSystem, DirectFallsBackOnTmpfs) {
  if (!std::filesystem::exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  TempDir dir("/dev/shm");
  auto f = FileSystem::posix().open(dir.path() + "/f", {.create = true, .direct = true});
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto src = pattern(100, 2);  // unaligned length works once buffered
  ASSERT_TRUE((*f)->write(3, src.span()).ok());
  AlignedBuffer dst(100);
  EXPECT_EQ(*(*f)->read(3, dst.span()), 100u);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 100), 0);
}

TEST(IoQueue, BatchedWritesAndReadsRoundTrip) {
  TempDir dir;
  FileSystem& fs = FileSystem::posix();
  auto f = fs.open(dir.path() + "/f", {.create = true, .direct = true}).value();
  auto q = fs.create_queue(4).value();
  EXPECT_EQ(q->depth(), 4u);
  const size_t kOps = 17, kLen = 2 * kIoAlign;
  auto src = pattern(kOps * kLen, 3);
  std::vector<IoOp> ops(kOps);
  for (size_t i = 0; i < kOps; ++i) ops[i] = {IoKind::kWrite, f.get(), i * kLen, src.data() + i * kLen, kLen};
  ASSERT_TRUE(q->run(ops).ok());
  AlignedBuffer dst(kOps * kLen);
  for (size_t i = 0; i < kOps; ++i) ops[i] = {IoKind::kRead, f.get(), i * kLen, dst.data() + i * kLen, kLen};
  ASSERT_TRUE(q->run(ops).ok());
  for (auto& op : ops) EXPECT_EQ(op.done, kLen);
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), dst.size()), 0);
  // Reading past the end is a short read: an error, not silent zeros.
  IoOp past{IoKind::kRead, f.get(), kOps * kLen - kIoAlign, dst.data(), kLen};
  EXPECT_EQ(q->run({&past, 1}).code(), StatusCode::kIOError);
  EXPECT_FALSE(fs.create_queue(0).ok());
}

// Makes every io_uring_enter of this process fail with EAGAIN (a seccomp filter; for a forked child).
bool fail_io_uring_enter() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_enter, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EAGAIN & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

// A ring whose submit fails fails every op it did not complete: the writes it had queued (and the
// kernel never took) kept the Ok they started with, so the disk tier's writer counted bytes that
// never reached the file as written, and its flush() said they were durable.
TEST(IoQueue, AFailedSubmitFailsEveryOpItDidNotComplete) {
  TempDir dir;
  FileSystem& fs = FileSystem::posix();
  auto f = fs.open(dir.path() + "/f", {.create = true, .direct = true}).value();
  auto q = fs.create_queue(4).value();
  if (!q->async()) GTEST_SKIP() << "no io_uring here";
  const size_t kOps = 5, kLen = kIoAlign;
  auto src = pattern(kOps * kLen, 5);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // exits 0 when every op failed, 1 when one passed for done, 2 when the filter failed
    if (!fail_io_uring_enter()) ::_exit(2);
    std::vector<IoOp> ops(kOps);
    for (size_t i = 0; i < kOps; ++i) ops[i] = {IoKind::kWrite, f.get(), i * kLen, src.data() + i * kLen, kLen};
    const Status st = q->run(ops);
    bool all_failed = !st.ok();
    for (const IoOp& op : ops) all_failed = all_failed && !op.status.ok();
    ::_exit(all_failed ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "seccomp filters are not allowed here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "an op the ring never completed was reported done";
}

// run_notify reports each op once, after its bytes are in place, and keeps
// no more than max_inflight ops queued: with one in flight (refilled before
// the callback runs), the op two places later has not been read yet.
TEST(IoQueue, RunNotifyReportsEveryOpAndBoundsWhatIsInFlight) {
  TempDir dir;
  FileSystem& fs = FileSystem::posix();
  auto f = fs.open(dir.path() + "/f", {.create = true, .direct = true}).value();
  auto q = fs.create_queue(8).value();
  const size_t kOps = 12, kLen = kIoAlign;
  auto src = pattern(kOps * kLen, 7);
  std::vector<IoOp> ops(kOps);
  for (size_t i = 0; i < kOps; ++i) ops[i] = {IoKind::kWrite, f.get(), i * kLen, src.data() + i * kLen, kLen};
  ASSERT_TRUE(q->run(ops).ok());
  for (uint32_t max_inflight : {1u, 3u, 0u}) {
    AlignedBuffer dst(kOps * kLen);  // zeros: pattern() never makes a whole zero block
    for (size_t i = 0; i < kOps; ++i) ops[i] = {IoKind::kRead, f.get(), i * kLen, dst.data() + i * kLen, kLen};
    std::vector<int> reported(kOps, 0);
    ASSERT_TRUE(q->run_notify(ops, [&](size_t i) {
                   ++reported[i];
                   EXPECT_EQ(std::memcmp(dst.data() + i * kLen, src.data() + i * kLen, kLen), 0) << i;
                   if (max_inflight == 1 && i + 2 < kOps) {
                     const std::byte* later = dst.data() + (i + 2) * kLen;
                     EXPECT_TRUE(std::all_of(later, later + kLen, [](std::byte b) { return b == std::byte{0}; })) << i;
                   }
                 }, max_inflight).ok());
    EXPECT_EQ(reported, std::vector<int>(kOps, 1)) << max_inflight;
  }
}

struct FaultCase {
  FaultKind kind;
  StatusCode write_code;  // expected status of the faulted write
};

class FaultKinds : public ::testing::TestWithParam<FaultCase> {};

TEST_P(FaultKinds, FileWriteFaults) {
  TempDir dir;
  FaultFileSystem fs(FileSystem::posix());
  auto f = fs.open(dir.path() + "/f", {.create = true}).value();
  auto src = pattern(kIoAlign, 4);
  fs.add_rule({.kind = GetParam().kind, .op = FaultOp::kWrite, .nth = 2, .delay = std::chrono::microseconds(100)});
  EXPECT_TRUE(f->write(0, src.span()).ok());  // call 1: untouched
  Status s = f->write(kIoAlign, src.span());  // call 2: faulted
  EXPECT_EQ(s.code(), GetParam().write_code) << s.to_string();
  EXPECT_TRUE(f->write(2 * kIoAlign, src.span()).ok());  // call 3: untouched again
}

INSTANTIATE_TEST_SUITE_P(All, FaultKinds,
                         ::testing::Values(FaultCase{FaultKind::kError, StatusCode::kIOError},
                                           FaultCase{FaultKind::kNoSpace, StatusCode::kNoSpace},
                                           FaultCase{FaultKind::kShortIo, StatusCode::kIOError},
                                           FaultCase{FaultKind::kDelay, StatusCode::kOk},
                                           FaultCase{FaultKind::kFlipBytes, StatusCode::kOk}));

TEST(FaultFileSystem, ReadFaultsOnFileAndQueue) {
  TempDir dir;
  FaultFileSystem fs(FileSystem::posix());
  auto f = fs.open(dir.path() + "/f", {.create = true, .direct = true}).value();
  auto src = pattern(4 * kIoAlign, 5);
  ASSERT_TRUE(f->write(0, src.span()).ok());
  AlignedBuffer dst(4 * kIoAlign);

  fs.add_rule({.kind = FaultKind::kFlipBytes, .op = FaultOp::kRead});
  ASSERT_TRUE(f->read(0, dst.span()).ok());
  EXPECT_NE(std::memcmp(src.data(), dst.data(), dst.size()), 0);
  fs.clear_rules();

  fs.add_rule({.kind = FaultKind::kShortIo, .op = FaultOp::kRead});
  EXPECT_EQ(*f->read(0, dst.span()), 2 * kIoAlign);
  fs.clear_rules();

  auto q = fs.create_queue(8).value();
  std::vector<IoOp> ops(4);
  auto reset = [&] {
    for (size_t i = 0; i < 4; ++i) ops[i] = {IoKind::kRead, f.get(), i * kIoAlign, dst.data() + i * kIoAlign, kIoAlign};
  };
  fs.add_rule({.kind = FaultKind::kError, .op = FaultOp::kRead, .nth = 2});
  fs.add_rule({.kind = FaultKind::kFlipBytes, .op = FaultOp::kRead, .nth = 3});
  fs.add_rule({.kind = FaultKind::kShortIo, .op = FaultOp::kRead, .nth = 4});
  reset();
  EXPECT_FALSE(q->run(ops).ok());
  EXPECT_TRUE(ops[0].status.ok());
  EXPECT_EQ(ops[1].status.code(), StatusCode::kIOError);
  EXPECT_TRUE(ops[2].status.ok());
  EXPECT_NE(std::memcmp(src.data() + 2 * kIoAlign, dst.data() + 2 * kIoAlign, kIoAlign), 0);  // flipped
  EXPECT_EQ(ops[3].status.code(), StatusCode::kIOError);  // short (rounded to 0 for O_DIRECT or half)
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), kIoAlign), 0);
  EXPECT_GE(fs.fired(), 3u);
  EXPECT_GE(fs.calls(FaultOp::kRead), 6u);

  fs.clear_rules();
  fs.add_rule({.kind = FaultKind::kNoSpace, .op = FaultOp::kWrite, .times = 0});
  IoOp w{IoKind::kWrite, f.get(), 0, src.data(), kIoAlign};
  EXPECT_EQ(q->run({&w, 1}).code(), StatusCode::kNoSpace);
  EXPECT_EQ(f->write(0, src.span().first(kIoAlign)).code(), StatusCode::kNoSpace);
  fs.add_rule({.kind = FaultKind::kError, .op = FaultOp::kOpen});
  EXPECT_FALSE(fs.open(dir.path() + "/g", {.create = true}).ok());
}

}  // namespace
}  // namespace kvtier
