// Internal: a fixed set of worker threads that run `fn(task, worker)` for
// tasks [0, n) in parallel, handing tasks out dynamically (causal attention
// tasks differ in cost). The calling thread takes part as worker 0. One
// caller at a time; the pool joins its threads on destruction.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtier::engine {

class WorkerPool {
 public:
  explicit WorkerPool(uint32_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  uint32_t size() const { return uint32_t(threads_.size()) + 1; }
  void run(size_t n_tasks, const std::function<void(size_t task, uint32_t worker)>& fn);

 private:
  void loop(uint32_t worker);
  void work(uint32_t worker);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  uint64_t generation_ = 0;
  uint32_t busy_ = 0;
  bool stop_ = false;
  const std::function<void(size_t, uint32_t)>* fn_ = nullptr;
  size_t n_tasks_ = 0;
  std::atomic<size_t> next_{0};
};

}  // namespace kvtier::engine
