// The order in which the scheduler admits waiting requests (SchedulerOptions::policy,
// `--schedule`).
//   fcfs:         arrival order.
//   cached-first: among the first few admissible requests, the one with the
//                 fewest prompt tokens left to compute (its prompt minus the
//                 prefix cached on the device or host now), the earliest on
//                 ties: a returning conversation's short prefill is not queued
//                 behind a newcomer's long one (mean TTFT; SGLang calls it
//                 longest-prefix-match).
// Either way a request passed over SchedulerOptions::max_passes times goes
// next, so none starves.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::server {

enum class SchedulePolicy { kFcfs, kCachedFirst };

// Prompt positions computed between two decode steps (SchedulerOptions::prefill_chunk_tokens,
// `--prefill-chunk-tokens`).
inline constexpr uint32_t kDefaultPrefillChunkTokens = 256;

std::string_view schedule_policy_name(SchedulePolicy p);
Result<SchedulePolicy> parse_schedule_policy(std::string_view name);  // "fcfs", "cached-first"

}  // namespace kvtier::server
