// Alternative module implementations that replace(impl) may swap in: names and the type they replace.
#pragma once

#include <string>
#include <vector>

namespace loom {

struct Replacement {
  std::string name;                   // what replace("name") refers to
  std::vector<std::string> replaces;  // the module types it stands in for, e.g. "GPT2Attention"
  std::string doc;
  bool replaces_type(const std::string& type) const;
};

// One replace() the runtime applies: module `module` (a path) runs implementation `impl`.
struct ModuleReplacement {
  std::string module;
  std::string impl;
};

// Filled by the libraries that define implementations (the reference models);
// the language checks replace() against it without seeing those modules. Filled before any
// concurrent reader starts (the planner's threads read it, unlocked).
class ReplacementRegistry {
 public:
  static ReplacementRegistry& global();
  void add(Replacement r);
  const Replacement* find(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<Replacement> all_;
};

}  // namespace loom
