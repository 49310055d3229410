#include "verifier/rules/rules.h"

#include <set>

namespace loom::rules {

void pipeline_stages(const Schedule& s, const RuleOptions&) {
  int pp = s.mesh_state().pp;
  std::vector<const Directive*> splits;
  std::set<std::string> split_after;
  for (const Directive& d : s.trace()) {
    if (d.primitive != "pipeline_split") continue;
    if (!split_after.insert(d.target).second)
      throw UserError(d.where, "pipeline_split on `" + d.target + "` again: the stage between the two boundaries is empty",
                      "split after each module at most once");
    const ModuleNode& entry = s.tree().node(s.tree().find(d.target));
    const ModuleNode& list = s.tree().node(entry.parent);
    if (s.tree().find(d.target) == list.children.back())
      throw UserError(d.where, "pipeline_split on `" + d.target + "`, the last entry of `" + list.path +
                                   "`: the stage after it would be empty",
                      "split after an earlier entry");
    if (!splits.empty() && s.tree().node(s.tree().find(splits.front()->target)).parent != entry.parent)
      throw UserError(d.where, "pipeline_split on `" + d.target + "` is in another list than the one on `" +
                                   splits.front()->target + "` at " + splits.front()->where.to_string(),
                      "split one ModuleList into the stages");
    splits.push_back(&d);
  }
  if (splits.empty()) return;  // stages are then balanced automatically
  int stages = static_cast<int>(splits.size()) + 1;
  if (stages > pp)
    throw UserError(splits[pp - 1]->where,
                    "pipeline_split on `" + splits[pp - 1]->target + "` makes stage " + std::to_string(pp + 1) + ", but pp = " +
                        std::to_string(pp),
                    "use " + std::to_string(pp - 1) + " boundaries for mesh(pp=" + std::to_string(pp) + "), or raise pp");
  if (stages < pp)
    throw UserError(splits.back()->where,
                    "the " + std::to_string(splits.size()) + " pipeline_split boundaries make " + std::to_string(stages) +
                        " stages, but pp = " + std::to_string(pp) + ": " + std::to_string(pp - stages) + " stage(s) would be empty",
                    "add boundaries until there are " + std::to_string(pp - 1) + ", or remove them all to balance automatically");
}

}  // namespace loom::rules
