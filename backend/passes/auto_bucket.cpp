#include "backend/passes/auto_bucket.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "backend/passes/bucket.h"
#include "backend/passes/window_reductions.h"
#include "backend/sim/memory_walk.h"

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

// A gather of the selection, and the compute that follows it until the next gather.
struct Candidate {
  size_t gather = 0;  // its index in the program before any bucket
  const BucketRequest* request = nullptr;
  double compute_s = 0;  // the compute between it and the next gather of the phase
  // The phase's computes up to that next gather: where the span ends in a program whose gathers
  // a bucket merged or moved (computes stay where they are).
  int computes_through = 0;
  bool starts_run = false;  // the phase's first, or after a gather outside the selection
};

// The sized bucket request each parameter lies in (the first that names it), or null.
std::vector<const BucketRequest*> requests_of(const ir::Program& p, const PassInputs& inputs) {
  std::vector<const BucketRequest*> of(p.params.size(), nullptr);
  for (const BucketRequest& r : inputs.sized_buckets)
    for (size_t q = 0; q < p.params.size(); ++q)
      if (!of[q] && ir::within(p.params[q].name, r.module)) of[q] = &r;
  return of;
}

// The request a gather's parameters share, or null.
const BucketRequest* request_of(const Instr& g, const std::vector<const BucketRequest*>& of) {
  if (g.params.empty() || g.runs_in != ir::MicroBatches::All) return nullptr;
  const BucketRequest* r = of[static_cast<size_t>(g.params[0])];
  for (int q : g.params)
    if (of[static_cast<size_t>(q)] != r) return nullptr;
  return r;
}

std::vector<Candidate> candidates(const ir::Program& p, ir::Phase phase, const std::vector<const BucketRequest*>& of,
                                  const MemoryPlanning& m) {
  std::vector<Candidate> found;
  bool run_broken = true;
  long open = -1;  // the candidate whose compute is being summed
  int computes = 0;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.phase != phase) continue;
    if (in.kind == OpKind::AllGather) {
      if (open >= 0) found[static_cast<size_t>(open)].computes_through = computes;
      const BucketRequest* r = request_of(in, of);
      if (!r) {
        run_broken = true;
        open = -1;
        continue;
      }
      found.push_back({i, r, 0, 0, run_broken});
      run_broken = false;
      open = static_cast<long>(found.size()) - 1;
    } else if (ir::runs_module(in.kind)) {
      ++computes;
      if (open >= 0 && m.instruction_seconds) found[static_cast<size_t>(open)].compute_s += m.instruction_seconds(p, in);
    }
  }
  if (open >= 0) found[static_cast<size_t>(open)].computes_through = computes;
  return found;
}

// Where a candidate's span ends in `p`: the first gather or compute of `phase` after its
// `computes_through`-th compute, or past the phase's last instruction.
size_t span_end(const ir::Program& p, ir::Phase phase, int computes_through) {
  int seen = 0;
  size_t end = 0;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.phase != phase) continue;
    bool compute = ir::runs_module(in.kind);
    if (seen >= computes_through && (compute || in.kind == OpKind::AllGather)) return i;
    seen += compute ? 1 : 0;
    end = i + 1;
  }
  return end;
}

// Just past the last wait of the backward reductions (reduce-scatters or TAGC's compresses: what
// frees the full gradients, and what window_reductions keeps in flight) of the parameters
// `members` in `p`; 0 when none.
size_t reduced_by(const ir::Program& p, const std::vector<int>& members) {
  size_t end = 0;
  for (const Instr& in : p.instrs) {
    bool reduces_a_member = ir::launches_reduction(in) && std::any_of(in.params.begin(), in.params.end(), [&](int q) {
                              return std::find(members.begin(), members.end(), q) != members.end();
                            });
    if (reduces_a_member) end = std::max(end, std::min(ir::find_instruction(p, OpKind::Wait, in.handle) + 1, p.instrs.size()));
  }
  return end;
}

void move_instruction(ir::Program& p, size_t from, size_t to) {
  Instr moved = std::move(p.instrs[from]);
  p.instrs.erase(p.instrs.begin() + static_cast<long>(from));
  p.instrs.insert(p.instrs.begin() + static_cast<long>(to), std::move(moved));
}

// A program with one more bucket applied.
struct Applied {
  ir::Program program;
  bool changed = false;       // its collectives merged or its gather moved
  bool moved = false;         // its gather issued before the previous bucket's wait
  bool within_limit = true;   // its span's memory
};

