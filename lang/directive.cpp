#include "lang/directive.h"

namespace loom {

const Value* Directive::arg(const std::string& name) const {
  for (auto& [n, v] : args)
    if (n == name) return &v;
  return nullptr;
}

std::string Directive::to_sched() const {
  std::string out = target.empty() ? "sch" : "sch[" + quote_string(target) + "]";
  out += "." + primitive + "(";
  for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i].first + "=" + args[i].second.to_source();
  return out + ")";
}

bool Directive::same_effect(const Directive& o) const {
  if (primitive != o.primitive || target != o.target || args.size() != o.args.size()) return false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].first != o.args[i].first) return false;
    // Kinds must match too: 2 and 2.0 print differently, so replay must keep the kind.
    if (args[i].second.kind() != o.args[i].second.kind() || args[i].second != o.args[i].second) return false;
  }
  return true;
}

}  // namespace loom
