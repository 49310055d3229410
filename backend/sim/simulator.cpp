#include "backend/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/cost/step_estimate.h"
#include "backend/sim/memory_walk.h"
#include "lang/diagnostics.h"

namespace loom {
namespace {

using ir::Instr;
using ir::OpKind;
using ir::Phase;
using memory::Run;

// The streams an event runs on, by name (SimEvent::stream); compared by address.
constexpr const char* kCompute = "compute";
constexpr const char* kCollective = "collective";
constexpr const char* kCopy = "copy";
constexpr const char* kTransfer = "transfer";

// A collective over ranks of several stages (or over ranks simulated each), or a pipeline
// transfer: it starts when every participant has issued it.
struct Meeting {
  size_t participants = 0;
  std::map<size_t, double> issued, seconds;  // by simulated rank
  double start = -1, end = -1;
};

struct Rank {
  size_t index = 0;  // among the simulated ranks
  int stage = 0;
  const ir::Program* program = nullptr;
  const InstructionCost* cost = nullptr;
  std::vector<Run> runs;
  size_t cursor = 0;
  // transfer_free: a pipeline's sends and receives, not queued behind the collectives: gloo
  // posts a send or recv to the transport at once (an unbound buffer), outside the queue its
  // collectives wait in; NCCL runs them on the pair's own communicator and stream. One stream
  // for both neighbours of a middle stage, where the executor has a group for each.
  double host = 0, compute_free = 0, collective_free = 0, copy_free = 0, transfer_free = 0, compute_s = 0;
  std::vector<double> handle_end;   // by handle: when its collective ends; -1 while it has not run
  // By instruction: the seconds it kept a communication stream busy (summed over its runs); named
  // by kind into SimResult::comm_busy_s once, for the critical rank (the planner's hot path).
  std::vector<double> comm_busy_s;
  // By instruction: a collective sharing the device with other work; empty where the cost does
  // not price that apart (the planner's hot path on a GPU cluster).
  std::vector<bool> beside_compute;
  std::map<std::string, int> seen;  // how many of each meeting kind this rank has issued
  std::string meeting;              // the meeting its current instruction waits in, once issued
  int64_t memory = 0;
  std::unique_ptr<memory::StepMemory> allocations;  // what each run allocates and frees
  // With every rank simulated, its own timeline until the slowest rank's is chosen.
  std::vector<SimEvent> events;
  std::vector<MemorySample> memory_samples;
  bool done() const { return cursor >= runs.size(); }
};

class Simulator {
 public:
  // One representative per stage, all priced by `cost`.
  Simulator(const std::vector<ir::Program>& stages, const InstructionCost& cost, const StateBytes& state_bytes, bool timeline)
      : timeline_(timeline) {
    result_.memory.resize(stages.size());
    result_.stage_peak_bytes.assign(stages.size(), 0);
    for (size_t s = 0; s < stages.size(); ++s) add_rank(static_cast<int>(s), stages[s], cost, state_bytes);
  }

  // Every rank of a one-stage step, each priced by its own cost.
  Simulator(const ir::Program& program, const std::vector<const InstructionCost*>& rank_costs, const StateBytes& state_bytes,
            bool timeline)
      : timeline_(timeline), each_rank_(true) {
    result_.memory.resize(1);
    result_.stage_peak_bytes.assign(1, 0);
    for (const InstructionCost* cost : rank_costs) add_rank(0, program, *cost, state_bytes);
  }

