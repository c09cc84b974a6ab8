// Shared pieces of the kvtier Python extension (python/kvtier/_kvtier):
// how a Status becomes a Python exception, how token sequences cross the
// boundary, and the per-file registration functions the module calls.
//
// The extension holds no cache logic: every call forwards to the C++ API
// (src/cache, src/engine) and converts arguments and results. Calls that
// may block (waits, I/O, compute) release the GIL.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/types.h"

namespace kvtier::python {

namespace py = pybind11;

// Thrown by throw_if_error; translated to kvtier.Error(code, message).
class StatusError : public std::exception {
 public:
  explicit StatusError(Status st) : st_(std::move(st)), what_(st_.to_string()) {}
  const char* what() const noexcept override { return what_.c_str(); }
  const Status& status() const { return st_; }

 private:
  Status st_;
  std::string what_;
};

inline void throw_if_error(const Status& st) {
  if (!st.ok()) throw StatusError(st);
}
template <class T>
T value_or_throw(Result<T>&& r) {
  throw_if_error(r.status());
  return std::move(r).value();
}

// The bytes of a C-contiguous buffer of plain values (`what` names it in the errors): a buffer of
// Python objects (numpy's dtype=object) holds pointers the caller's KV would overwrite.
std::span<std::byte> contiguous_bytes(const py::buffer& b, bool writable, const char* what);

// A token sequence from any Python sequence of ints or a 1-D integer array.
std::vector<TokenId> to_tokens(const py::handle& tokens);

// A PageHash from its 32-digit hex form (PageHash::to_hex), 16 raw bytes, or
// any other string (hashed with XXH3-128, so a model name is a usable id).
PageHash to_model_id(const py::handle& id);
// PageHash::to_hex's form back (32 hex digits, hi then lo); false when malformed.
bool parse_hash_hex(std::string_view s, PageHash& out);

void register_errors(py::module_& m);
void register_geometry(py::module_& m);
void register_cache(py::module_& m);
void register_model(py::module_& m);
void register_bench(py::module_& m);
void register_store(py::module_& m);

}  // namespace kvtier::python
