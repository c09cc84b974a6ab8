// The model's cost per token (planner/cost_model.h's ModelCost) from its
// shape: what the planner, the calibration and the replay's timing model
// price prefill with. Pure; safe from any thread.
#pragma once

#include "kvtier/types.h"
#include "model/model_config.h"
#include "planner/cost_model.h"

namespace kvtier {

// The model's cost per token, from its config and KV geometry.
ModelCost model_cost(const engine::ModelConfig& config, const KVGeometry& geometry);

}  // namespace kvtier