  SimResult run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (Rank& r : ranks_)
        while (!r.done() && advance(r)) progress = true;
    }
    for (const Rank& r : ranks_)
      if (!r.done()) {
        const Instr& in = r.program->instrs[r.runs[r.cursor].instr];
        throw InternalError("simulator: " + std::string(each_rank_ ? "rank " : "stage ") +
                            std::to_string(each_rank_ ? r.index : static_cast<size_t>(r.stage)) + " waits at instruction " +
                            std::to_string(r.runs[r.cursor].instr) + " (" + ir::op_name(in.kind) +
                            ") for a partner that never issues it");
      }
    size_t critical = 0;
    for (const Rank& r : ranks_) {
      double end = std::max({r.host, r.compute_free, r.collective_free, r.copy_free, r.transfer_free});
      // Ranks that end together at a collective: the one with the most compute kept the others waiting.
      bool later = end > result_.step_s || (end == result_.step_s && r.compute_s > result_.compute_s);
      if (later || r.index == 0) {
        result_.step_s = end;
        result_.critical_stage = r.stage;
        result_.compute_s = r.compute_s;
        critical = r.index;
      }
    }
    result_.exposed_comm_s = std::max(0.0, result_.step_s - result_.compute_s);
    result_.ranks_simulated = each_rank_ ? static_cast<int>(ranks_.size()) : 1;
    const Rank& ends = ranks_[critical];
    // Summed by op and role, then named: one name per kind rather than per instruction.
    std::map<std::pair<OpKind, int>, std::pair<double, size_t>> busy;  // -> seconds, an instruction of the kind
    for (size_t i = 0; i < ends.comm_busy_s.size(); ++i) {
      if (!(ends.comm_busy_s[i] > 0)) continue;
      const Instr& in = ends.program->instrs[i];
      int role = ir::issued_collective(in) ? static_cast<int>(in.group.role) : -1;  // named by its op alone
      auto& [seconds, named_by] = busy.try_emplace({in.kind, role}, 0.0, i).first->second;
      seconds += ends.comm_busy_s[i];
    }
    for (const auto& [kind, total] : busy) result_.comm_busy_s[communication_kind(ends.program->instrs[total.second])] += total.first;
    if (each_rank_) {
      result_.critical_rank = static_cast<int>(critical);
      result_.events = std::move(ranks_[critical].events);
      result_.memory[0] = std::move(ranks_[critical].memory_samples);
    }
    return std::move(result_);
  }

 private:
  void add_rank(int stage, const ir::Program& program, const InstructionCost& cost, const StateBytes& state_bytes) {
    Rank r;
    r.index = ranks_.size();
    r.stage = stage;
    r.program = &program;
    r.cost = &cost;
    r.runs = memory::runs_of(program);
    r.handle_end.assign(static_cast<size_t>(ir::handle_count(program)), -1);
    r.comm_busy_s.assign(program.instrs.size(), 0);
    if (cost.prices_beside_compute()) r.beside_compute = contended_collectives(program);
    r.memory = memory::step_start_bytes(program, state_bytes, &cost);
    r.allocations = std::make_unique<memory::StepMemory>(program, &cost);
    ranks_.push_back(std::move(r));
    note_memory(ranks_.back(), 0);
  }

  // Runs the rank's next instruction; false when it must wait for another simulated rank first.
  bool advance(Rank& r) {
    const Run& run = r.runs[r.cursor];
    const ir::Program& p = *r.program;
    const Instr& in = p.instrs[run.instr];
    switch (in.kind) {
      case OpKind::Wait: {
        if (in.handle >= 0) r.host = std::max(r.host, r.handle_end[static_cast<size_t>(in.handle)]);
        // Then its unpacking, copying the members out of the collective's buffer, holds the host.
        if (double unpacking = r.cost->own_seconds(p, in); unpacking > 0) compute(r, run, unpacking);
        break;
      }
      case OpKind::Compute:
      case OpKind::Recompute: compute(r, run, r.cost->seconds(p, in), r.cost->host_seconds(p, in)); break;
      case OpKind::OptimizerStep:
      case OpKind::SelectDrop: compute(r, run, r.cost->seconds(p, in)); break;
      case OpKind::Offload:
      case OpKind::Reload: {
        double start = std::max(issue_point(r), r.copy_free);
        r.host = r.copy_free = start + r.cost->seconds(p, in);
        record(r, run, kCopy, start, r.host);
        break;
      }
      case OpKind::OffloadStates:
      case OpKind::ReloadStates: {  // on the copy stream, while the host goes on
        double start = std::max(issue_point(r), r.copy_free);
        r.copy_free = start + r.cost->seconds(p, in);
        r.handle_end[static_cast<size_t>(in.handle)] = r.copy_free;
        record(r, run, kCopy, start, r.copy_free);
        break;
      }
      case OpKind::GradNorm:
        // The norm of this rank's gradients (or shards) and their clipping hold the host, once
        // (not again while it waits in a meeting); then its all-reduce, where it has one.
        if (r.meeting.empty()) compute(r, run, r.cost->own_seconds(p, in));
        [[fallthrough]];
      default:
        if (!ir::issued_collective(in)) {
          if (in.handle >= 0) r.handle_end[static_cast<size_t>(in.handle)] = r.host;  // a group of one: done at once
          break;
        }
        if (std::string key = meeting_key(r, in); !key.empty()) return meet(r, run, key);
        double start = std::max(issue_point(r), r.collective_free);
        r.collective_free = start + r.cost->collective_seconds(p, in, beside_compute(r, run));
        r.handle_end[static_cast<size_t>(in.handle)] = r.collective_free;
        record(r, run, kCollective, start, r.collective_free);
    }
    account_memory(r, run);
    ++r.cursor;
    return true;
  }

