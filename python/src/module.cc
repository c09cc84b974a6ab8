// The _kvtier extension module: errors, token and id conversions, KVGeometry.
#include <cstdlib>

#include "common/secrets.h"
#include <cstring>

#include "bindings.h"
#include "common/option_values.h"
#include "common/page_hash.h"

namespace kvtier::python {

std::span<std::byte> contiguous_bytes(const py::buffer& b, bool writable, const char* what) {
  py::buffer_info info = b.request(writable);
  if (info.format.find_first_of("OP") != std::string::npos)  // objects, pointers
    throw py::type_error(std::string(what) + " must hold plain values, not Python objects (dtype=object)");
  if (!PyBuffer_IsContiguous(info.view(), 'C')) throw py::value_error(std::string(what) + " must be C-contiguous");
  return {static_cast<std::byte*>(info.ptr), size_t(info.size) * size_t(info.itemsize)};
}

std::vector<TokenId> to_tokens(const py::handle& tokens) {
  if (py::isinstance<py::array>(tokens)) {
    // Integers only, each checked before it narrows: a cast would wrap 2^32 + 5 to 5, or truncate
    // 5.9, and hit another prompt's cached prefix.
    const auto a = py::reinterpret_borrow<py::array>(tokens);
    const char kind = a.dtype().kind();
    if ((kind != 'i' && kind != 'u') || a.ndim() != 1)
      throw py::type_error("tokens: expected a 1-D array of integer token ids");
    const auto wide = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);  // a u64 past 2^63: < 0
    std::vector<TokenId> out(size_t(wide.size()));
    for (ssize_t i = 0; i < wide.size(); ++i) {
      const int64_t id = wide.data()[i];
      if (id < 0 || id > INT32_MAX) throw py::value_error("tokens: id " + std::to_string(id) + " is out of range");
      out[size_t(i)] = TokenId(id);
    }
    return out;
  }
  if (py::hasattr(tokens, "tolist") && !py::isinstance<py::list>(tokens))  // torch tensors
    return to_tokens(tokens.attr("tolist")());
  std::vector<TokenId> out;
  try {
    out = py::cast<std::vector<TokenId>>(tokens);
  } catch (const py::cast_error&) {
    throw py::type_error("tokens: expected token ids (ints in [0, 2^31)) as a list, a 1-D integer array or a tensor");
  }
  for (const TokenId id : out)
    if (id < 0) throw py::value_error("tokens: id " + std::to_string(id) + " is out of range");
  return out;
}

namespace {

bool parse_hex64(std::string_view s, uint64_t& out) {
  out = 0;
  for (const char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return false;
    out = out << 4 | uint64_t(d);
  }
  return true;
}

}  // namespace

bool parse_hash_hex(std::string_view s, PageHash& out) {
  return s.size() == 32 && parse_hex64(s.substr(0, 16), out.hi) && parse_hex64(s.substr(16), out.lo);
}

PageHash to_model_id(const py::handle& id) {
  if (py::isinstance<py::bytes>(id)) {
    const std::string b = py::cast<std::string>(id);
    if (b.size() != 16) throw py::value_error("model_id: bytes must be 16 long (a 128-bit fingerprint)");
    PageHash h;
    std::memcpy(&h.lo, b.data(), 8);
    std::memcpy(&h.hi, b.data() + 8, 8);
    return h;
  }
  if (!py::isinstance<py::str>(id)) throw py::type_error("model_id: expected str or bytes");
  const std::string s = py::cast<std::string>(id);
  PageHash h;
  if (parse_hash_hex(s, h)) return h;  // PageHash::to_hex
  return hash_bytes(HashAlgo::kXXH3_128, s.data(), s.size());
}

void register_errors(py::module_& m) {
  static py::handle error = PyErr_NewExceptionWithDoc(
      "kvtier.Error",
      "A kvtier operation failed. `code` is kvtier's status code name (e.g. 'InvalidArgument', "
      "'NoSpace', 'Corruption'), `message` its message.",
      PyExc_RuntimeError, nullptr);
  m.attr("Error") = error;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object exc = py::reinterpret_borrow<py::object>(error)(e.what());
      exc.attr("code") = std::string(status_code_name(e.status().code()));
      exc.attr("message") = e.status().message();
      PyErr_SetObject(error.ptr(), exc.ptr());
    }
  });
}

void register_geometry(py::module_& m) {
  py::class_<KVGeometry>(m, "Geometry",
                         "KV geometry: layers, KV heads, head dim, dtype ('f32'|'f16'|'bf16'), tokens per page.\n"
                         "A page is one contiguous blob [layer][k|v][page_tokens][kv_heads][head_dim].")
      .def(py::init([](uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim, const std::string& dtype,
                       uint32_t page_tokens) {
             KVGeometry g{num_layers, num_kv_heads, head_dim, value_or_throw(parse_dtype(dtype)), page_tokens};
             throw_if_error(g.validate());
             return g;
           }),
           py::arg("num_layers"), py::arg("num_kv_heads"), py::arg("head_dim"), py::arg("dtype") = "f32",
           py::arg("page_tokens") = 16)
      .def_readonly("num_layers", &KVGeometry::num_layers)
      .def_readonly("num_kv_heads", &KVGeometry::num_kv_heads)
      .def_readonly("head_dim", &KVGeometry::head_dim)
      .def_readonly("page_tokens", &KVGeometry::page_tokens)
      .def_property_readonly("dtype", [](const KVGeometry& g) { return std::string(dtype_name(g.dtype)); })
      .def_property_readonly("page_bytes", &KVGeometry::page_bytes)
      .def_property_readonly("bytes_per_token", &KVGeometry::bytes_per_token)
      .def("__repr__", [](const KVGeometry& g) {
        return "Geometry(num_layers=" + std::to_string(g.num_layers) + ", num_kv_heads=" + std::to_string(g.num_kv_heads) +
               ", head_dim=" + std::to_string(g.head_dim) + ", dtype='" + std::string(dtype_name(g.dtype)) +
               "', page_tokens=" + std::to_string(g.page_tokens) + ")";
      });
}

}  // namespace kvtier::python

PYBIND11_MODULE(_kvtier, m) {
  kvtier::set_secret_lookup([](const char* name) -> const char* { return std::getenv(name); });  // KVTIER_TIER_SECRET, KVTIER_REDIS_PASSWORD
  m.doc() = "kvtier's C++ API (see the kvtier package and docs/PYTHON.md).";
  using namespace kvtier::python;
  register_errors(m);
  register_geometry(m);
  register_cache(m);
  register_model(m);
  register_bench(m);
  register_store(m);
  m.def("parse_size", [](const py::handle& v) { return value_or_throw(kvtier::parse_size(py::cast<std::string>(py::str(v)))); },
        py::arg("size"), "Bytes of a size as the options take it: an int, or a string such as \"8GiB\".");
}
