#include "primitives/registry.h"

#include <algorithm>
#include <cstdlib>

#include "primitives/all.h"

#define LOOM_DECLARE_ANCHOR(NAME) extern const int loom_primitive_anchor_##NAME;
LOOM_BUILTIN_PRIMITIVES(LOOM_DECLARE_ANCHOR)
#undef LOOM_DECLARE_ANCHOR

namespace loom {

void register_builtin_primitives() {
  // Reading each anchor pulls its object file out of the static library.
  volatile int sink = 0;
#define LOOM_TOUCH_ANCHOR(NAME) sink = sink + loom_primitive_anchor_##NAME;
  LOOM_BUILTIN_PRIMITIVES(LOOM_TOUCH_ANCHOR)
#undef LOOM_TOUCH_ANCHOR
  (void)sink;
}

bool test_primitives_enabled() {
  const char* v = std::getenv("LOOM_TEST_PRIMITIVES");
  return v && std::string(v) == "1";
}

// ---- ParamType ----

ParamType ParamType::integer() { return {{ValueKind::Int}, {}, false}; }
ParamType ParamType::floating() { return {{ValueKind::Float}, {}, false}; }
ParamType ParamType::boolean() { return {{ValueKind::Bool}, {}, false}; }
ParamType ParamType::string() { return {{ValueKind::String}, {}, false}; }
ParamType ParamType::one_of(std::vector<std::string> c) { return {{ValueKind::String}, std::move(c), false}; }
ParamType ParamType::strings() { return {{ValueKind::String}, {}, true}; }
ParamType ParamType::bytes_or_auto() { return {{ValueKind::Bytes, ValueKind::Auto}, {}, false}; }
ParamType ParamType::bool_or_auto() { return {{ValueKind::Bool, ValueKind::Auto}, {}, false}; }
ParamType ParamType::float_or_auto() { return {{ValueKind::Float, ValueKind::Auto}, {}, false}; }

std::string ParamType::describe() const {
  if (!choices.empty()) {
    std::string out = "one of ";
    for (size_t i = 0; i < choices.size(); ++i) out += (i ? ", " : "") + quote_string(choices[i]);
    return out;
  }
  std::string out;
  for (size_t i = 0; i < kinds.size(); ++i) {
    std::string name = kinds[i] == ValueKind::Bytes ? "a byte size" : kind_name(kinds[i]);
    out += (i ? " or " : "") + name;
  }
  if (list_of_strings) out += " or list of strings";
  return out;
}

bool ParamType::accepts(const Value& v) const {
  for (ValueKind k : kinds) {
    bool kind_ok = v.kind() == k || (k == ValueKind::Float && v.is(ValueKind::Int)) ||
                   (k == ValueKind::Bytes && v.is(ValueKind::Int));
    if (!kind_ok) continue;
    if (k == ValueKind::String && !choices.empty())
      return std::find(choices.begin(), choices.end(), v.as_string()) != choices.end();
    return true;
  }
  if (list_of_strings && v.is(ValueKind::List)) {
    for (auto& item : v.as_list())
      if (!item.is(ValueKind::String)) return false;
    return true;
  }
  return false;
}

Value ParamType::normalize(const Value& v) const {
  for (ValueKind k : kinds) {
    if (k == ValueKind::Float && v.is(ValueKind::Int)) return Value::floating(static_cast<double>(v.as_int()));
    if (k == ValueKind::Bytes && v.is(ValueKind::Int)) return Value::bytes(v.as_int());
  }
  return v;
}

// ---- PrimitiveSpec ----

PrimitiveSpec::PrimitiveSpec(std::string n, std::string d) : name(std::move(n)), doc(std::move(d)) {
  apply = [](const PrimitiveCall& call) { call.record(); };
}

PrimitiveSpec& PrimitiveSpec::param(std::string n, ParamType type, std::string d) {
  params.push_back({std::move(n), std::move(type), std::nullopt, std::move(d)});
  return *this;
}

PrimitiveSpec& PrimitiveSpec::param(std::string n, ParamType type, Value def, std::string d) {
  params.push_back({std::move(n), std::move(type), std::move(def), std::move(d)});
  return *this;
}

// ---- PrimitiveCall ----

PrimitiveCall::PrimitiveCall(Schedule& schedule, const PrimitiveSpec& spec, int module, SourceRange where,
                             std::vector<std::pair<std::string, ArgValue>> args)
    : schedule_(schedule), spec_(spec), module_(module), where_(std::move(where)), args_(std::move(args)) {}

std::string PrimitiveCall::target_name() const { return module_ == 0 ? "sch" : "`" + node().path + "`"; }

const Value& PrimitiveCall::arg(const std::string& name) const {
  for (auto& [n, a] : args_)
    if (n == name) return a.value;
  throw InternalError("primitive " + spec_.name + " read undeclared argument " + name);
}

const SourceRange& PrimitiveCall::arg_range(const std::string& name) const {
  for (auto& [n, a] : args_)
    if (n == name) return a.range.known() ? a.range : where_;
  return where_;
}

std::vector<std::string> PrimitiveCall::strings_arg(const std::string& name) const {
  const Value& v = arg(name);
  if (v.is(ValueKind::String)) return {v.as_string()};
  std::vector<std::string> out;
  for (auto& item : v.as_list()) out.push_back(item.as_string());
  return out;
}

void PrimitiveCall::fail(const std::string& message, const std::string& hint) const { fail_at(where_, message, hint); }

void PrimitiveCall::fail_at(const SourceRange& at, const std::string& message, const std::string& hint) const {
  throw UserError(at, spec_.name + " on " + target_name() + ": " + message, hint);
}

void PrimitiveCall::warn(const std::string& message, const std::string& hint) const {
  schedule_.warn(Diagnostic{Severity::Warning, where_, spec_.name + " on " + target_name() + ": " + message, hint});
}

void PrimitiveCall::record() const {
  Directive d;
  d.primitive = spec_.name;
  d.target = node().path;
  for (auto& [n, a] : args_) d.args.push_back({n, a.value});
  d.where = where_;
  schedule_.record(std::move(d));
}

void PrimitiveCall::record_as(const std::string& primitive, std::vector<std::pair<std::string, Value>> args) const {
  CallArgs call;
  for (auto& [n, v] : args) call.keyword.push_back({n, ArgValue{v, where_}});
  call.call_range = where_;
  call.name_range = where_;
  Selection(&schedule_, {module_}, node().path, false).apply(primitive, call);
}

void check_owns_parameter(const PrimitiveCall& c, const std::string& arg) {
  const std::string& name = c.string_arg(arg);
  for (auto& p : c.node().params)
    if (p.name == name) return;
  c.fail_at(c.arg_range(arg), "module has no parameter " + quote_string(name), "name one it owns directly, e.g. \"weight\"");
}

// ---- PrimitiveRegistry ----

PrimitiveRegistry& PrimitiveRegistry::global() {
  static PrimitiveRegistry registry;
  return registry;
}

int PrimitiveRegistry::add(PrimitiveSpec spec) {
  if (find(spec.name)) throw InternalError("primitive '" + spec.name + "' is registered twice");
  specs_.push_back(std::move(spec));
  return static_cast<int>(specs_.size());
}

const PrimitiveSpec* PrimitiveRegistry::find(const std::string& name) const {
  for (auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<std::string> PrimitiveRegistry::names() const {
  std::vector<std::string> out;
  for (auto& s : specs_) out.push_back(s.name);
  return out;
}

std::string signature(const PrimitiveSpec& spec) {
  std::string out = spec.name + "(";
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const ParamSpec& p = spec.params[i];
    out += (i ? ", " : "") + p.name + ": " + p.type.describe();
    if (p.default_value) out += " = " + p.default_value->to_source();
  }
  return out + ")";
}

// ---- binding ----

std::vector<std::pair<std::string, ArgValue>> bind_arguments(const PrimitiveSpec& spec, const CallArgs& call) {
  std::vector<std::optional<ArgValue>> bound(spec.params.size());
  auto signature = [&] {
    std::string s = spec.name + "(";
    for (size_t i = 0; i < spec.params.size(); ++i) s += (i ? ", " : "") + spec.params[i].name;
    return s + ")";
  };
  if (call.positional.size() > spec.params.size())
    throw UserError(call.positional[spec.params.size()].range,
                    spec.name + " takes " + std::to_string(spec.params.size()) + " argument" +
                        (spec.params.size() == 1 ? "" : "s") + " but " + std::to_string(call.positional.size()) +
                        " were given",
                    "its signature is " + signature());
  for (size_t i = 0; i < call.positional.size(); ++i) bound[i] = call.positional[i];
  for (auto& [name, a] : call.keyword) {
    size_t i = 0;
    while (i < spec.params.size() && spec.params[i].name != name) ++i;
    if (i == spec.params.size()) {
      std::vector<std::string> names;
      for (auto& p : spec.params) names.push_back(p.name);
      auto near = closest(name, names, 1);
      throw UserError(a.range, spec.name + " has no parameter '" + name + "'",
                      near.empty() ? "its signature is " + signature() : "did you mean '" + near[0] + "'? its signature is " + signature());
    }
    if (bound[i])
      throw UserError(a.range, "argument '" + name + "' of " + spec.name + " is given twice", "its signature is " + signature());
    bound[i] = a;
  }
  std::vector<std::pair<std::string, ArgValue>> out;
  for (size_t i = 0; i < spec.params.size(); ++i) {
    const ParamSpec& p = spec.params[i];
    if (!bound[i]) {
      if (!p.default_value)
        throw UserError(call.call_range, spec.name + " is missing its argument '" + p.name + "' (" + p.type.describe() + ")",
                        "its signature is " + signature());
      out.push_back({p.name, ArgValue{*p.default_value, SourceRange{}}});
      continue;
    }
    if (!p.type.accepts(bound[i]->value)) {
      std::string got = bound[i]->value.is_data() ? bound[i]->value.to_source() : std::string(kind_name(bound[i]->value.kind()));
      throw UserError(bound[i]->range,
                      "argument '" + p.name + "' of " + spec.name + " must be " + p.type.describe() + ", got " + got,
                      p.doc.empty() ? "its signature is " + signature() : p.name + ": " + p.doc);
    }
    out.push_back({p.name, ArgValue{p.type.normalize(bound[i]->value), bound[i]->range}});
  }
  return out;
}

}  // namespace loom
