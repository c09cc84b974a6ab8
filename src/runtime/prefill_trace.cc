#include "runtime/prefill_trace.h"

namespace kvtier {

void PrefillTrace::take_arrivals(const LayerArrivals& arrivals, std::chrono::steady_clock::time_point start) {
  const int64_t origin = start.time_since_epoch().count();
  for (int t = 0; t < kNumTiers; ++t) {
    std::vector<double>& lane = arrival_s[size_t(t)];
    lane.assign(num_layers, -1.0);
    bool any = false;
    for (uint32_t l = 0; l < num_layers && l < arrivals.num_layers(); ++l) {
      const int64_t stamp = arrivals.arrival_ns(TierKind(t), l);
      if (stamp == 0) continue;
      lane[l] = std::chrono::duration<double>(std::chrono::steady_clock::duration(stamp - origin)).count();
      any = true;
    }
    if (!any) lane.clear();  // nothing from this tier
  }
}

double TracingForward::since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

Result<engine::Logits> TracingForward::prefill(engine::SequenceKV& seq, std::span<const TokenId> tokens,
                                               uint32_t start_pos, const engine::PrefillOptions& options) {
  PrefillPass pass;
  pass.start_pos = start_pos;
  pass.end_pos = uint32_t(tokens.size());
  pass.begin_s = since_start();
  engine::PrefillOptions timed = options;
  if (options.layer_hook) {
    const uint32_t layers = inner_.model().config().num_layers;
    pass.hook_enter_s.assign(layers, -1.0);
    pass.hook_return_s.assign(layers, -1.0);
    timed.layer_hook = [&, layers](LayerIdx l) -> Status {  // layers by value: it ends with this block
      const uint32_t i = l.value();
      if (i < layers) pass.hook_enter_s[i] = since_start();
      Status st = options.layer_hook(l);
      if (i < layers) pass.hook_return_s[i] = since_start();
      return st;
    };
  }
  auto result = inner_.prefill(seq, tokens, start_pos, timed);
  pass.end_s = since_start();
  trace_.passes.push_back(std::move(pass));
  return result;
}

}  // namespace kvtier
