// test_skip_reduction(param=): test-only. The gradient of one of this module's parameters is
// never reduced across ranks: each rank steps with its own local gradient, as a dropped
// collective would leave it. `loom verify` must name this parameter's module and this directive.
#include "primitives/registry.h"

LOOM_PRIMITIVE(test_skip_reduction) {
  return loom::PrimitiveSpec("test_skip_reduction", "Test only: never reduce one parameter's gradient across ranks.")
      .on(loom::Scope::NonRoot)
      .param("param", loom::ParamType::string(), loom::Value::string("weight"), "the parameter, owned by this module")
      .check([](const loom::PrimitiveCall& c) { loom::check_owns_parameter(c, "param"); })  // errors: not its parameter
      .test_only();
}
