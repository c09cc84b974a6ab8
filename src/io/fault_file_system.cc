#include "io/fault_file_system.h"

#include <thread>

namespace kvtier {
namespace {

Status injected(FaultKind k, const std::string& what) {
  if (k == FaultKind::kNoSpace) return Status::NoSpace("injected ENOSPC: " + what);
  return Status::IOError("injected EIO: " + what);
}

void flip_middle(std::byte* buf, size_t len) {
  if (len > 0) buf[len / 2] ^= std::byte{0xFF};
}

// Half of len, kept O_DIRECT-aligned when the file needs it.
size_t short_len(size_t len, bool direct) { return direct ? (len / 2) / 4096 * 4096 : len / 2; }

class FaultFile final : public File {
 public:
  FaultFile(FaultFileSystem& fs, std::unique_ptr<File> inner) : fs_(fs), inner_(std::move(inner)) {}

  Result<size_t> read(uint64_t offset, std::span<std::byte> buf) override {
    auto d = fs_.decide(FaultOp::kRead, path(), offset, buf.size());
    if (d.fire) {
      switch (d.kind) {
        case FaultKind::kError:
        case FaultKind::kNoSpace: return injected(d.kind, "read " + path());
        case FaultKind::kShortIo: return inner_->read(offset, buf.first(short_len(buf.size(), direct())));
        case FaultKind::kDelay: std::this_thread::sleep_for(d.delay); break;
        case FaultKind::kBrokenRing: break;  // queues only
        case FaultKind::kHold: break;        // opens only
        case FaultKind::kFlipBytes: {
          auto r = inner_->read(offset, buf);
          if (r.ok()) flip_middle(buf.data(), *r);
          return r;
        }
      }
    }
    return inner_->read(offset, buf);
  }

  Status write(uint64_t offset, std::span<const std::byte> buf) override {
    auto d = fs_.decide(FaultOp::kWrite, path(), offset, buf.size());
    if (d.fire) {
      switch (d.kind) {
        case FaultKind::kError:
        case FaultKind::kNoSpace: return injected(d.kind, "write " + path());
        case FaultKind::kShortIo: {
          KVTIER_RETURN_IF_ERROR(inner_->write(offset, buf.first(short_len(buf.size(), direct()))));
          return Status::IOError("injected short write: " + path());
        }
        case FaultKind::kDelay: std::this_thread::sleep_for(d.delay); break;
        case FaultKind::kFlipBytes: break;  // corruption is injected on reads
        case FaultKind::kBrokenRing: break;  // queues only
        case FaultKind::kHold: break;        // opens only
      }
    }
    return inner_->write(offset, buf);
  }

  Status sync() override { return simple(FaultOp::kSync, "sync", [&] { return inner_->sync(); }); }
  Status truncate(uint64_t size) override {
    return simple(FaultOp::kWrite, "truncate", [&] { return inner_->truncate(size); });
  }
  Result<uint64_t> size() override { return inner_->size(); }
  bool direct() const override { return inner_->direct(); }
  const std::string& path() const override { return inner_->path(); }
  int native_handle() const override { return inner_->native_handle(); }
  File* inner() { return inner_.get(); }

 private:
  template <class F>
  Status simple(FaultOp op, const char* what, F&& f) {
    auto d = fs_.decide(op, path());
    if (d.fire) {
      if (d.kind == FaultKind::kDelay) std::this_thread::sleep_for(d.delay);
      else if (d.kind != FaultKind::kFlipBytes && d.kind != FaultKind::kBrokenRing)
        return injected(d.kind, std::string(what) + " " + path());
    }
    return f();
  }

  FaultFileSystem& fs_;
  std::unique_ptr<File> inner_;
};

class FaultQueue final : public IoQueue {
 public:
  FaultQueue(FaultFileSystem& fs, std::unique_ptr<IoQueue> inner) : fs_(fs), inner_(std::move(inner)) {}

  Status run(std::span<IoOp> ops) override {
    std::vector<IoOp> pass;
    std::vector<size_t> origin;
    std::vector<FaultFileSystem::Decision> decisions(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      IoOp& op = ops[i];
      auto* ff = static_cast<FaultFile*>(op.file);
      op.done = 0;
      op.status = Status::Ok();
      auto d = fs_.decide(op.kind == IoKind::kRead ? FaultOp::kRead : FaultOp::kWrite, ff->path(), op.offset, op.len);
      decisions[i] = d;
      IoOp inner = op;
      inner.file = ff->inner();
      if (d.fire) {
        if (d.kind == FaultKind::kError || d.kind == FaultKind::kNoSpace) {
          op.status = injected(d.kind, ff->path());
          continue;
        }
        if (d.kind == FaultKind::kDelay) std::this_thread::sleep_for(d.delay);
        if (d.kind == FaultKind::kBrokenRing) ring_failed_ = true;
        if (d.kind == FaultKind::kShortIo) inner.len = short_len(op.len, ff->direct());
        if (d.kind == FaultKind::kFlipBytes && op.kind == IoKind::kWrite) decisions[i].fire = false;
      }
      if (inner.len == 0) {
        op.status = Status::IOError("injected short transfer: " + ff->path());
        continue;
      }
      pass.push_back(inner);
      origin.push_back(i);
    }
    if (!pass.empty()) (void)inner_->run(pass);
    for (size_t j = 0; j < pass.size(); ++j) {
      IoOp& op = ops[origin[j]];
      const auto& d = decisions[origin[j]];
      op.status = pass[j].status;
      op.done = pass[j].done;
      if (!d.fire || !op.status.ok()) continue;
      if (d.kind == FaultKind::kShortIo)
        op.status = Status::IOError(std::string("injected short ") + (op.kind == IoKind::kRead ? "read: " : "write: ") +
                                    op.file->path());
      else if (d.kind == FaultKind::kFlipBytes)
        flip_middle(op.buf, op.done);
    }
    Status first;
    for (const IoOp& op : ops)
      if (!op.status.ok()) return op.status;
    return first;
  }
  uint32_t depth() const override { return inner_->depth(); }
  bool async() const override { return inner_->async(); }
  bool reusable() const override { return !ring_failed_ && inner_->reusable(); }

