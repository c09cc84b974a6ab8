#include "engine/worker_pool.h"

namespace kvtier::engine {

WorkerPool::WorkerPool(uint32_t threads) {
  for (uint32_t w = 1; w < threads; ++w) threads_.emplace_back([this, w] { loop(w); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::work(uint32_t worker) {
  for (size_t t; (t = next_.fetch_add(1, std::memory_order_relaxed)) < n_tasks_;) (*fn_)(t, worker);
}

void WorkerPool::loop(uint32_t worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    work(worker);
    std::lock_guard lk(mu_);
    if (--busy_ == 0) cv_done_.notify_one();
  }
}

void WorkerPool::run(size_t n_tasks, const std::function<void(size_t, uint32_t)>& fn) {
  if (n_tasks == 0) return;
  if (threads_.empty() || n_tasks == 1) {
    for (size_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard lk(mu_);
    fn_ = &fn;
    n_tasks_ = n_tasks;
    next_.store(0, std::memory_order_relaxed);
    busy_ = uint32_t(threads_.size());
    ++generation_;
  }
  cv_start_.notify_all();
  work(0);
  std::unique_lock lk(mu_);
  cv_done_.wait(lk, [&] { return busy_ == 0; });
  fn_ = nullptr;
}

}  // namespace kvtier::engine
