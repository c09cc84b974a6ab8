#include "model/model_cost.h"

namespace kvtier {

ModelCost model_cost(const engine::ModelConfig& c, const KVGeometry& g) {
  ModelCost m;
  m.dense_flops_per_token = c.layer_flops_per_token();
  m.attn_flops_per_pair = 4.0 * c.num_heads * c.head_dim * c.num_layers;
  m.num_layers = c.num_layers;
  m.kv_bytes_per_token = g.bytes_per_token();
  return m;
}

}  // namespace kvtier
