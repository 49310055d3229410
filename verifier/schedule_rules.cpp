#include "verifier/schedule_rules.h"

#include "verifier/rules/rules.h"

namespace loom {

void check_schedule_rules(const Schedule& schedule, const RuleOptions& options) {
  using Rule = void (*)(const Schedule&, const RuleOptions&);
  static const Rule rules[] = {
      rules::sync_matches_shard_output,
      rules::pipeline_stages,
      rules::compress_needs_reduction,
      rules::offload_needs_optimizer_shards,
      rules::unshard_conflicts_with_shard,
      rules::memory_fits,
  };
  for (Rule rule : rules) rule(schedule, options);
}

}  // namespace loom
