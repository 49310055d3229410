// The primitive registry: each primitive declares its name, typed parameters,
// preconditions and effect; LOOM_PRIMITIVE registers one (built-in or user-defined).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lang/schedule.h"

namespace loom {

// Where a primitive may be called.
enum class Scope {
  Root,    // only on `sch` (the whole model)
  Module,  // on any module, the root included
  NonRoot  // on modules below the root
};

// The values a parameter accepts.
struct ParamType {
  std::vector<ValueKind> kinds;      // accepted kinds; Float also accepts Int, Bytes accepts Int
  std::vector<std::string> choices;  // a String must be one of these, when not empty
  bool list_of_strings = false;      // a List of Strings is accepted too

  std::string describe() const;
  bool accepts(const Value& v) const;
  // Converts an accepted value to its canonical kind (Int to Float for floats, Int to Bytes for sizes).
  Value normalize(const Value& v) const;

  static ParamType integer();
  static ParamType floating();
  static ParamType boolean();
  static ParamType string();
  static ParamType one_of(std::vector<std::string> choices);
  static ParamType strings();         // a string or a list of strings
  static ParamType bytes_or_auto();
  static ParamType bool_or_auto();
  static ParamType float_or_auto();
};

struct ParamSpec {
  std::string name;
  ParamType type;
  std::optional<Value> default_value;  // absent: required
  std::string doc;
};

// The hint of warnings about a schedule evaluated at dp = 1, where nothing can be sharded: the
// world size was probably left at its default.
inline constexpr const char* kAtWorldOne =
    "give the world size you will train with: `loom check --world N` (it defaults to 1), `loom run --nproc N`";

class PrimitiveCall;
using CheckFn = std::function<void(const PrimitiveCall&)>;
using EffectFn = std::function<void(const PrimitiveCall&)>;

// Everything the language knows about one primitive.
struct PrimitiveSpec {
  PrimitiveSpec(std::string name, std::string doc);

  PrimitiveSpec& on(Scope s) { scope = s; return *this; }
  PrimitiveSpec& param(std::string name, ParamType type, std::string doc);
  PrimitiveSpec& param(std::string name, ParamType type, Value default_value, std::string doc);
  // Preconditions run in order before the effect; each throws a UserError via PrimitiveCall::fail.
  PrimitiveSpec& check(CheckFn fn) { checks.push_back(std::move(fn)); return *this; }
  // The effect: records directives (the default records this call as it is).
  PrimitiveSpec& effect(EffectFn fn) { apply = std::move(fn); return *this; }
  // A primitive that breaks training on purpose, to test `loom verify`: refused unless the
  // environment sets LOOM_TEST_PRIMITIVES=1.
  PrimitiveSpec& test_only() { for_tests = true; return *this; }

  std::string name;
  std::string doc;
  Scope scope = Scope::Module;
  std::vector<ParamSpec> params;
  std::vector<CheckFn> checks;
  EffectFn apply;
  bool for_tests = false;
};

// One application of a primitive to one module, with its bound arguments.
class PrimitiveCall {
 public:
  PrimitiveCall(Schedule& schedule, const PrimitiveSpec& spec, int module, SourceRange where,
                std::vector<std::pair<std::string, ArgValue>> args);

  Schedule& schedule() const { return schedule_; }
  const PrimitiveSpec& spec() const { return spec_; }
  int module() const { return module_; }
  const ModuleNode& node() const { return schedule_.tree().node(module_); }
  // The module's path for messages: `h.3.mlp`, or `sch` for the root.
  std::string target_name() const;
  const SourceRange& where() const { return where_; }

  const Value& arg(const std::string& name) const;
  const SourceRange& arg_range(const std::string& name) const;  // the argument, or the call if defaulted
  int64_t int_arg(const std::string& name) const { return arg(name).as_int(); }
  double number_arg(const std::string& name) const { return arg(name).as_number(); }
  const std::string& string_arg(const std::string& name) const { return arg(name).as_string(); }
  std::vector<std::string> strings_arg(const std::string& name) const;  // string or list of strings

  // A user error at the call (or at `at`), naming the primitive and module.
  [[noreturn]] void fail(const std::string& message, const std::string& hint) const;
  [[noreturn]] void fail_at(const SourceRange& at, const std::string& message, const std::string& hint) const;
  void warn(const std::string& message, const std::string& hint) const;

  // Records this call as a directive on its module.
  void record() const;
  // Records another primitive's directive (shorthands expand this way); args are re-checked by that spec.
  void record_as(const std::string& primitive, std::vector<std::pair<std::string, Value>> args) const;

 private:
  Schedule& schedule_;
  const PrimitiveSpec& spec_;
  int module_;
  SourceRange where_;
  std::vector<std::pair<std::string, ArgValue>> args_;
};

// A check: the module owns, directly, the parameter named by the string argument `arg`.
void check_owns_parameter(const PrimitiveCall& call, const std::string& arg);

class PrimitiveRegistry {
 public:
  static PrimitiveRegistry& global();
  // Adds a primitive; a second with the same name replaces nothing and is an InternalError.
  int add(PrimitiveSpec spec);
  const PrimitiveSpec* find(const std::string& name) const;
  std::vector<std::string> names() const;  // in registration order
  const std::vector<PrimitiveSpec>& all() const { return specs_; }

 private:
  std::vector<PrimitiveSpec> specs_;
};

// "shard(params: string or list of strings, axis: int)": the documented signature.
std::string signature(const PrimitiveSpec& spec);

// Binds call arguments to a primitive's parameters: positional in order, then by
// keyword; reports unknown, missing and mistyped arguments at their locations.
std::vector<std::pair<std::string, ArgValue>> bind_arguments(const PrimitiveSpec& spec, const CallArgs& args);

}  // namespace loom

// Defines and registers a primitive. The body returns its PrimitiveSpec:
//   LOOM_PRIMITIVE(tag) { return loom::PrimitiveSpec("tag", "doc").param(...); }
// The anchor variable lets a library force-link its built-ins (primitives/all.h).
#define LOOM_PRIMITIVE(NAME)                                                                    \
  static ::loom::PrimitiveSpec loom_define_primitive_##NAME();                                  \
  extern const int loom_primitive_anchor_##NAME;                                                \
  const int loom_primitive_anchor_##NAME =                                                      \
      ::loom::PrimitiveRegistry::global().add(loom_define_primitive_##NAME());                  \
  static ::loom::PrimitiveSpec loom_define_primitive_##NAME()