// Decides the buckets of one phase and applies them one at a time, each on the program the
// buckets before it left, so the memory constraint walks the program the pass makes, not one
// whose buffers it adds up beside: a candidate joins the open bucket when the bucket's gather
// still hides (the time constraint, or the size cap, or the same module without times) and the
// program with the grown bucket merged and moved walks within the limit.
class BucketPlanner {
 public:
  BucketPlanner(const ir::Program& unbucketed, ir::Phase phase, const PassInputs& inputs, const std::vector<Candidate>& candidates)
      : unbucketed_(unbucketed), phase_(phase), inputs_(inputs), candidates_(candidates), working_(unbucketed) {
    for (size_t i = 0; i < unbucketed.instrs.size(); ++i)
      if (unbucketed.instrs[i].kind == OpKind::ReduceScatter && unbucketed.instrs[i].phase == ir::Phase::Backward)
        for (int q : unbucketed.instrs[i].params) reduction_of_.try_emplace(q, i);
  }

  // The program with every bucket applied; `changed`: whether any merged or moved.
  ir::Program run(bool* changed) {
    for (size_t i = 0; i < candidates_.size(); ++i) {
      if (!open_.empty()) {
        if (std::optional<Applied> grown = joined(i)) {
          open_.push_back(i);
          open_applied_ = std::move(*grown);
          continue;
        }
        close_open();
      }
      open_ = {i};
      open_applied_ = apply(open_);
    }
    if (!open_.empty()) close_open();
    *changed = changed_;
    return std::move(working_);
  }

 private:
  void close_open() {
    changed_ |= open_applied_.changed;
    working_ = std::move(open_applied_.program);
    previous_ = std::move(open_);
    open_.clear();
  }

  // The open bucket with candidate `i` added, applied, if `i` joins it.
  std::optional<Applied> joined(size_t i) const {
    const BucketRequest& r = *candidates_[i].request;
    const BucketRequest& first = *candidates_[open_[0]].request;
    if (candidates_[i].starts_run || r.automatic != first.automatic || r.size != first.size) return std::nullopt;
    std::vector<size_t> with = open_;
    with.push_back(i);
    bool for_overlap = r.automatic && inputs_.memory.instruction_seconds;
    if (!r.automatic) {
      if (merged(with, false).bytes > r.size) return std::nullopt;
    } else if (!for_overlap) {
      if (r.module != first.module) return std::nullopt;  // whole modules
    } else if (!hides(with)) {
      return std::nullopt;
    }
    Applied grown = apply(with);
    if (!grown.within_limit) return std::nullopt;
    // A bucket sized for overlap hides behind the previous bucket's compute only if its gather
    // moves ahead of that bucket's wait: it grows only while it still does (one that cannot keeps
    // one gather, as a run's first does). A capped or whole-module bucket must not lose that
    // place by growing.
    if (!grown.moved && (for_overlap || open_applied_.moved)) return std::nullopt;
    return grown;
  }

  // SimpleFSDP's time constraint: the bucket's all-gather (and, backward, the previous bucket's
  // reduce-scatter) within the previous bucket's compute. The first bucket of a run has nothing
  // before it to hide behind.
  bool hides(const std::vector<size_t>& with) const {
    if (candidates_[with[0]].starts_run || previous_.empty()) return false;
    double compute = 0;
    for (size_t j : previous_) compute += candidates_[j].compute_s;
    double comm = inputs_.memory.instruction_seconds(unbucketed_, merged(with, false));
    if (phase_ == ir::Phase::Backward) {
      Instr reduction = merged(previous_, true);
      if (!reduction.params.empty()) comm += inputs_.memory.instruction_seconds(unbucketed_, reduction);
    }
    return comm <= compute;
  }

  // `bucket` applied to the program the closed buckets left: its gathers (and in backward its
  // reductions) merged (bucket()'s merge), and its gather moved to just before the previous
  // bucket's wait (simplefsdp.txt §3.2.2) unless a release or gather of one of its parameters
  // lies between or the moved program would not walk within the limit.
  Applied apply(const std::vector<size_t>& bucket) const {
    Applied a{working_};
    std::vector<int> members = params_of(bucket);
    if (members.size() >= 2) {
      std::unordered_set<int> set(members.begin(), members.end());
      a.changed = merge_collectives(a.program, [&](int q) { return set.count(q) > 0; }, &phase_);
    }
    if (!candidates_[bucket[0]].starts_run && !previous_.empty()) {
      std::vector<Instr>& instrs = a.program.instrs;
      size_t g = ir::find_instruction(a.program, OpKind::AllGather, gather_handle(bucket));
      size_t wait = ir::find_instruction(a.program, OpKind::Wait, gather_handle(previous_));
      bool blocked = g >= instrs.size() || wait >= g;
      for (size_t j = wait; j < g && !blocked; ++j) blocked = ir::gather_may_not_pass(instrs[g], instrs[j]);
      if (!blocked) {
        move_instruction(a.program, g, wait);
        if (within_limit(a.program, bucket, members)) {
          a.moved = a.changed = true;
          return a;
        }
        move_instruction(a.program, wait, g);
      }
    }
    a.within_limit = !a.changed || within_limit(a.program, bucket, members);  // unchanged: as placed, nothing to check
    return a;
  }