  static bool beside_compute(const Rank& r, const Run& run) { return !r.beside_compute.empty() && r.beside_compute[run.instr]; }

  // When work the rank issues now on another stream can start: the host has issued it and (on a
  // GPU, whose kernels run behind the host) the device has reached it. On a CPU, the host.
  static double issue_point(const Rank& r) { return std::max(r.host, r.compute_free); }

  // Work on the compute stream. Without a host part (`host_seconds` < 0: a CPU) it holds the
  // host. With one (a GPU) the host dispatches it in `host_seconds` and goes on; the device runs
  // it once free and the host has begun, and it ends no sooner than its last dispatch.
  void compute(Rank& r, const Run& run, double seconds, double host_seconds = -1) {
    double issued = r.host;
    double start = std::max(issued, r.compute_free);
    if (host_seconds < 0) {
      r.host = r.compute_free = start + seconds;
    } else {
      r.compute_free = std::max(start + seconds, issued + host_seconds);
      r.host = issued + host_seconds;
    }
    r.compute_s += seconds;
    record(r, run, kCompute, start, r.compute_free);
  }

  // What the run allocates and frees (memory::StepMemory), as of the rank's clock after it.
  void account_memory(Rank& r, const Run& run) {
    memory::Effect e = r.allocations->effect(r.program->instrs[run.instr], run.micro_batch);
    if (e.transient) {  // held while it runs
      r.memory += e.transient;
      note_memory(r, run.instr);
      r.memory -= e.transient;
    }
    if (e.transient || e.change) {
      r.memory += e.change;
      note_memory(r, run.instr);
    }
  }

  // The meeting `in` belongs to, or "" for a collective among ranks of this stage alone
  // (simulated by its representative, whose peers issue it at the same time); with every rank
  // simulated, each collective is a meeting of them all.
  std::string meeting_key(Rank& r, const Instr& in) {
    if (!r.meeting.empty()) return r.meeting;
    std::string kind;
    if (in.kind == OpKind::Send || in.kind == OpKind::Recv) {
      int peer = ir::with_next_stage(in) ? r.stage + 1 : r.stage - 1;
      int from = in.kind == OpKind::Send ? r.stage : peer, to = in.kind == OpKind::Send ? peer : r.stage;
      kind = std::string(in.phase == Phase::Forward ? "fwd" : "bwd") + " " + std::to_string(from) + "->" + std::to_string(to);
    } else if (each_rank_ || (ranks_.size() > 1 && (in.group.role == ir::Role::Pipeline || in.group.role == ir::Role::Model ||
                                                     in.group.role == ir::Role::World))) {
      kind = std::string(ir::role_name(in.group.role)) + " " + ir::op_name(in.kind);
    } else {
      return "";
    }
    std::string key = kind + " #" + std::to_string(r.seen[kind]++);
    meetings_[key].participants = in.kind == OpKind::Send || in.kind == OpKind::Recv ? 2 : ranks_.size();
    r.meeting = key;
    return key;
  }

  // The rank's part in meeting `key` at its current instruction: it issues it once (priced then),
  // and goes on when every participant has.
  bool meet(Rank& r, const Run& run, const std::string& key) {
    const Instr& in = r.program->instrs[run.instr];
    bool transfer = in.kind == OpKind::Send || in.kind == OpKind::Recv;
    double& stream_free = transfer ? r.transfer_free : r.collective_free;
    Meeting& m = meetings_[key];
    if (!m.issued.count(r.index)) {
      m.issued[r.index] = std::max(issue_point(r), stream_free);
      m.seconds[r.index] = r.cost->collective_seconds(*r.program, in, beside_compute(r, run));
    }
    if (m.issued.size() < m.participants) return false;
    if (m.end < 0) {
      for (const auto& [rank, at] : m.issued) m.start = std::max(m.start, at);
      double longest = 0;
      for (const auto& [rank, s] : m.seconds) longest = std::max(longest, s);
      m.end = m.start + longest;
    }
    stream_free = m.end;
    r.handle_end[static_cast<size_t>(in.handle)] = m.end;
    record(r, run, transfer ? kTransfer : kCollective, m.start, m.end);
    r.meeting.clear();
    account_memory(r, run);
    ++r.cursor;
    return true;
  }

