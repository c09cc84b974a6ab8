#include "engine/worker_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvtier::engine {

namespace {

void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// True once `ready()` holds, spinning at most WorkerPool::kSpinPauses pauses.
template <typename Ready>
bool spin_until(Ready ready) {
  for (uint32_t i = 0; i < WorkerPool::kSpinPauses; ++i) {
    if (ready()) return true;
    cpu_pause();
  }
  return ready();
}

}  // namespace

WorkerPool::WorkerPool(uint32_t threads) {
  for (uint32_t w = 1; w < threads; ++w) threads_.emplace_back([this, w] { loop(w); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lk(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::work(uint32_t worker) {
  for (size_t t; (t = next_.fetch_add(1, std::memory_order_relaxed)) < n_tasks_;) (*fn_)(t, worker);
}

void WorkerPool::loop(uint32_t worker) {
  uint64_t seen = 0;
  auto ready = [&] {
    return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
  };
  for (;;) {
    if (!spin_until(ready)) {
      std::unique_lock lk(mu_);
      cv_start_.wait(lk, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    work(worker);
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lk(mu_);  // the caller checks busy_ under mu_ before it sleeps
      cv_done_.notify_one();
    }
  }
}

void WorkerPool::run(size_t n_tasks, const std::function<void(size_t, uint32_t)>& fn) {
  if (n_tasks == 0) return;
  if (threads_.empty() || n_tasks == 1) {
    for (size_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  fn_ = &fn;
  n_tasks_ = n_tasks;
  next_.store(0, std::memory_order_relaxed);
  busy_.store(uint32_t(threads_.size()), std::memory_order_relaxed);
  {
    std::lock_guard lk(mu_);  // a worker checks generation_ under mu_ before it sleeps
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_start_.notify_all();
  work(0);
  auto done = [&] { return busy_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock lk(mu_);
    cv_done_.wait(lk, done);
  }
  fn_ = nullptr;
}

}  // namespace kvtier::engine