  // Whether `p`'s memory walk, with window_reductions' reductions in flight (the pass that runs
  // next), stays within the limit from the bucket's gather to the end of its span and, in
  // backward, until its members' reductions complete (the window keeps them in flight beyond it).
  bool within_limit(const ir::Program& p, const std::vector<size_t>& bucket, const std::vector<int>& members) const {
    const MemoryPlanning& m = inputs_.memory;
    if (m.limit <= 0) return true;
    std::optional<ir::Program> windowed;
    if (phase_ == ir::Phase::Backward) window_reductions(windowed.emplace(p), inputs_);  // it moves backward waits only
    const ir::Program& walked = windowed ? *windowed : p;
    std::vector<int64_t> around = memory::memory_around_each(walked, m.state_bytes, m.cost.get());
    size_t from = std::min(ir::find_instruction(walked, OpKind::AllGather, gather_handle(bucket)), walked.instrs.size() - 1);
    size_t to = std::max(span_end(walked, phase_, candidates_[bucket.back()].computes_through), from + 1);
    if (phase_ == ir::Phase::Backward) to = std::max(to, reduced_by(walked, members));
    return *std::max_element(around.begin() + static_cast<long>(from), around.begin() + static_cast<long>(to)) <= m.limit;
  }

  // The handle of a bucket's gather: its first candidate's, which the merge keeps.
  int gather_handle(const std::vector<size_t>& bucket) const { return unbucketed_.instrs[candidates_[bucket[0]].gather].handle; }

  std::vector<int> params_of(const std::vector<size_t>& bucket) const {
    std::vector<int> members;
    for (size_t j : bucket) {
      const Instr& g = unbucketed_.instrs[candidates_[j].gather];
      members.insert(members.end(), g.params.begin(), g.params.end());
    }
    return members;
  }

  // The members' gathers (or, `reductions`, their backward reduce-scatters) as one instruction,
  // as the program before any bucket has them: what the time constraint prices.
  Instr merged(const std::vector<size_t>& members, bool reductions) const {
    Instr all;
    auto add = [&all](const Instr& from, int q, int64_t bytes) {
      if (all.params.empty()) {
        all = from;  // its kind, phase and group
        all.params.clear();
        all.bytes = 0;
      }
      all.params.push_back(q);
      all.bytes += bytes;
    };
    for (size_t j : members) {
      const Instr& g = unbucketed_.instrs[candidates_[j].gather];
      for (size_t k = 0; k < g.params.size(); ++k) {
        int q = g.params[k];
        if (!reductions) {
          add(g, q, k == 0 ? g.bytes : 0);  // a gather's bytes, whole, with its first parameter
        } else if (auto at = reduction_of_.find(q); at != reduction_of_.end()) {
          add(unbucketed_.instrs[at->second], q, ir::param_bytes(unbucketed_, q));  // a reduce-scatter moves its members' full gradients
        }
      }
    }
    return all;
  }

  const ir::Program& unbucketed_;  // the phase's program before any bucket: what the candidates index
  ir::Phase phase_;
  const PassInputs& inputs_;
  const std::vector<Candidate>& candidates_;
  std::unordered_map<int, size_t> reduction_of_;
  ir::Program working_;            // unbucketed_ with the closed buckets applied
  std::vector<size_t> previous_;   // the last closed bucket
  std::vector<size_t> open_;       // the bucket still growing
  Applied open_applied_;           // working_ with the open bucket applied
  bool changed_ = false;
};

bool bucket_phase(ir::Program& p, ir::Phase phase, const std::vector<const BucketRequest*>& of, const PassInputs& inputs) {
  std::vector<Candidate> c = candidates(p, phase, of, inputs.memory);
  if (c.size() < 2) return false;
  bool changed = false;
  ir::Program bucketed = BucketPlanner(p, phase, inputs, c).run(&changed);
  p = std::move(bucketed);
  return changed;
}

}  // namespace

bool auto_bucket(ir::Program& p, const PassInputs& inputs) {
  if (p.sharding.params <= 1 || inputs.sized_buckets.empty()) return false;
  std::vector<const BucketRequest*> of = requests_of(p, inputs);
  bool forward = bucket_phase(p, ir::Phase::Forward, of, inputs);
  bool backward = bucket_phase(p, ir::Phase::Backward, of, inputs);
  return forward || backward;
}

}  // namespace loom::passes
