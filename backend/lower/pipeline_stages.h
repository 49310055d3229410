// Which entries of a ModuleList each pipeline stage runs (slapo.txt §3.3.2): the boundaries
// pipeline_split() put after list entries, or, without any, entries shared out evenly over the
// list with the most parameters. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "lang/module_tree.h"

namespace loom {

struct PipelineStages {
  std::string list;         // the ModuleList's path, e.g. "h"
  std::vector<int> begins;  // stage s runs entries begins[s] .. begins[s + 1] - 1; begins.back() = entries

  int stage_of_entry(int entry) const;
  // The stage that trains a parameter (full name), or -1 for one outside the list, which every
  // stage holds (embeddings, final norms, heads).
  int stage_of_param(const std::string& name) const;
};

// `splits`: the list entries pipeline_split() was called on, in any order (the pipeline_stages
// rule checked that they are entries of one list and leave no stage empty). Throws UserError
// when there is no list to split, or fewer entries than stages.
PipelineStages plan_pipeline_stages(const ModuleTree& tree, const std::vector<std::string>& splits, int pp);

}  // namespace loom
