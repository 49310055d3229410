// replace(impl): swaps a module for a registered alternative implementation
// with the same parameters (slapo.txt §3.2.1). Alternatives are registered by
// the library that defines them (lang/replacements.h).
#include "lang/replacements.h"
#include "primitives/registry.h"

namespace {
using namespace loom;

// Errors: an unknown implementation; one that does not apply to this module type.
void check_impl(const PrimitiveCall& c) {
  const std::string& impl = c.string_arg("impl");
  const Replacement* r = ReplacementRegistry::global().find(impl);
  if (!r) {
    auto names = ReplacementRegistry::global().names();
    auto near = closest(impl, names, 1);
    std::string known;
    for (size_t i = 0; i < names.size(); ++i) known += (i ? ", " : "") + quote_string(names[i]);
    c.fail_at(c.arg_range("impl"), "no implementation named " + quote_string(impl) + " is registered",
              near.empty() ? "registered: " + (known.empty() ? std::string("none") : known)
                           : "did you mean " + quote_string(near[0]) + "?");
  }
  if (!r->replaces_type(c.node().type)) {
    std::string types;
    for (size_t i = 0; i < r->replaces.size(); ++i) types += (i == 0 ? "" : i + 1 == r->replaces.size() ? " or " : ", ") + r->replaces[i];
    c.fail_at(c.arg_range("impl"), quote_string(impl) + " replaces modules of type " + types + ", but this module is a " + c.node().type,
              "select a " + types + " module");
  }
}
}  // namespace

LOOM_PRIMITIVE(replace) {
  return loom::PrimitiveSpec("replace", "Swap the module for a registered alternative implementation.")
      .on(loom::Scope::NonRoot)
      .param("impl", loom::ParamType::string(), "name of the registered alternative")
      .check(check_impl);
}
