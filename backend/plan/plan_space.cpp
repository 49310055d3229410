#include "backend/plan/plan_space.h"

#include <algorithm>

namespace loom {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// lins.txt Eq. 5-7: a factor of `per_node` dp ranks on each node either lies inside a node
// (dividing it) or spans whole nodes.
bool fills_nodes(int factor, int per_node) { return factor <= per_node ? per_node % factor == 0 : factor % per_node == 0; }

// The Linear children of `node`, in registration (forward) order.
std::vector<int> linear_children(const ModuleTree& tree, int node) {
  std::vector<int> out;
  for (int c : tree.node(node).children)
    if (tree.node(c).type == "Linear") out.push_back(c);
  return out;
}

int count_linears(const ModuleTree& tree, int root) {
  int n = 0;
  for (int i = 0; i < tree.size(); ++i) n += tree.node(i).type == "Linear" && tree.is_within(i, root);
  return n;
}

std::string quoted_list(const std::vector<TensorInfo>& params) {
  if (params.size() == 1) return "\"" + params[0].name + "\"";
  std::string out = "[";
  for (size_t i = 0; i < params.size(); ++i) out += (i ? ", \"" : "\"") + params[i].name + "\"";
  return out + "]";
}

}  // namespace

std::string tensor_parallel_directives(const ModuleTree& tree, int tp) {
  int list = tree.largest_list();
  if (list < 0 || tree.node(list).children.empty()) return "";
  int block = tree.node(list).children[0];
  std::string body;
  int covered = 0;
  for (int group : tree.node(block).children) {
    std::vector<int> linears = linear_children(tree, group);
    if (linears.size() < 2) continue;
    for (size_t i = 0; i < linears.size(); ++i) {
      const ModuleNode& l = tree.node(linears[i]);
      bool row = i + 1 == linears.size();
      const std::vector<int64_t>& shape = l.params.at(0).shape;  // weight [out, in]
      if (shape.size() != 2 || shape[row ? 1 : 0] % tp != 0) return "";
      std::string local = l.path.substr(tree.node(block).path.size() + 1);
      std::vector<TensorInfo> split = row ? std::vector<TensorInfo>{l.params[0]} : l.params;
      body += "    b[\"" + local + "\"].shard(" + quoted_list(split) + ", axis=" + (row ? "1" : "0") + ").sync(mode=\"" +
              (row ? "fwd_post" : "bwd_post") + "\", op=\"all_reduce\")\n";
      ++covered;
    }
  }
  // Every Linear of the block must be split, or the plan is not Megatron's.
  if (covered == 0 || covered != count_linears(tree, block)) return "";
  return "for b in sch[\"" + tree.node(list).path + ".*\"] {\n" + body + "}\n";
}

std::vector<PlanPoint> enumerate_plan_space(const ModuleTree& tree, const PlanSpaceOptions& o) {
  int list = tree.largest_list();
  int blocks = list < 0 ? 1 : static_cast<int>(tree.node(list).children.size());
  std::vector<bool> recompute = o.checkpoint == "auto" ? std::vector<bool>{false, true} : std::vector<bool>{o.checkpoint == "all"};
  std::vector<PlanPoint> points;
  for (int tp : divisors(o.world)) {
    // A tensor-parallel group stays inside a node: tp divides the node's ranks.
    if (o.local_world % tp != 0 || (tp > 1 && tensor_parallel_directives(tree, tp).empty())) continue;
    for (int pp : divisors(o.world / tp)) {
      if (pp > blocks || (pp > 1 && list < 0)) continue;
      int dp = o.world / (tp * pp);
      int per_node = o.local_world / tp;  // a stage's dp ranks on one node
      for (int s_p : divisors(dp))
        for (int s_os : divisors(dp)) {
          if (s_os % s_p != 0 || !fills_nodes(s_p, per_node) || !fills_nodes(s_os, per_node)) continue;
          std::vector<int> grads = s_os == s_p ? std::vector<int>{s_p} : std::vector<int>{s_p, s_os};  // lins.txt §IV-C3
          for (int s_g : grads)
            for (bool ck : recompute) points.push_back({tp, pp, s_p, s_g, s_os, ck});
        }
    }
  }
  return points;
}

std::vector<ModuleReplacement> replacements_of(const ModuleTree& tree, const std::string& impl) {
  const Replacement* r = ReplacementRegistry::global().find(impl);
  std::vector<ModuleReplacement> out;
  for (int i = 0; r && i < tree.size(); ++i)
    if (r->replaces_type(tree.node(i).type)) out.push_back({tree.node(i).path, impl});
  return out;
}

namespace {

// replace() directives for `replacements`: one wildcard over the repeated blocks for each module
// position in them (sch["h.*.attn"]), each module outside them by its path.
std::string replace_directives(const ModuleTree& tree, const std::string& impl) {
  std::vector<ModuleReplacement> replacements = replacements_of(tree, impl);
  int list = tree.largest_list();
  std::string blocks = list < 0 ? "" : tree.node(list).path + ".";
  std::vector<std::string> selections;
  for (const ModuleReplacement& r : replacements) {
    std::string selection = r.module;
    if (!blocks.empty() && r.module.compare(0, blocks.size(), blocks) == 0) {
      size_t index_end = r.module.find('.', blocks.size());
      selection = blocks + "*" + (index_end == std::string::npos ? "" : r.module.substr(index_end));
    }
    if (std::find(selections.begin(), selections.end(), selection) == selections.end()) selections.push_back(selection);
  }
  std::string text;
  for (const std::string& s : selections) text += "sch[\"" + s + "\"].replace(\"" + impl + "\")\n";
  return text;
}

}  // namespace

PlanText plan_schedule_parts(const ModuleTree& tree, const PlanPoint& p, const std::string& attention, PlanPrefetch prefetch) {
  PlanText text;
  if (!attention.empty()) text.structure += replace_directives(tree, attention);
  if (p.tp > 1 || p.pp > 1) text.structure += "sch.mesh(tp=" + std::to_string(p.tp) + ", pp=" + std::to_string(p.pp) + ")\n";
  if (p.tp > 1) text.structure += tensor_parallel_directives(tree, p.tp);
  text.own += "sch.shard_states(params=" + std::to_string(p.params) + ", grads=" + std::to_string(p.grads) +
              ", optim=" + std::to_string(p.optim) + ")\n";
  if (p.checkpoint) text.own += "sch.blocks().checkpoint()\n";
  if (p.params > 1 && prefetch == PlanPrefetch::BlockAhead) text.own += "sch.blocks().prefetch()\n";
  if (p.params > 1 && prefetch == PlanPrefetch::MemoryAware) {
    text.own += "sch.blocks().prefetch(budget=auto)\n";
    if (p.tp == 1) text.own += "sch.blocks().unshard(auto)\n";
  }
  return text;
}

std::string plan_schedule_text(const ModuleTree& tree, const PlanPoint& p, const std::string& attention, PlanPrefetch prefetch) {
  PlanText text = plan_schedule_parts(tree, p, attention, prefetch);
  return text.structure + text.own;
}

}  // namespace loom