 private:
  FaultFileSystem& fs_;
  std::unique_ptr<IoQueue> inner_;
  bool ring_failed_ = false;  // a kBrokenRing fired in one of its batches
};

bool matches(FaultOp rule, FaultOp call) { return rule == FaultOp::kAny || rule == call; }

}  // namespace

void FaultFileSystem::add_rule(const FaultRule& rule) {
  std::lock_guard lock(mu_);
  rules_.push_back({rule, 0});
}

void FaultFileSystem::clear_rules() {
  std::lock_guard lock(mu_);
  rules_.clear();
}

uint64_t FaultFileSystem::fired() const {
  std::lock_guard lock(mu_);
  return fired_;
}

uint64_t FaultFileSystem::calls(FaultOp op) const {
  std::lock_guard lock(mu_);
  if (op != FaultOp::kAny) return calls_[static_cast<int>(op)];
  uint64_t n = 0;
  for (uint64_t c : calls_) n += c;
  return n;
}

void FaultFileSystem::record(bool on) {
  std::lock_guard lock(mu_);
  recording_ = on;
  recorded_.clear();
}

std::vector<FaultFileSystem::IoCall> FaultFileSystem::recorded() const {
  std::lock_guard lock(mu_);
  return recorded_;
}

FaultFileSystem::Decision FaultFileSystem::decide(FaultOp op, const std::string& path, uint64_t offset, size_t len) {
  std::lock_guard lock(mu_);
  ++calls_[static_cast<int>(op)];
  if (recording_ && len > 0) recorded_.push_back({op, path, offset, len});
  Decision out;
  for (RuleState& rs : rules_) {
    if (!matches(rs.rule.op, op)) continue;
    if (!rs.rule.path_contains.empty() && path.find(rs.rule.path_contains) == std::string::npos) continue;
    uint64_t n = ++rs.seen;
    bool fire = n >= rs.rule.nth && (rs.rule.times == 0 || n < rs.rule.nth + rs.rule.times);
    if (fire && !out.fire) {
      out = {true, rs.rule.kind, rs.rule.delay};
      ++fired_;
    }
  }
  return out;
}

void FaultFileSystem::release_held() {
  {
    std::lock_guard lock(mu_);
    released_ = true;
  }
  held_cv_.notify_all();
}

Result<std::unique_ptr<File>> FaultFileSystem::open(const std::string& path, const OpenOptions& options) {
  auto d = decide(FaultOp::kOpen, path);
  if (d.fire && d.kind == FaultKind::kHold) {
    std::unique_lock lock(mu_);
    held_cv_.wait(lock, [&] { return released_; });
  }
  if (d.fire && (d.kind == FaultKind::kError || d.kind == FaultKind::kNoSpace || d.kind == FaultKind::kShortIo))
    return injected(d.kind, "open " + path);
  if (d.fire && d.kind == FaultKind::kDelay) std::this_thread::sleep_for(d.delay);
  KVTIER_ASSIGN_OR_RETURN(auto f, inner_.open(path, options));
  return std::unique_ptr<File>(new FaultFile(*this, std::move(f)));
}

Status FaultFileSystem::remove(const std::string& path) {
  auto d = decide(FaultOp::kRemove, path);
  if (d.fire && (d.kind == FaultKind::kError || d.kind == FaultKind::kNoSpace)) return injected(d.kind, "remove " + path);
  return inner_.remove(path);
}
Status FaultFileSystem::rename(const std::string& from, const std::string& to) { return inner_.rename(from, to); }
Status FaultFileSystem::create_dirs(const std::string& path) {
  auto d = decide(FaultOp::kOpen, path);
  if (d.fire && (d.kind == FaultKind::kError || d.kind == FaultKind::kNoSpace)) return injected(d.kind, "mkdir " + path);
  return inner_.create_dirs(path);
}
Result<std::vector<std::string>> FaultFileSystem::list_dir(const std::string& path) { return inner_.list_dir(path); }
Status FaultFileSystem::sync_dir(const std::string& path) {
  auto d = decide(FaultOp::kSync, path);
  if (d.fire && (d.kind == FaultKind::kError || d.kind == FaultKind::kNoSpace)) return injected(d.kind, "sync_dir " + path);
  return inner_.sync_dir(path);
}
Result<std::unique_ptr<IoQueue>> FaultFileSystem::create_queue(uint32_t depth) {
  auto d = decide(FaultOp::kQueue, {});
  if (d.fire && (d.kind == FaultKind::kError || d.kind == FaultKind::kNoSpace)) return injected(d.kind, "create_queue");
  KVTIER_ASSIGN_OR_RETURN(auto q, inner_.create_queue(depth));
  return std::unique_ptr<IoQueue>(new FaultQueue(*this, std::move(q)));
}

}  // namespace kvtier
