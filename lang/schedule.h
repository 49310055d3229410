// The schedule object model and C++ fluent API: Schedule (the whole model) and
// Selection (a set of modules). Every primitive call records directives; the
// .sched interpreter calls this same API.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lang/diagnostics.h"
#include "lang/directive.h"
#include "lang/knobs.h"
#include "lang/module_tree.h"
#include "lang/value.h"

namespace loom {

class Schedule;

// The run a schedule is written for. local_world 0 means "all ranks on one node".
struct ScheduleContext {
  int world = 1;
  int local_world = 0;
};

// Schedule-level parallel degrees (mesh primitive); data parallelism takes the rest of world.
struct Mesh {
  int tp = 1;
  int pp = 1;
  SourceRange where;  // unknown until mesh() is called
};

// Lins sharding factors (shard_states primitive); 1 means replicated.
struct ShardingFactors {
  int params = 1;
  int grads = 1;
  int optim = 1;
  SourceRange where;
};

// One argument as written at a call site.
struct ArgValue {
  Value value;
  SourceRange range;
};

// A primitive call's arguments before binding to the primitive's parameters.
struct CallArgs {
  std::vector<ArgValue> positional;
  std::vector<std::pair<std::string, ArgValue>> keyword;
  SourceRange call_range;  // the whole call
  SourceRange name_range;  // the primitive's name
};

// A set of modules of one schedule, in tree order. Calls on a selection of
// several modules apply to each in turn.
class Selection {
 public:
  Selection(Schedule* schedule, std::vector<int> modules, std::string pattern, bool from_pattern);

  // Modules below each selected one, by a path relative to it (globs allowed).
  // A pattern that matches nothing is a user error at `where`, with suggestions.
  Selection select(const std::string& relative, const SourceRange& where) const;
  Selection operator[](const std::string& relative) const;
  // The model's repeated blocks below each selected module: the entries of its largest
  // ModuleList (ModuleTree::largest_list), whatever the model names them (`h`, `layers`,
  // `bert.encoder.layer`). A module with no ModuleList below it is a user error at `where`.
  Selection blocks(const SourceRange& where = SourceRange{}) const;

  const std::vector<int>& modules() const { return modules_; }
  std::vector<std::string> paths() const;
  // What len() and for-loops see: the children of a single named module, or the matches of a glob.
  std::vector<Selection> elements() const;
  std::string describe() const;  // sch["h.*"]
  Schedule& schedule() const { return *schedule_; }

  // Applies a registered primitive to every selected module: binds and type-checks
  // the arguments, checks preconditions, records directives. The one entry point
  // that .sched files, the fluent methods below and replay all use.
  const Selection& apply(const std::string& primitive, const CallArgs& args) const;

  // The fluent API: one method per built-in primitive (see primitives/all.h).
  const Selection& mesh(int tp = 1, int pp = 1, CallSite site = CallSite::current()) const;
  const Selection& shard(std::vector<std::string> params, int axis, CallSite site = CallSite::current()) const;
  const Selection& sync(const std::string& mode, const std::string& op, CallSite site = CallSite::current()) const;
  const Selection& checkpoint(CallSite site = CallSite::current()) const;
  const Selection& replace(const std::string& impl, CallSite site = CallSite::current()) const;
  const Selection& pipeline_split(CallSite site = CallSite::current()) const;
  const Selection& shard_states(int params, int grads, int optim, CallSite site = CallSite::current()) const;
  const Selection& fsdp(CallSite site = CallSite::current()) const;
  const Selection& zero(int stage, CallSite site = CallSite::current()) const;
  const Selection& prefetch(Value budget = Value::auto_(), CallSite site = CallSite::current()) const;
  const Selection& unshard(Value keep = Value::auto_(), CallSite site = CallSite::current()) const;
  const Selection& offload(const std::string& what, Value budget = Value::auto_(), CallSite site = CallSite::current()) const;
  const Selection& compress(double ratio, int index_bits = 1, Value sparsity = Value::auto_(),
                            CallSite site = CallSite::current()) const;
  const Selection& bucket(CallSite site = CallSite::current()) const;
  const Selection& verify(CallSite site = CallSite::current()) const;
  // 0 keeps the command line's (--micro-batch, --accum).
  const Selection& batch(int64_t micro = 0, int64_t accum = 0, CallSite site = CallSite::current()) const;

 private:
  const Selection& apply_keywords(const std::string& primitive, std::vector<std::pair<std::string, Value>> args,
                                  CallSite site) const;

  Schedule* schedule_;
  std::vector<int> modules_;
  std::string pattern_;
  bool from_pattern_;
};

// The schedule of one model: the root selection (`sch`) plus the recorded trace.
class Schedule : public Selection {
 public:
  explicit Schedule(std::shared_ptr<const ModuleTree> tree, ScheduleContext context = {});
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;
  // A schedule with this one's directives, states, warnings and knobs, to record more on (loom
  // plan evaluates the lines its plans share once, and each plan's own on a copy).
  std::unique_ptr<Schedule> clone() const;

  const ModuleTree& tree() const { return *tree_; }
  std::shared_ptr<const ModuleTree> tree_ptr() const { return tree_; }
  const ScheduleContext& context() const { return context_; }
  int world() const { return context_.world; }
  int local_world() const { return context_.local_world > 0 ? context_.local_world : context_.world; }
  // The data-parallel degree world / (tp * pp).
  int dp() const { return context_.world / (mesh_.tp * mesh_.pp); }
  // dp, marked as read at `at`, so that a later mesh() is refused.
  int read_dp(const SourceRange& at);
  const std::optional<SourceRange>& dp_first_read() const { return dp_read_; }

  const Mesh& mesh_state() const { return mesh_; }
  void set_mesh(Mesh m) { mesh_ = std::move(m); }
  const ShardingFactors& sharding() const { return sharding_; }
  void set_sharding(ShardingFactors f) { sharding_ = std::move(f); }

  const std::vector<Directive>& trace() const { return trace_; }
  const std::vector<Diagnostic>& warnings() const { return warnings_; }
  KnobSpace& knobs() { return knobs_; }
  const KnobSpace& knobs() const { return knobs_; }

  void record(Directive d);
  void warn(Diagnostic d) { warnings_.push_back(std::move(d)); }
  // The first `primitive` directive on `module` or its nearest ancestor that has one (checkpoint, bucket).
  const Directive* enclosing_directive(int module, const std::string& primitive) const;
  // Directives of `primitive` recorded on exactly `target`, in order.
  std::vector<const Directive*> directives_on(const std::string& target, const std::string& primitive) const;

 private:
  std::shared_ptr<const ModuleTree> tree_;
  ScheduleContext context_;
  Mesh mesh_;
  ShardingFactors sharding_;
  std::optional<SourceRange> dp_read_;
  std::vector<Directive> trace_;
  std::multimap<std::string, size_t> by_target_;
  std::vector<Diagnostic> warnings_;
  KnobSpace knobs_;
};

}  // namespace loom
