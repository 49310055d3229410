#include "backend/passes/auto_bucket.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "backend/passes/bucket.h"
#include "backend/sim/memory_walk.h"

namespace loom::passes {
namespace {

using ir::Instr;
using ir::OpKind;

// A gather of the selection, and the compute that follows it until the next gather.
struct Candidate {
  size_t gather = 0;  // its index in the program
  const BucketRequest* request = nullptr;
  double compute_s = 0;  // the compute between it and the next gather of the phase
  size_t span_end = 0;   // where that compute ends: the next gather of the phase, or past the phase's last instruction
  bool starts_run = false;  // the phase's first, or after a gather outside the selection
};

// What a backward reduction holds from its launch to its wait: its buffers
// (memory::reduction_launch_bytes) and every member's full gradient.
int64_t reduction_held_bytes(const ir::Program& p, const Instr& reduction) {
  int64_t bytes = memory::reduction_launch_bytes(p, reduction);
  for (int q : reduction.params) bytes += memory::padded_bytes(p, q);
  return bytes;
}

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
  size_t phase_end = 0;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.phase != phase) continue;
    phase_end = i + 1;
    if (in.kind == OpKind::AllGather) {
      if (open >= 0) found[static_cast<size_t>(open)].span_end = i;
      const BucketRequest* r = request_of(in, of);
      if (!r) {
        run_broken = true;
        open = -1;
        continue;
      }
      found.push_back({i, r, 0, 0, run_broken});
      run_broken = false;
      open = static_cast<long>(found.size()) - 1;
    } else if (ir::runs_module(in.kind) && open >= 0 && m.instruction_seconds) {
      found[static_cast<size_t>(open)].compute_s += m.instruction_seconds(p, in);
    }
  }
  if (open >= 0) found[static_cast<size_t>(open)].span_end = phase_end;
  return found;
}

// Decides the buckets of one phase, as lists of candidate indices.
class BucketPlanner {
 public:
  BucketPlanner(const ir::Program& p, ir::Phase phase, const MemoryPlanning& m, int reductions_in_flight,
                const std::vector<Candidate>& c)
      : p_(p), phase_(phase), m_(m), reductions_in_flight_(reductions_in_flight), c_(c) {
    if (m.limit > 0) around_ = memory::memory_around_each(p, m.state_bytes, m.cost.get());
    for (size_t i = 0; i < p.instrs.size(); ++i)
      if (p.instrs[i].kind == OpKind::ReduceScatter && p.instrs[i].phase == ir::Phase::Backward)
        for (int q : p.instrs[i].params) reduction_of_.try_emplace(q, i);
  }

  std::vector<std::vector<size_t>> buckets() const {
    std::vector<std::vector<size_t>> out;
    for (size_t i = 0; i < c_.size(); ++i) {
      if (!out.empty() && joins(out, i)) out.back().push_back(i);
      else out.push_back({i});
    }
    return out;
  }

 private:
  // Whether candidate `i` joins the last of the buckets `out` holds so far.
  bool joins(const std::vector<std::vector<size_t>>& out, size_t i) const {
    const std::vector<size_t>& bucket = out.back();
    const std::vector<size_t>* previous = out.size() >= 2 ? &out[out.size() - 2] : nullptr;
    const BucketRequest& r = *c_[i].request;
    const BucketRequest& first = *c_[bucket[0]].request;
    if (c_[i].starts_run || r.automatic != first.automatic || r.size != first.size) return false;
    std::vector<size_t> with = bucket;
    with.push_back(i);
    if (!r.automatic) {
      if (merged(with, false).bytes > r.size) return false;
    } else if (!m_.instruction_seconds) {
      if (r.module != first.module) return false;  // whole modules
    } else if (!hides(with, previous)) {
      return false;
    }
    return fits(with, out);
  }

  // SimpleFSDP's time constraint: the bucket's all-gather (and, backward, the previous bucket's
  // reduce-scatter) within the previous bucket's compute. The first bucket of a run has nothing
  // before it to hide behind.
  bool hides(const std::vector<size_t>& with, const std::vector<size_t>* previous) const {
    if (c_[with[0]].starts_run || !previous) return false;
    double compute = 0;
    for (size_t j : *previous) compute += c_[j].compute_s;
    double comm = m_.instruction_seconds(p_, merged(with, false));
    if (phase_ == ir::Phase::Backward) {
      Instr reduction = merged(*previous, true);
      if (!reduction.params.empty()) comm += m_.instruction_seconds(p_, reduction);
    }
    return comm <= compute;
  }

  // The memory constraint: the bucket's buffers, gathered while the previous bucket computes (and
  // all at its first member's place), within the limit over both buckets' instructions; in
  // backward also its one reduction's buffers, with every member's full gradient held until it
  // completes (memory::reduction_launch_bytes), and the reductions of the buckets before it that
  // window_reductions keeps in flight when this one launches, with their members' gradients
  // (`around_`, before that pass, completes each reduction where it launches).
  bool fits(const std::vector<size_t>& with, const std::vector<std::vector<size_t>>& out) const {
    const std::vector<size_t>* previous = out.size() >= 2 ? &out[out.size() - 2] : nullptr;
    if (m_.limit <= 0) return true;
    int64_t high = 0;
    size_t from = c_[previous ? previous->front() : with.front()].gather;
    for (size_t k = from; k < c_[with.back()].span_end; ++k) high = std::max(high, around_[k]);
    int64_t extra = memory::gather_peak_bytes(p_, merged(with, false));
    if (phase_ == ir::Phase::Backward) {
      Instr reduction = merged(with, true);
      if (reduction.params.size() > 1) extra += reduction_held_bytes(p_, reduction);
      for (size_t back = 2; back <= out.size() && back <= static_cast<size_t>(reductions_in_flight_) + 1; ++back) {
        Instr in_flight = merged(out[out.size() - back], true);
        if (!in_flight.params.empty()) extra += reduction_held_bytes(p_, in_flight);
      }
    }
    return high + extra <= m_.limit;
  }

