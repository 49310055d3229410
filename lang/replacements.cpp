#include "lang/replacements.h"

#include <algorithm>

namespace loom {

bool Replacement::replaces_type(const std::string& type) const {
  return std::find(replaces.begin(), replaces.end(), type) != replaces.end();
}

ReplacementRegistry& ReplacementRegistry::global() {
  static ReplacementRegistry registry;
  return registry;
}

void ReplacementRegistry::add(Replacement r) {
  for (auto& existing : all_)
    if (existing.name == r.name) {
      existing = std::move(r);
      return;
    }
  all_.push_back(std::move(r));
}

const Replacement* ReplacementRegistry::find(const std::string& name) const {
  for (auto& r : all_)
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<std::string> ReplacementRegistry::names() const {
  std::vector<std::string> out;
  for (auto& r : all_) out.push_back(r.name);
  return out;
}

}  // namespace loom
