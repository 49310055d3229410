#include "lang/module_tree.h"

#include <algorithm>
#include <unordered_set>

namespace loom {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

ModuleTree::ModuleTree(std::string root_type) {
  ModuleNode root;
  root.type = std::move(root_type);
  if (root.type == "ModuleList") lists_.push_back(0);
  nodes_.push_back(std::move(root));
  by_path_[""] = 0;
}

int ModuleTree::add(int parent, const std::string& name, const std::string& type) {
  ModuleNode n;
  n.name = name;
  n.path = join_path(nodes_[parent].path, name);
  n.type = type;
  n.parent = parent;
  int index = static_cast<int>(nodes_.size());
  by_path_[n.path] = index;
  if (type == "ModuleList") lists_.push_back(index);
  nodes_.push_back(std::move(n));
  nodes_[parent].children.push_back(index);
  return index;
}

int ModuleTree::find(const std::string& path) const {
  auto it = by_path_.find(path);
  return it == by_path_.end() ? -1 : it->second;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  if (path.empty()) return out;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    out.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return out;
}

std::string join_path(const std::string& base, const std::string& rel) {
  if (base.empty()) return rel;
  if (rel.empty()) return base;
  return base + "." + rel;
}

bool glob_segment_match(const std::string& p, const std::string& t) {
  // Iterative wildcard matching with backtracking to the last '*'.
  size_t pi = 0, ti = 0, star = std::string::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi, ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (star != std::string::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::vector<int> ModuleTree::match(const std::string& pattern) const {
  if (pattern.find_first_of("*?") == std::string::npos) {
    int i = find(pattern);
    return i < 0 ? std::vector<int>{} : std::vector<int>{i};
  }
  std::vector<std::string> segs = split_path(pattern);
  // Walk down the tree segment by segment: cost follows the matches, not the model size.
  std::vector<int> frontier{0};
  for (const std::string& seg : segs) {
    std::vector<int> next;
    bool wild = seg.find_first_of("*?") != std::string::npos;
    for (int n : frontier) {
      if (!wild) {
        int c = find(join_path(nodes_[n].path, seg));
        if (c >= 0 && nodes_[c].parent == n) next.push_back(c);
        continue;
      }
      for (int c : nodes_[n].children)
        if (glob_segment_match(seg, nodes_[c].name)) next.push_back(c);
    }
    frontier = std::move(next);
    if (frontier.empty()) break;
  }
  std::sort(frontier.begin(), frontier.end());
  return frontier;
}

bool ModuleTree::is_within(int module, int ancestor) const {
  for (int m = module; m >= 0; m = nodes_[m].parent)
    if (m == ancestor) return true;
  return false;
}

int64_t ModuleTree::parameter_count(int root) const {
  // Down the children's lists: the subtree alone, without walking each node's ancestors.
  int64_t total = 0;
  std::vector<int> pending{root};
  while (!pending.empty()) {
    int i = pending.back();
    pending.pop_back();
    for (auto& p : nodes_[i].params)
      if (p.tied_to.empty()) total += p.numel();
    pending.insert(pending.end(), nodes_[i].children.begin(), nodes_[i].children.end());
  }
  return total;
}

int ModuleTree::largest_list(int root) const {
  int best = -1;
  int64_t best_count = -1;
  for (int i : lists_) {
    if (i < root || !is_within(i, root)) continue;
    int64_t count = parameter_count(i);
    if (count > best_count) best = i, best_count = count;
  }
  return best;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> closest(const std::string& text, const std::vector<std::string>& candidates, size_t limit) {
  std::vector<std::pair<size_t, std::string>> scored;
  size_t budget = std::max<size_t>(3, text.size() / 2);
  for (auto& c : candidates) {
    size_t d = edit_distance(text, c);
    if (d <= budget) scored.push_back({d, c});
  }
  std::stable_sort(scored.begin(), scored.end(), [](auto& x, auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (auto& [d, c] : scored) {
    if (out.size() == limit) break;
    out.push_back(c);
  }
  return out;
}

std::vector<std::string> ModuleTree::closest_paths(const std::string& text, size_t limit) const {
  // Compare against paths of the same depth first: "h.40.mlp" should suggest "h.4.mlp", not "h".
  std::vector<std::string> same_depth, all;
  size_t depth = split_path(text).size();
  for (auto& n : nodes_) {
    if (n.path.empty()) continue;
    all.push_back(n.path);
    if (split_path(n.path).size() == depth) same_depth.push_back(n.path);
  }
  auto out = closest(text, same_depth, limit);
  if (out.empty()) out = closest(text, all, limit);
  return out;
}

}  // namespace loom
