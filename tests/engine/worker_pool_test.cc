// WorkerPool: every task runs exactly once per job, on a valid worker, across
// many back-to-back jobs (the spinning hand-off) and jobs after the workers
// have gone to sleep (the condition-variable hand-off).
#include "engine/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace kvtier::engine {
namespace {

void expect_each_task_once(WorkerPool& pool, size_t n) {
  std::vector<std::atomic<int>> hits(n);
  std::atomic<bool> bad_worker{false};
  pool.run(n, [&](size_t t, uint32_t w) {
    if (w >= pool.size()) bad_worker = true;
    hits[t].fetch_add(1, std::memory_order_relaxed);
  });
  for (size_t t = 0; t < n; ++t) ASSERT_EQ(hits[t].load(), 1) << "task " << t << " of " << n;
  EXPECT_FALSE(bad_worker.load());
}

TEST(WorkerPool, BackToBackJobsRunEveryTaskOnce) {
  WorkerPool pool(3);
  ASSERT_EQ(pool.size(), 3u);
  for (size_t job = 0; job < 2000; ++job) expect_each_task_once(pool, 1 + job % 37);
}

TEST(WorkerPool, JobsAfterTheWorkersSleep) {
  WorkerPool pool(2);
  for (int job = 0; job < 5; ++job) {
    expect_each_task_once(pool, 64);
    // Long enough for the workers to stop spinning and wait on the condition variable
    // whichever way the scheduler runs them; the check holds either way.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

TEST(WorkerPool, ResultsWrittenByWorkersAreVisibleAfterRun) {
  WorkerPool pool(2);
  std::vector<uint64_t> out(4096);
  for (uint64_t round = 1; round <= 50; ++round) {
    pool.run(out.size(), [&](size_t t, uint32_t) { out[t] = t * round; });
    for (size_t t = 0; t < out.size(); ++t) ASSERT_EQ(out[t], t * round);
  }
}

TEST(WorkerPool, SingleThreadAndEmptyJobs) {
  WorkerPool one(1);
  expect_each_task_once(one, 10);
  WorkerPool two(2);
  two.run(0, [](size_t, uint32_t) { FAIL(); });
  expect_each_task_once(two, 1);
}

}  // namespace
}  // namespace kvtier::engine
