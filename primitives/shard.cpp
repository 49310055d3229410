// shard(params, axis): Slapo tensor parallelism. Splits the named parameters of
// a module along `axis` over the tensor-parallel group (slapo.txt §3.2.2).
#include "primitives/registry.h"

namespace {
using namespace loom;

const TensorInfo* find_param(const ModuleNode& n, const std::string& name) {
  for (auto& p : n.params)
    if (p.name == name) return &p;
  return nullptr;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Errors: a parameter the module does not own directly.
void check_params_exist(const PrimitiveCall& c) {
  for (auto& name : c.strings_arg("params")) {
    if (find_param(c.node(), name)) continue;
    std::vector<std::string> names;
    for (auto& p : c.node().params) names.push_back(p.name);
    auto near = closest(name, names, 1);
    std::string owned = names.empty() ? "it owns no parameters directly" : "it owns ";
    for (size_t i = 0; i < names.size(); ++i) owned += (i ? ", " : "") + quote_string(names[i]);
    c.fail_at(c.arg_range("params"), "module has no parameter " + quote_string(name),
              (near.empty() ? "" : "did you mean " + quote_string(near[0]) + "? ") + owned);
  }
}

// Errors: axis out of range; a dimension the tensor-parallel degree does not divide.
void check_axis(const PrimitiveCall& c) {
  int64_t axis = c.int_arg("axis");
  int tp = c.schedule().mesh_state().tp;
  for (auto& name : c.strings_arg("params")) {
    const TensorInfo* p = find_param(c.node(), name);
    int64_t ndim = static_cast<int64_t>(p->shape.size());
    if (axis < 0 || axis >= ndim)
      c.fail_at(c.arg_range("axis"),
                "axis " + std::to_string(axis) + " is out of range for " + quote_string(name) + " of shape " +
                    shape_text(p->shape),
                "valid axes are 0.." + std::to_string(ndim - 1));
    if (p->shape[axis] % tp != 0)
      c.fail_at(c.arg_range("axis"),
                quote_string(name) + " has size " + std::to_string(p->shape[axis]) + " along axis " + std::to_string(axis) +
                    " (shape " + shape_text(p->shape) + "), which tp = " + std::to_string(tp) + " does not divide",
                "shard along another axis, or choose a tensor-parallel degree dividing " + std::to_string(p->shape[axis]));
  }
  if (tp == 1) c.warn("tp = 1, so sharding splits nothing", "set the tensor-parallel degree with sch.mesh(tp=N) first");
}

// Errors: the same parameter sharded before along a different axis.
void check_not_resharded(const PrimitiveCall& c) {
  int64_t axis = c.int_arg("axis");
  for (const Directive* d : c.schedule().directives_on(c.node().path, "shard")) {
    std::vector<std::string> earlier;
    const Value& v = *d->arg("params");
    if (v.is(ValueKind::String)) earlier.push_back(v.as_string());
    else for (auto& item : v.as_list()) earlier.push_back(item.as_string());
    for (auto& name : c.strings_arg("params"))
      if (std::find(earlier.begin(), earlier.end(), name) != earlier.end() && d->arg("axis")->as_int() != axis)
        c.fail(quote_string(name) + " is already sharded along axis " + std::to_string(d->arg("axis")->as_int()) + " at " +
                   d->where.to_string(),
               "a parameter is split one way; remove one of the two shard calls");
  }
}
}  // namespace

LOOM_PRIMITIVE(shard) {
  return loom::PrimitiveSpec("shard", "Split parameters along an axis over the tensor-parallel group.")
      .on(loom::Scope::NonRoot)
      .param("params", loom::ParamType::strings(), "parameter name(s) owned by the module, e.g. \"weight\" or [\"weight\", \"bias\"]")
      .param("axis", loom::ParamType::integer(), "dimension to split; weights are (out, in), so 0 splits outputs")
      .check(check_params_exist)
      .check(check_axis)
      .check(check_not_resharded);
}
