// Alternative module implementations that replace(impl) may swap in: names and the type they replace.
#pragma once

#include <string>
#include <vector>

namespace loom {

struct Replacement {
  std::string name;      // what replace("name") refers to
  std::string replaces;  // the module type it stands in for, e.g. "GPT2Attention"
  std::string doc;
};

// Filled by the libraries that define implementations (the reference models);
// the language checks replace() against it without seeing those modules.
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
