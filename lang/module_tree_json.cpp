// JSON form of ModuleTree: how the CLI and tests exchange module trees without LibTorch.
#include <nlohmann/json.hpp>

#include "lang/diagnostics.h"
#include "lang/module_tree.h"

namespace loom {

using nlohmann::json;

namespace {
json tensors_to_json(const std::vector<TensorInfo>& ts) {
  json arr = json::array();
  for (auto& t : ts) {
    json j = {{"name", t.name}, {"shape", t.shape}, {"dtype", t.dtype}};
    if (!t.tied_to.empty()) j["tied_to"] = t.tied_to;
    arr.push_back(j);
  }
  return arr;
}

std::vector<TensorInfo> tensors_from_json(const json& arr) {
  std::vector<TensorInfo> out;
  for (auto& j : arr)
    out.push_back({j.at("name").get<std::string>(), j.at("shape").get<std::vector<int64_t>>(), j.value("dtype", "float32"),
                   j.value("tied_to", "")});
  return out;
}
}  // namespace

std::string module_tree_to_json(const ModuleTree& tree) {
  json mods = json::array();
  for (int i = 0; i < tree.size(); ++i) {
    const ModuleNode& n = tree.node(i);
    mods.push_back({{"path", n.path}, {"type", n.type}, {"params", tensors_to_json(n.params)}, {"buffers", tensors_to_json(n.buffers)}});
  }
  return json{{"model", tree.model_name()}, {"modules", mods}}.dump(1);
}

ModuleTree module_tree_from_json(const std::string& text) {
  try {
    json j = json::parse(text);
    const json& mods = j.at("modules");
    ModuleTree tree(mods.at(0).at("type").get<std::string>());
    tree.set_model_name(j.value("model", ""));
    for (size_t i = 0; i < mods.size(); ++i) {
      std::string path = mods[i].at("path").get<std::string>();
      int index = 0;
      if (i > 0) {
        size_t dot = path.rfind('.');
        std::string parent = dot == std::string::npos ? "" : path.substr(0, dot);
        int p = tree.find(parent);
        if (p < 0) throw UserError(SourceRange{}, "module tree JSON lists " + path + " before its parent", "list parents first");
        index = tree.add(p, dot == std::string::npos ? path : path.substr(dot + 1), mods[i].at("type").get<std::string>());
      }
      for (auto& t : tensors_from_json(mods[i].at("params"))) tree.add_param(index, t);
      for (auto& t : tensors_from_json(mods[i].at("buffers"))) tree.add_buffer(index, t);
    }
    return tree;
  } catch (const json::exception& e) {
    throw UserError(SourceRange{}, std::string("invalid module tree JSON: ") + e.what(), "write it with `loom tree --json`");
  }
}

}  // namespace loom
