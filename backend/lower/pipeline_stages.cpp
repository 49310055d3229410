#include "backend/lower/pipeline_stages.h"

#include <algorithm>

#include "lang/diagnostics.h"

namespace loom {

int PipelineStages::stage_of_entry(int entry) const {
  for (size_t s = 0; s + 1 < begins.size(); ++s)
    if (entry < begins[s + 1]) return static_cast<int>(s);
  return static_cast<int>(begins.size()) - 2;
}

int PipelineStages::stage_of_param(const std::string& name) const {
  std::string prefix = list + ".";
  if (name.rfind(prefix, 0) != 0) return -1;
  size_t dot = name.find('.', prefix.size());
  std::string entry = name.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
  return stage_of_entry(std::stoi(entry));
}

PipelineStages plan_pipeline_stages(const ModuleTree& tree, const std::vector<std::string>& splits, int pp) {
  PipelineStages out;
  int list = -1;
  if (splits.empty()) {
    list = tree.largest_list();  // evenly over the model's repeated blocks
    if (list < 0)
      throw UserError(SourceRange{}, "mesh(pp=" + std::to_string(pp) + "): model " + tree.model_name() +
                                         " has no ModuleList of layers to split into pipeline stages",
                      "use pp = 1 for this model");
  } else {
    list = tree.node(tree.find(splits.front())).parent;
    for (const std::string& s : splits)
      if (tree.node(tree.find(s)).parent != list)  // the pipeline_stages rule refused this
        throw InternalError("pipeline boundaries `" + splits.front() + "` and `" + s + "` are in different lists");
  }
  out.list = tree.node(list).path;
  int entries = static_cast<int>(tree.node(list).children.size());
  if (entries < pp)
    throw UserError(SourceRange{}, "`" + out.list + "` has " + std::to_string(entries) + " entries, fewer than the pp = " +
                                       std::to_string(pp) + " pipeline stages",
                    "use pp = " + std::to_string(entries) + " or less");
  out.begins.push_back(0);
  if (splits.empty()) {
    for (int s = 1; s < pp; ++s) out.begins.push_back(s * entries / pp);
  } else {
    for (const std::string& s : splits) out.begins.push_back(std::stoi(tree.node(tree.find(s)).name) + 1);
    std::sort(out.begins.begin(), out.begins.end());
  }
  out.begins.push_back(entries);
  for (size_t s = 0; s + 1 < out.begins.size(); ++s)
    if (out.begins[s] >= out.begins[s + 1])  // the pipeline_stages rule refused this
      throw InternalError("pipeline stage " + std::to_string(s) + " of `" + out.list + "` would hold no entries");
  return out;
}

}  // namespace loom
