// The whole-schedule rules, one per file in this directory (run by check_schedule_rules).
// Each throws UserError at the directive that breaks it.
#pragma once

#include "verifier/schedule_rules.h"

namespace loom::rules {

// compress() on a schedule whose gradients are never reduced (data-parallel degree 1).
void compress_needs_reduction(const Schedule& schedule, const RuleOptions& options);
// offload("optimizer") on a schedule that keeps no optimizer shards (s_os = 1).
void offload_needs_optimizer_shards(const Schedule& schedule, const RuleOptions& options);
// pipeline_split() boundaries that do not make mesh(pp=P)'s P stages, or leave one empty.
void pipeline_stages(const Schedule& schedule, const RuleOptions& options);
// sync() with a collective that cannot aggregate what the module's shard() produces
// (a partition needs all_gather; partial sums need all_reduce or reduce_scatter).
void sync_matches_shard_output(const Schedule& schedule, const RuleOptions& options);
// unshard() on a module whose parameters (or its submodules') are tensor-sharded by shard().
void unshard_conflicts_with_shard(const Schedule& schedule, const RuleOptions& options);
// Model states per rank above --memory-limit by lins.txt §IV-D's formula.
void memory_fits(const Schedule& schedule, const RuleOptions& options);

}  // namespace loom::rules
