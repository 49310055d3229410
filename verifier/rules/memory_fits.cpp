#include "verifier/rules/rules.h"

#include "backend/cost/memory_model.h"
#include "lang/value.h"

namespace loom::rules {

// lins.txt §IV-D: 2/s_p + 2/s_g + 12/s_os bytes per parameter (fp16 parameters and
// gradients, fp32 master weights and Adam moments), of the 1/(tp * pp) a rank holds: the
// memory model's mixed-precision layout (backend/cost/memory_model.h).
void memory_fits(const Schedule& s, const RuleOptions& o) {
  if (o.memory_limit <= 0) return;
  const ShardingFactors& f = s.sharding();
  double params = static_cast<double>(s.tree().parameter_count()) / (s.mesh_state().tp * s.mesh_state().pp);
  double bytes = model_state_bytes(params, StateBytes::mixed_precision_adam(), f.params, f.grads, f.optim);
  if (bytes <= static_cast<double>(o.memory_limit)) return;
  throw UserError(f.where,
                  "model states need " + format_size(static_cast<int64_t>(bytes)) + " per rank, above --memory-limit " +
                      format_size(o.memory_limit) + " (lins.txt: 2/" + std::to_string(f.params) + " + 2/" +
                      std::to_string(f.grads) + " + 12/" + std::to_string(f.optim) + " bytes for each of " +
                      std::to_string(static_cast<int64_t>(params)) + " parameters)",
                  "shard more: raise s_p, s_g or s_os in shard_states (each must divide dp = " + std::to_string(s.dp()) + ")");
}

}  // namespace loom::rules
