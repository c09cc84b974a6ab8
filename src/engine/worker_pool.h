// Internal: a fixed set of worker threads that run `fn(task, worker)` for
// tasks [0, n) in parallel, handing tasks out dynamically (causal attention
// tasks differ in cost). The calling thread takes part as worker 0. One
// caller at a time; the pool joins its threads on destruction.
//
// A decode step calls run() a few hundred times for jobs of tens of
// microseconds, about what waking a sleeping thread costs. So a worker that
// finished a job spins for a bounded number of pauses (kSpinPauses, well under
// a millisecond) watching for the next one before it sleeps on the condition
// variable, and the caller spins the same way waiting for the workers. Spinning
// only shortens waits: correctness rests on the atomics and the condition
// variables alone, and an idle pool sleeps.
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

  // Pauses a waiter spins before it sleeps (about 0.1-0.3 ms on x86).
  static constexpr uint32_t kSpinPauses = 4096;

 private:
  void loop(uint32_t worker);
  void work(uint32_t worker);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  std::atomic<uint64_t> generation_{0};  // bumped (under mu_) to publish a job
  std::atomic<uint32_t> busy_{0};        // workers that have not finished the job
  std::atomic<bool> stop_{false};
  const std::function<void(size_t, uint32_t)>* fn_ = nullptr;
  size_t n_tasks_ = 0;
  std::atomic<size_t> next_{0};
};

}  // namespace kvtier::engine