  // The timeline shows one rank per stage; with every rank simulated, each keeps its own until
  // run() keeps the critical rank's.
  void record(Rank& r, const Run& run, const char* stream, double start, double end) {
    if (end > start && stream != kCompute) r.comm_busy_s[run.instr] += end - start;
    if (end <= start || !timeline_) return;
    (each_rank_ ? r.events : result_.events).push_back({r.stage, run.instr, run.micro_batch, stream, start, end});
  }

  void note_memory(Rank& r, size_t instr) {
    if (timeline_) (each_rank_ ? r.memory_samples : result_.memory[static_cast<size_t>(r.stage)]).push_back({r.host, r.memory});
    int64_t& stage_peak = result_.stage_peak_bytes[static_cast<size_t>(r.stage)];
    stage_peak = std::max(stage_peak, r.memory);
    if (r.memory > result_.peak_bytes) {
      result_.peak_bytes = r.memory;
      result_.peak_stage = r.stage;
      result_.peak_instr = instr;
    }
  }

  bool timeline_;
  bool each_rank_ = false;  // every rank of one stage simulated, each collective a meeting of them all
  std::vector<Rank> ranks_;
  std::map<std::string, Meeting> meetings_;
  SimResult result_;
};

// `r`, whose step must be a time: a cluster of rates near zero (1e-300 GB/s) or a profile of times
// near a double's largest prices an instruction at infinity (and infinity less infinity is NaN),
// and a step of "inf ms" ranks nothing.
SimResult finite(SimResult r) {
  if (!std::isfinite(r.step_s))
    throw UserError(SourceRange{}, "the simulated step takes more seconds than a number can hold: the cost model prices some of it at infinity or at no number",
                    "check the cluster's rates (GBps, TFLOP/s: too near 0?) or the profile's times (too large?)");
  return r;
}

}  // namespace

SimResult simulate(const std::vector<ir::Program>& stages, const InstructionCost& cost, const StateBytes& state_bytes,
                   bool timeline) {
  if (stages.empty()) throw InternalError("simulator: no program to simulate");
  return finite(Simulator(stages, cost, state_bytes, timeline).run());
}

SimResult simulate_each_rank(const ir::Program& program, const std::vector<const InstructionCost*>& rank_costs,
                             const StateBytes& state_bytes, bool timeline) {
  if (rank_costs.empty()) throw InternalError("simulator: no rank to simulate");
  for (const ir::Instr& in : program.instrs)
    if (ir::issued_collective(in) && in.group.size != static_cast<int>(rank_costs.size()))
      throw InternalError("simulator: a collective over " + std::to_string(in.group.size) + " of the " +
                          std::to_string(rank_costs.size()) + " ranks simulated each");
  return finite(Simulator(program, rank_costs, state_bytes, timeline).run());
}

std::string communication_kind(const Instr& in) {
  std::string op = ir::op_name(in.kind);
  return ir::issued_collective(in) ? op + " on " + ir::role_name(in.group.role) : op;
}

std::string sim_trace_json(const SimResult& result, const std::vector<ir::Program>& stages) {
  static const std::vector<std::string> streams{"compute", "collective", "copy", "transfer"};
  nlohmann::json events = nlohmann::json::array();
  for (size_t s = 0; s < stages.size(); ++s) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", s}, {"args", {{"name", "stage " + std::to_string(s)}}}});
    for (size_t t = 0; t < streams.size(); ++t)
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", s}, {"tid", t}, {"args", {{"name", streams[t]}}}});
  }
  for (const SimEvent& e : result.events) {
    const ir::Program& p = stages[static_cast<size_t>(e.stage)];
    const Instr& in = p.instrs[e.instr];
    std::string what = p.subject(in);
    std::string name = std::string(ir::op_name(in.kind)) + (what.empty() ? "" : " " + what);
    size_t tid = static_cast<size_t>(std::find(streams.begin(), streams.end(), e.stream) - streams.begin());
    events.push_back({{"ph", "X"}, {"name", name}, {"pid", e.stage}, {"tid", tid}, {"ts", e.start_s * 1e6},
                      {"dur", (e.end_s - e.start_s) * 1e6}, {"args", {{"instr", e.instr}, {"micro_batch", e.micro_batch}}}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace loom
