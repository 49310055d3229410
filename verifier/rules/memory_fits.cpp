#include "verifier/rules/rules.h"

#include <algorithm>

#include "backend/cost/memory_model.h"
#include "lang/value.h"

namespace loom::rules {
namespace {

// The bytes of optimizer states per rank that offload("optimizer") lets stay on the device, or
// -1 without one; the last offload() counts, as in lowering. With a byte budget at most
// `budget` bytes (the pass keeps whole parameters' states, so perhaps less); with budget=auto
// none, since its adaptive form under a limit keeps what fits, which only the step's memory walk
// knows (`loom check` walks it after the rules): the rule counts the least it could be.
int64_t optimizer_bytes_kept_on_device(const Schedule& s) {
  int64_t kept = -1;
  for (const Directive& d : s.trace())
    if (d.primitive == "offload") {
      const Value& budget = *d.arg("budget");
      kept = budget.is(ValueKind::Bytes) ? budget.as_int() : 0;
    }
  return kept;
}

// What to do when the states are over the limit: shard them more where a factor is below dp,
// else what is left once every state is sharded over every replica.
std::string lower_states_hint(const Schedule& s) {
  const ShardingFactors& f = s.sharding();
  std::string dp = std::to_string(s.dp());
  if (f.params < s.dp() || f.grads < s.dp() || f.optim < s.dp())
    return "shard more: raise s_p, s_g or s_os in shard_states (each must divide dp = " + dp + ")";
  bool mesh = s.mesh_state().tp * s.mesh_state().pp > 1;
  return "every state is sharded over all dp = " + dp + " replicas already: use more ranks, split the model over a " +
         std::string(mesh ? "larger " : "") + "mesh (sch.mesh), or offload(\"optimizer\")";
}

}  // namespace

// lins.txt §IV-D's D_modelstate, each state's bytes over its sharding factor, of the 1/(tp * pp)
// of the parameters a rank holds, with the bytes Loom's runtime keeps (4/s_p + 4/s_g + 8/s_os):
// the memory model the simulator and the planner count model states with
// (backend/cost/memory_model.h). Optimizer states offload() keeps on the host are not counted.
// Under a mesh the 1/(tp * pp) share is a rank's average, which a rank may exceed: parameters no
// shard() splits (embeddings, norms) are whole on every tensor-parallel rank, and stages may
// differ; the message says "at least" there. The step's memory walk, which `loom check`
// runs after the rules, counts each rank's own parameters and what the step holds beside them.
void memory_fits(const Schedule& s, const RuleOptions& o) {
  if (o.memory_limit <= 0) return;
  const ShardingFactors& f = s.sharding();
  const int tp = s.mesh_state().tp, pp = s.mesh_state().pp;
  double params = static_cast<double>(s.tree().parameter_count()) / (tp * pp);
  StateBytes kept = StateBytes::loom_adamw();
  double optimizer = params * kept.optim / f.optim;
  int64_t on_device = optimizer_bytes_kept_on_device(s);
  double offloaded = on_device < 0 ? 0 : std::max(0.0, optimizer - static_cast<double>(on_device));
  double bytes = model_state_bytes(params, kept, f.params, f.grads, f.optim) - offloaded;
  if (bytes <= static_cast<double>(o.memory_limit)) return;
  auto term = [](double b, int factor) { return std::to_string(static_cast<int>(b)) + "/" + std::to_string(factor); };
  std::string host = offloaded > 0 ? ", less " + format_size(static_cast<int64_t>(offloaded)) + " of optimizer states offload() keeps on the host" : "";
  bool mesh = tp * pp > 1;
  std::string count = std::to_string(static_cast<int64_t>(params));
  std::string share;
  if (mesh)
    share = "; " + count + " is a rank's average 1/" + std::to_string(tp * pp) + " share of the model, which a rank may exceed (" +
            (tp > 1 ? "parameters no shard() splits are whole on every tensor-parallel rank" : "") + (tp > 1 && pp > 1 ? "; " : "") +
            (pp > 1 ? "stages may differ in size" : "") + ")";
  throw UserError(f.where,
                  "model states need " + std::string(mesh ? "at least " : "") + format_size(static_cast<int64_t>(bytes)) +
                      " per rank, above --memory-limit " +
                      format_size(o.memory_limit) + " (" + term(kept.param, f.params) + " + " + term(kept.grad, f.grads) + " + " +
                      term(kept.optim, f.optim) + " bytes for each of " + count +
                      " parameters: fp32 parameters and gradients, AdamW's two moments" + host + share + ")",
                  lower_states_hint(s));
}

}  // namespace loom::rules
