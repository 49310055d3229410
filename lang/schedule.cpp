#include "lang/schedule.h"

#include <algorithm>

#include "primitives/all.h"
#include "primitives/registry.h"

namespace loom {

Selection::Selection(Schedule* schedule, std::vector<int> modules, std::string pattern, bool from_pattern)
    : schedule_(schedule), modules_(std::move(modules)), pattern_(std::move(pattern)), from_pattern_(from_pattern) {}

std::vector<std::string> Selection::paths() const {
  std::vector<std::string> out;
  for (int m : modules_) out.push_back(schedule_->tree().node(m).path);
  return out;
}

std::string Selection::describe() const {
  return pattern_.empty() ? "sch" : "sch[" + quote_string(pattern_) + "]";
}

Selection Selection::operator[](const std::string& relative) const { return select(relative, SourceRange{}); }

Selection Selection::select(const std::string& relative, const SourceRange& where) const {
  const ModuleTree& tree = schedule_->tree();
  std::vector<int> out;
  bool wild = relative.find_first_of("*?") != std::string::npos;
  for (int m : modules_) {
    std::string full = join_path(tree.node(m).path, relative);
    for (int hit : tree.match(full)) out.push_back(hit);
  }
  std::string full_pattern = join_path(pattern_, relative);
  if (out.empty()) {
    std::string shown = modules_.size() == 1 ? join_path(tree.node(modules_[0]).path, relative) : full_pattern;
    std::string hint;
    auto near = tree.closest_paths(shown);
    if (relative.empty())
      hint = "an empty path names nothing; use the selection itself";
    else if (!near.empty()) {
      hint = "did you mean ";
      for (size_t i = 0; i < near.size(); ++i) hint += (i ? ", " : "") + quote_string(near[i]);
      hint += "?";
    } else {
      hint = "paths follow named_modules(); run `loom tree --model " + tree.model_name() + "` to list them";
    }
    throw UserError(where, "no module matches " + quote_string(shown) + " in model " + tree.model_name(), hint);
  }
  return Selection(schedule_, std::move(out), full_pattern, wild || from_pattern_ || modules_.size() > 1);
}

Selection Selection::blocks(const SourceRange& where) const {
  const ModuleTree& tree = schedule_->tree();
  std::vector<int> out;
  std::string pattern;
  for (int m : modules_) {
    int list = tree.largest_list(m);
    if (list < 0) {
      std::string what = m == 0 ? "model " + tree.model_name() : "`" + tree.node(m).path + "` in model " + tree.model_name();
      throw UserError(where, what + " holds no ModuleList, so blocks() has nothing to select",
                      "select modules by path instead; `loom tree --model " + tree.model_name() + "` lists them");
    }
    const std::vector<int>& entries = tree.node(list).children;
    out.insert(out.end(), entries.begin(), entries.end());
    if (pattern.empty()) pattern = join_path(tree.node(list).path, "*");
  }
  return Selection(schedule_, std::move(out), pattern, true);
}

std::vector<Selection> Selection::elements() const {
  const ModuleTree& tree = schedule_->tree();
  std::vector<Selection> out;
  if (modules_.size() == 1 && !from_pattern_) {
    for (int c : tree.node(modules_[0]).children)
      out.emplace_back(schedule_, std::vector<int>{c}, tree.node(c).path, false);
    return out;
  }
  for (int m : modules_) out.emplace_back(schedule_, std::vector<int>{m}, tree.node(m).path, false);
  return out;
}

const Selection& Selection::apply(const std::string& primitive, const CallArgs& args) const {
  register_builtin_primitives();
  const PrimitiveRegistry& registry = PrimitiveRegistry::global();
  const PrimitiveSpec* spec = registry.find(primitive);
  if (!spec) {
    auto near = closest(primitive, registry.names(), 1);
    throw UserError(args.name_range.known() ? args.name_range : args.call_range, "unknown primitive '" + primitive + "'",
                    near.empty() ? "see docs/primitives.md for the list" : "did you mean '" + near[0] + "'?");
  }
  if (spec->for_tests && !test_primitives_enabled())
    throw UserError(args.name_range.known() ? args.name_range : args.call_range,
                    primitive + " is a test-only primitive: it breaks training on purpose, to test loom verify",
                    "set LOOM_TEST_PRIMITIVES=1 in the environment to use it (tests/verify/ does)");
  auto bound = bind_arguments(*spec, args);
  for (int m : modules_) {
    PrimitiveCall call(*schedule_, *spec, m, args.call_range, bound);
    if (spec->scope == Scope::Root && m != 0)
      call.fail(spec->name + " applies to the whole model", "call it on sch: sch." + spec->name + "(...)");
    if (spec->scope == Scope::NonRoot && m == 0)
      call.fail(spec->name + " applies to a module, not the whole model", "select a module first: sch[\"path\"]." + spec->name + "(...)");
    for (auto& check : spec->checks) check(call);
    spec->apply(call);
  }
  return *this;
}

const Selection& Selection::apply_keywords(const std::string& primitive, std::vector<std::pair<std::string, Value>> kw,
                                           CallSite site) const {
  CallArgs call;
  call.call_range = site.range();
  call.name_range = call.call_range;
  for (auto& [n, v] : kw) call.keyword.push_back({n, ArgValue{std::move(v), call.call_range}});
  return apply(primitive, call);
}

namespace {
Value strings_value(const std::vector<std::string>& names) {
  std::vector<Value> items;
  for (auto& n : names) items.push_back(Value::string(n));
  return Value::list(std::move(items));
}
}  // namespace

const Selection& Selection::mesh(int tp, int pp, CallSite site) const {
  return apply_keywords("mesh", {{"tp", Value::integer(tp)}, {"pp", Value::integer(pp)}}, site);
}
const Selection& Selection::shard(std::vector<std::string> params, int axis, CallSite site) const {
  return apply_keywords("shard", {{"params", strings_value(params)}, {"axis", Value::integer(axis)}}, site);
}
const Selection& Selection::sync(const std::string& mode, const std::string& op, CallSite site) const {
  return apply_keywords("sync", {{"mode", Value::string(mode)}, {"op", Value::string(op)}}, site);
}
const Selection& Selection::checkpoint(CallSite site) const { return apply_keywords("checkpoint", {}, site); }
const Selection& Selection::replace(const std::string& impl, CallSite site) const {
  return apply_keywords("replace", {{"impl", Value::string(impl)}}, site);
}
const Selection& Selection::pipeline_split(CallSite site) const { return apply_keywords("pipeline_split", {}, site); }
const Selection& Selection::shard_states(int params, int grads, int optim, CallSite site) const {
  return apply_keywords("shard_states",
                        {{"params", Value::integer(params)}, {"grads", Value::integer(grads)}, {"optim", Value::integer(optim)}},
                        site);
}
const Selection& Selection::fsdp(CallSite site) const { return apply_keywords("fsdp", {}, site); }
const Selection& Selection::zero(int stage, CallSite site) const {
  return apply_keywords("zero", {{"stage", Value::integer(stage)}}, site);
}
const Selection& Selection::prefetch(Value budget, CallSite site) const {
  return apply_keywords("prefetch", {{"budget", std::move(budget)}}, site);
}
const Selection& Selection::unshard(Value keep, CallSite site) const {
  return apply_keywords("unshard", {{"keep", std::move(keep)}}, site);
}
const Selection& Selection::offload(const std::string& what, Value budget, CallSite site) const {
  return apply_keywords("offload", {{"what", Value::string(what)}, {"budget", std::move(budget)}}, site);
}
const Selection& Selection::compress(double ratio, int index_bits, Value sparsity, CallSite site) const {
  return apply_keywords("compress",
                        {{"ratio", Value::floating(ratio)}, {"index_bits", Value::integer(index_bits)}, {"sparsity", std::move(sparsity)}},
                        site);
}
const Selection& Selection::bucket(CallSite site) const { return apply_keywords("bucket", {}, site); }
const Selection& Selection::verify(CallSite site) const { return apply_keywords("verify", {}, site); }
const Selection& Selection::batch(int64_t micro, int64_t accum, CallSite site) const {
  return apply_keywords("batch", {{"micro", Value::integer(micro)}, {"accum", Value::integer(accum)}}, site);
}

// ---- Schedule ----

std::unique_ptr<Schedule> Schedule::clone() const {
  auto copy = std::make_unique<Schedule>(tree_, context_);
  copy->mesh_ = mesh_;
  copy->sharding_ = sharding_;
  copy->dp_read_ = dp_read_;
  copy->trace_ = trace_;
  copy->by_target_ = by_target_;
  copy->warnings_ = warnings_;
  copy->knobs_ = knobs_;
  return copy;
}

Schedule::Schedule(std::shared_ptr<const ModuleTree> tree, ScheduleContext context)
    : Selection(this, {0}, "", false), tree_(std::move(tree)), context_(context) {
  if (context_.world < 1) throw UserError(SourceRange{}, "world must be at least 1", "pass --world N with N >= 1");
  if (context_.local_world < 0 || (context_.local_world > 0 && context_.world % context_.local_world != 0))
    throw UserError(SourceRange{},
                    "local_world " + std::to_string(context_.local_world) + " does not divide world " +
                        std::to_string(context_.world),
                    "every node runs the same number of ranks: pass --local-world dividing --world");
}

int Schedule::read_dp(const SourceRange& at) {
  if (!dp_read_) dp_read_ = at;
  return dp();
}

void Schedule::record(Directive d) {
  by_target_.insert({d.target, trace_.size()});
  trace_.push_back(std::move(d));
}

const Directive* Schedule::enclosing_directive(int module, const std::string& primitive) const {
  for (int m = module; m >= 0; m = tree_->node(m).parent) {
    auto found = directives_on(tree_->node(m).path, primitive);
    if (!found.empty()) return found.front();
  }
  return nullptr;
}

std::vector<const Directive*> Schedule::directives_on(const std::string& target, const std::string& primitive) const {
  std::vector<const Directive*> out;
  // A multimap keeps equal keys in insertion order: the trace's order.
  auto [lo, hi] = by_target_.equal_range(target);
  for (auto it = lo; it != hi; ++it)
    if (trace_[it->second].primitive == primitive) out.push_back(&trace_[it->second]);
  return out;
}

}  // namespace loom
