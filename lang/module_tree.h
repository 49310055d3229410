// A torch-free description of a model's module hierarchy: what the schedule language selects from.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace loom {

// A parameter or buffer owned directly by one module.
struct TensorInfo {
  std::string name;             // local name, e.g. "weight"
  std::vector<int64_t> shape;
  std::string dtype;            // "float32", "bfloat16", ...
  std::string tied_to;          // full name of the first owner when this tensor is shared, else empty

  int64_t numel() const;
};

struct ModuleNode {
  std::string path;             // dotted path as named_modules() gives it; "" for the root
  std::string name;             // last path segment
  std::string type;             // module type name, e.g. "Linear"
  int parent = -1;
  std::vector<int> children;    // in registration order
  std::vector<TensorInfo> params;
  std::vector<TensorInfo> buffers;
};

// The module hierarchy in the order its modules were added, each after its parent (a model's
// named_modules() gives pre-order). Node 0 is the root.
class ModuleTree {
 public:
  explicit ModuleTree(std::string root_type = "Model");

  // Adds a child of `parent` named `name`; returns its index.
  int add(int parent, const std::string& name, const std::string& type);
  void add_param(int node, TensorInfo t) { nodes_[node].params.push_back(std::move(t)); }
  void add_buffer(int node, TensorInfo t) { nodes_[node].buffers.push_back(std::move(t)); }

  const ModuleNode& node(int i) const { return nodes_[i]; }
  int size() const { return static_cast<int>(nodes_.size()); }
  int find(const std::string& path) const;  // -1 when absent
  const std::string& model_name() const { return model_name_; }
  void set_model_name(std::string n) { model_name_ = std::move(n); }

  // Modules whose path matches a glob: '*' matches any text within one dotted
  // segment, '?' one character; a pattern without wildcards matches one path.
  std::vector<int> match(const std::string& pattern) const;
  // Whether `module` is `ancestor` or below it.
  bool is_within(int module, int ancestor) const;
  // Unique parameter elements in the subtree: a tied tensor counts where it is first owned, so a
  // subtree holding only its alias counts none of it.
  int64_t parameter_count(int root = 0) const;
  // The model's repeated blocks: the ModuleList at or below `root` that holds the most
  // parameters (GPT's h, LLaMA's layers, BERT's bert.encoder.layer); -1 when there is none.
  int largest_list(int root = 0) const;
  // Up to `limit` existing paths closest to `text` (edit distance), for "did you mean".
  std::vector<std::string> closest_paths(const std::string& text, size_t limit = 3) const;

 private:
  std::vector<ModuleNode> nodes_;
  std::vector<int> lists_;  // the ModuleList nodes, in order (largest_list's candidates)
  std::unordered_map<std::string, int> by_path_;
  std::string model_name_;
};

// The tree as JSON ({"model", "modules": [{"path", "type", "params", "buffers"}]}) and back.
std::string module_tree_to_json(const ModuleTree& tree);
ModuleTree module_tree_from_json(const std::string& text);

// Splits "a.b.c" into {"a", "b", "c"}; "" gives {}.
std::vector<std::string> split_path(const std::string& path);
// Joins a base path and a relative one with a dot, skipping empty parts.
std::string join_path(const std::string& base, const std::string& rel);
// Whether `text` matches a single-segment glob with '*' and '?'.
bool glob_segment_match(const std::string& pattern, const std::string& text);
// Levenshtein distance, for suggestions.
size_t edit_distance(const std::string& a, const std::string& b);
// Up to `limit` of `candidates` closest to `text`, nearest first, within a sensible distance.
std::vector<std::string> closest(const std::string& text, const std::vector<std::string>& candidates, size_t limit = 3);

}  // namespace loom
