// The C++ side of the Python load benchmark (docs/PERF.md, python/bench):
// the same load a Python caller issues, timed without Python in between.
#include <chrono>

#include "py_cache.h"

namespace kvtier::python {

void register_bench(py::module_& m) {
  m.def(
      "cpp_load_seconds",
      [](CacheHandle& h, MatchHandle& match) {
        if (!match.lookup) throw StatusError(Status::FailedPrecondition("cpp_load_seconds: this Match was already loaded"));
        CacheLookup look = std::move(*match.lookup);
        match.lookup.reset();
        return h.locked([&](KVCache& c) {
          const auto t0 = std::chrono::steady_clock::now();
          const Plan plan = c.plan(look);
          CacheLease lease = value_or_throw(c.apply(std::move(look), plan));
          for (uint32_t l = 0; l < c.geometry().num_layers; ++l) throw_if_error(lease.wait_layer(LayerIdx(l)));
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          c.release(lease);
          return s;
        });
      },
      py::arg("cache"), py::arg("match"),
      "Seconds from load (plan + apply) to the last layer's arrival, all in C++; releases the lease.");
}

}  // namespace kvtier::python