  // The members' gathers (or, `reductions`, their backward reduce-scatters) as one instruction.
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
      const Instr& g = p_.instrs[c_[j].gather];
      for (size_t k = 0; k < g.params.size(); ++k) {
        int q = g.params[k];
        if (!reductions) {
          add(g, q, k == 0 ? g.bytes : 0);  // a gather's bytes, whole, with its first parameter
        } else if (auto at = reduction_of_.find(q); at != reduction_of_.end()) {
          add(p_.instrs[at->second], q, ir::param_bytes(p_, q));  // a reduce-scatter moves its members' full gradients
        }
      }
    }
    return all;
  }

  const ir::Program& p_;
  ir::Phase phase_;
  const MemoryPlanning& m_;
  int reductions_in_flight_;
  const std::vector<Candidate>& c_;
  std::vector<int64_t> around_;
  std::unordered_map<int, size_t> reduction_of_;
};

// The index of `phase`'s all-gather that holds parameter q, from `from` on; size() when none.
size_t gather_of(const ir::Program& p, ir::Phase phase, int q, size_t from = 0) {
  for (size_t i = from; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    if (in.phase == phase && in.kind == OpKind::AllGather && std::find(in.params.begin(), in.params.end(), q) != in.params.end())
      return i;
  }
  return p.instrs.size();
}

// What the last `in_flight` backward reductions launched before instruction `at` hold there
// once window_reductions keeps them in flight (before that pass each completes where it
// launches, so the walk does not count them at `at`): their buffers and members' gradients.
int64_t reductions_in_flight_bytes(const ir::Program& p, size_t at, int in_flight) {
  int64_t bytes = 0;
  int found = 0;
  for (size_t i = at; i-- > 0 && found < in_flight && p.instrs[i].phase == ir::Phase::Backward;) {
    const Instr& in = p.instrs[i];
    if (in.kind != OpKind::ReduceScatter && in.kind != OpKind::Compress) continue;  // window_reductions' kinds
    ++found;
    bytes += reduction_held_bytes(p, in);
  }
  return bytes;
}

// Moves bucket k's gather to just before the wait of bucket k-1's (simplefsdp.txt §3.2.2), unless
// a release or gather of one of its parameters lies between, or its buffer would not fit under
// the limit over the instructions it moves above (in backward beside the reductions in flight).
// Whether it moved any.
bool reorder(ir::Program& p, ir::Phase phase, const std::vector<std::vector<int>>& params, const std::vector<bool>& starts_run,
             const MemoryPlanning& m, int reductions_in_flight) {
  bool moved_any = false;
  for (size_t k = 1; k < params.size(); ++k) {
    if (starts_run[k]) continue;
    size_t before = gather_of(p, phase, params[k - 1][0]), g = gather_of(p, phase, params[k][0]);
    if (before >= p.instrs.size() || g >= p.instrs.size()) continue;
    size_t wait = before + 1;
    while (wait < g && !(p.instrs[wait].kind == OpKind::Wait && p.instrs[wait].handle == p.instrs[before].handle)) ++wait;
    if (wait >= g) continue;
    const Instr& gather = p.instrs[g];
    bool blocked = false;
    for (size_t j = wait; j < g && !blocked; ++j) blocked = ir::gather_may_not_pass(gather, p.instrs[j]);
    if (blocked) continue;
    if (m.limit > 0) {
      std::vector<int64_t> around = memory::memory_around_each(p, m.state_bytes, m.cost.get());
      int64_t high = *std::max_element(around.begin() + static_cast<long>(wait), around.begin() + static_cast<long>(g));
      int64_t in_flight = phase == ir::Phase::Backward ? reductions_in_flight_bytes(p, wait, reductions_in_flight) : 0;
      if (high + memory::gather_peak_bytes(p, gather) + in_flight > m.limit) continue;
    }
    Instr moved = std::move(p.instrs[g]);
    p.instrs.erase(p.instrs.begin() + static_cast<long>(g));
    p.instrs.insert(p.instrs.begin() + static_cast<long>(wait), std::move(moved));
    moved_any = true;
  }
  return moved_any;
}

bool bucket_phase(ir::Program& p, ir::Phase phase, const std::vector<const BucketRequest*>& of, const PassInputs& inputs) {
  const MemoryPlanning& m = inputs.memory;
  std::vector<Candidate> c = candidates(p, phase, of, m);
  if (c.size() < 2) return false;
  std::vector<std::vector<size_t>> buckets = BucketPlanner(p, phase, m, inputs.reductions_in_flight, c).buckets();
  std::vector<std::vector<int>> params;
  std::vector<bool> starts_run;
  for (const std::vector<size_t>& b : buckets) {
    params.emplace_back();
    for (size_t j : b) {
      const Instr& g = p.instrs[c[j].gather];
      params.back().insert(params.back().end(), g.params.begin(), g.params.end());
    }
    starts_run.push_back(c[b[0]].starts_run);
  }
  bool merged = false;
  for (const std::vector<int>& members : params) {
    if (members.size() < 2) continue;
    std::unordered_set<int> set(members.begin(), members.end());
    merged |= merge_collectives(p, [&](int q) { return set.count(q) > 0; }, &phase);
  }
  bool moved = reorder(p, phase, params, starts_run, m, inputs.reductions_in_flight);
  return merged || moved;
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
