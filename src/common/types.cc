#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/page_hash.h"
#include "kvtier/namespace.h"
#include "kvtier/status.h"
#include "kvtier/types.h"

namespace kvtier {

std::string_view status_code_name(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kBusy: return "Busy";
    case StatusCode::kRetry: return "Retry";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kNoSpace: return "NoSpace";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string s(status_code_name(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::FromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return NoSpace(std::move(msg));
  if (err == EAGAIN || err == EINTR) return Retry(std::move(msg));
  if (err == ENOENT) return NotFound(std::move(msg));
  if (err == EINVAL) return InvalidArgument(std::move(msg));
  return IOError(std::move(msg));
}

std::string_view tier_name(TierKind t) {
  switch (t) {
    case TierKind::kDevice: return "device";
    case TierKind::kHost: return "host";
    case TierKind::kDisk: return "disk";
    case TierKind::kRemote: return "remote";
  }
  return "unknown";
}

std::string_view kv_event_kind_name(KvEventKind k) {
  switch (k) {
    case KvEventKind::kStored: return "stored";
    case KvEventKind::kMoved: return "moved";
    case KvEventKind::kRemoved: return "removed";
    case KvEventKind::kCleared: return "cleared";
  }
  return "?";
}

std::string PageHash::to_hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "unknown";
}

Result<DType> parse_dtype(std::string_view n) {
  if (n == "f32") return DType::kF32;
  if (n == "f16") return DType::kF16;
  if (n == "bf16") return DType::kBF16;
  return Status::InvalidArgument("unknown KV dtype '" + std::string(n) + "' (expected f32, f16 or bf16)");
}

Status KVGeometry::validate() const {
  if (num_layers == 0 || num_layers > 1024) return Status::InvalidArgument("KVGeometry: num_layers must be in [1, 1024]");
  if (num_kv_heads == 0 || num_kv_heads > 1024) return Status::InvalidArgument("KVGeometry: num_kv_heads must be in [1, 1024]");
  if (head_dim == 0 || head_dim > 4096) return Status::InvalidArgument("KVGeometry: head_dim must be in [1, 4096]");
  if (page_tokens == 0 || page_tokens > 1024) return Status::InvalidArgument("KVGeometry: page_tokens must be in [1, 1024]");
  if (dtype_size(dtype) == 0) return Status::InvalidArgument("KVGeometry: bad dtype");
  return Status::Ok();
}

std::string_view hash_algo_name(HashAlgo a) { return a == HashAlgo::kSHA256 ? "sha256" : "xxh3"; }

Result<HashAlgo> parse_hash_algo(std::string_view n) {
  if (n == "xxh3" || n == "xxh3-128") return HashAlgo::kXXH3_128;
  if (n == "sha256") return HashAlgo::kSHA256;
  return Status::InvalidArgument("unknown hash algorithm '" + std::string(n) + "' (expected xxh3 or sha256)");
}

PageHash namespace_seed(const Namespace& ns, HashAlgo algo) {
  // Canonical encoding: tag, fingerprint (lo, hi), then length-prefixed strings.
  std::string buf = "kvtier-namespace-v1";
  buf.push_back('\0');
  buf.append(reinterpret_cast<const char*>(&ns.model_fingerprint.lo), 8);
  buf.append(reinterpret_cast<const char*>(&ns.model_fingerprint.hi), 8);
  for (const std::string* s : {&ns.adapter_id, &ns.cache_salt}) {
    uint64_t n = s->size();
    buf.append(reinterpret_cast<const char*>(&n), 8);
    buf.append(*s);
  }
  if (!ns.tenant.empty()) {  // absent field: the seeds of a deployment without tenants
    buf.append("\0tenant", 7);
    const uint64_t n = ns.tenant.size();
    buf.append(reinterpret_cast<const char*>(&n), 8);
    buf.append(ns.tenant);
  }
  return hash_bytes(algo, buf.data(), buf.size());
}

}  // namespace kvtier
