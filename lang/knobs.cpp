#include "lang/knobs.h"

#include "lang/module_tree.h"

#include <cstdlib>

namespace loom {

void KnobSpace::set_override(const std::string& name, const std::string& text) { overrides_[name] = text; }

const Knob* KnobSpace::find(const std::string& name) const {
  for (auto& k : knobs_)
    if (k.name == name) return &k;
  return nullptr;
}

namespace {
std::string domain_text(const std::vector<Value>& domain) { return Value::list(domain).to_source(); }

// Matches `--set` text against a domain value: by spelling, or numerically.
bool text_matches(const std::string& text, const Value& v) {
  if (v.to_source() == text || v.to_display() == text) return true;
  if (!v.is_number()) return false;
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  return end && *end == '\0' && end != text.c_str() && d == v.as_number();
}
}  // namespace

Value KnobSpace::declare(const std::string& name, const std::vector<Value>& domain, const SourceRange& where) {
  if (domain.empty())
    throw UserError(where, "tune knob '" + name + "' has an empty domain", "give it at least one value to choose from");
  for (auto& v : domain)
    if (!v.is_data())
      throw UserError(where, "tune knob '" + name + "' has " + kind_with_article(v.kind()) + " in its domain",
                      "domains hold numbers, sizes, strings, bools, none or auto");
  for (auto& k : knobs_) {
    if (k.name != name) continue;
    if (k.domain != domain)
      throw UserError(where,
                      "tune knob '" + name + "' is redefined with domain " + domain_text(domain) +
                          ", but it was declared at " + k.where.to_string() + " with " + domain_text(k.domain),
                      "use the same domain, or give the second knob another name");
    return k.value;
  }
  Knob k{name, domain, domain.front(), where};
  if (auto a = assignment_.find(name); a != assignment_.end()) {
    bool found = false;
    for (auto& v : domain) found = found || (v == a->second && v.kind() == a->second.kind());
    if (found) k.value = a->second;
  } else if (auto o = overrides_.find(name); o != overrides_.end()) {
    bool found = false;
    for (auto& v : domain)
      if (!found && text_matches(o->second, v)) k.value = v, found = true;
    if (!found)
      throw UserError(where, "--set " + name + "=" + o->second + " is not in the knob's domain " + domain_text(domain),
                      "pick one of the listed values");
  }
  knobs_.push_back(k);
  return k.value;
}

void KnobSpace::constrain(bool holds, const std::string& text, const SourceRange& where) {
  constraints_.push_back({text, where, holds});
  if (holds) return;
  std::string values;
  for (auto& k : knobs_) values += (values.empty() ? "" : ", ") + k.name + "=" + k.value.to_source();
  throw ConstraintViolation(where, "constraint '" + text + "' does not hold for " + (values.empty() ? "these values" : values),
                            "choose other knob values with --set name=value");
}

void KnobSpace::check_overrides_used() const {
  for (auto& [name, text] : overrides_)
    if (!find(name)) {
      std::vector<std::string> names;
      std::vector<Value> quoted;
      for (auto& k : knobs_) {
        names.push_back(k.name);
        quoted.push_back(Value::string(k.name));
      }
      auto near = closest(name, names, 1);
      std::string hint = !near.empty()     ? "did you mean '" + near[0] + "'?"
                         : names.empty() ? "the schedule declares no knobs; remove --set " + name
                                         : "declared knobs: " + domain_text(quoted);
      throw UserError(SourceRange{}, "--set names knob '" + name + "', which the schedule never declares with tune(...)", hint);
    }
}

void apply_settings(KnobSpace& knobs, const std::vector<std::string>& settings) {
  for (auto& s : settings) {
    size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError(SourceRange{}, "--set expects name=value, got '" + s + "'", "e.g. --set micro_batch=4");
    knobs.set_override(s.substr(0, eq), s.substr(eq + 1));
  }
}

}  // namespace loom
