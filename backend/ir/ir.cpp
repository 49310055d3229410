#include "backend/ir/ir.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "lang/value.h"

namespace loom::ir {

const char* op_name(OpKind k) {
  switch (k) {
    case OpKind::Compute: return "compute";
    case OpKind::AllGather: return "all_gather";
    case OpKind::Wait: return "wait";
    case OpKind::Release: return "release";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::SelectDrop: return "select_drop";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::OptimizerStep: return "optimizer_step";
    case OpKind::Offload: return "offload";
    case OpKind::Reload: return "reload";
    case OpKind::OffloadStates: return "offload_states";
    case OpKind::ReloadStates: return "reload_states";
    case OpKind::Compress: return "compress";
    case OpKind::CompressIndex: return "compress_index";
    case OpKind::CompressBound: return "compress_bound";
    case OpKind::GradNorm: return "grad_norm";
    case OpKind::LossReduce: return "loss_reduce";
    case OpKind::Recompute: return "recompute";
    case OpKind::TpAllReduce: return "tp_all_reduce";
    case OpKind::TpAllGather: return "tp_all_gather";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
  }
  return "?";
}

const char kAllGatherName[] = "all_gather";
const char kReduceScatterName[] = "reduce_scatter";
const char kAllReduceName[] = "all_reduce";
const char kSendName[] = "send";
const char kRecvName[] = "recv";

const char* micro_batches_name(MicroBatches m) {
  switch (m) {
    case MicroBatches::All: return "all";
    case MicroBatches::Last: return "last";
    case MicroBatches::AllButLast: return "all_but_last";
    case MicroBatches::First: return "first";
  }
  return "?";
}

bool runs_in_micro_batch(MicroBatches m, int64_t index, int64_t count) {
  switch (m) {
    case MicroBatches::All: return true;
    case MicroBatches::Last: return index == count - 1;
    case MicroBatches::AllButLast: return index != count - 1;
    case MicroBatches::First: return index == 0;
  }
  return false;
}

int64_t times_per_step(const Program& p, const Instr& in) {
  if (in.phase == Phase::Step) return 1;
  switch (in.runs_in) {
    case MicroBatches::All: return p.micro_batches;
    case MicroBatches::Last: return 1;
    case MicroBatches::AllButLast: return p.micro_batches - 1;
    case MicroBatches::First: return 1;
  }
  return 0;
}

bool gather_may_not_pass(const Instr& gather, const Instr& other) {
  if (other.kind != OpKind::AllGather && other.kind != OpKind::Release) return false;
  for (int q : other.params)
    if (std::find(gather.params.begin(), gather.params.end(), q) != gather.params.end()) return true;
  return false;
}

int handle_count(const Program& p) {
  int handles = std::max(p.next_handle, 0);
  for (const Instr& in : p.instrs) handles = std::max(handles, in.handle + 1);
  return handles;
}

bool with_next_stage(const Instr& in) { return (in.kind == OpKind::Send) == (in.phase == Phase::Forward); }

size_t last_backward_compute(const Program& p) {
  for (size_t i = p.instrs.size(); i-- > 0;)
    if (p.instrs[i].kind == OpKind::Compute && p.instrs[i].phase == Phase::Backward) return i;
  return p.instrs.size();
}

bool launches_reduction(const Instr& in) {
  return in.phase == Phase::Backward && (in.kind == OpKind::ReduceScatter || in.kind == OpKind::Compress);
}

size_t find_instruction(const Program& p, OpKind kind, int handle, size_t from) {
  for (size_t i = from; i < p.instrs.size(); ++i)
    if (p.instrs[i].kind == kind && p.instrs[i].handle == handle) return i;
  return p.instrs.size();
}

std::vector<int> gradient_deliveries(const Program& p) {
  std::vector<int> deliveries(p.params.size(), 0);
  std::vector<const Instr*> recomputes;
  for (const Instr& in : p.instrs)
    if (in.kind == OpKind::Recompute) {
      recomputes.push_back(&in);
      for (int q : in.params) ++deliveries[static_cast<size_t>(q)];
    }
  std::vector<bool> used_outside(p.params.size(), false);
  for (const Instr& in : p.instrs) {
    if (in.kind != OpKind::Compute || in.phase != Phase::Backward) continue;
    bool recomputed = std::any_of(recomputes.begin(), recomputes.end(), [&](const Instr* r) { return within(in.module, r->module); });
    if (!recomputed)
      for (int q : in.params) used_outside[static_cast<size_t>(q)] = true;
  }
  for (size_t q = 0; q < deliveries.size(); ++q) deliveries[q] += used_outside[q] ? 1 : 0;
  return deliveries;
}

bool within(const std::string& path, const std::string& module) {
  return path.size() >= module.size() && path.compare(0, module.size(), module) == 0 &&
         (path.size() == module.size() || path[module.size()] == '.');
}

bool sums_over_replicas(const Instr& in) {
  bool over = in.group.role == Role::Dp || in.group.role == Role::Replicas;
  return in.kind == OpKind::AllReduce && in.phase == Phase::Backward && over;
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Forward: return "fwd";
    case Phase::Backward: return "bwd";
    case Phase::Step: return "step";
  }
  return "?";
}

std::string Program::to_text() const {
  std::string out = "# step of " + model + ": dp=" + std::to_string(sharding.dp) + " s_p=" + std::to_string(sharding.params) +
                    " s_g=" + std::to_string(sharding.grads) + " s_os=" + std::to_string(sharding.optim) +
                    (mesh.model_parallel() > 1 ? " tp=" + std::to_string(mesh.tp) + " pp=" + std::to_string(mesh.pp) +
                                                     " (stage " + std::to_string(mesh.stage) + ", tp rank " +
                                                     std::to_string(mesh.tp_rank) + ")"
                                               : std::string()) +
                    ", " + std::to_string(instrs.size()) + " instructions" +
                    (micro_batches > 1 ? ", the fwd and bwd ones run for each of " + std::to_string(micro_batches) + " micro-batches" : "") +
                    "\n";
  char line[512];
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr& in = instrs[i];
    std::string what = subject(in);
    std::string extra;
    if (in.group.role != Role::None) extra += std::string(role_name(in.group.role)) + "(" + std::to_string(in.group.size) + ")  ";
    if (in.bytes) extra += format_size(in.bytes) + "  ";
    if (in.flops > 0) extra += format_flops(in.flops) + "  ";
    if (in.activation_bytes)
      extra += (in.phase == Phase::Forward || in.kind == OpKind::Recompute ? "saves " : "frees ") + format_size(in.activation_bytes) + "  ";
    if (in.handle >= 0 && in.kind != OpKind::Wait) extra += "-> %" + std::to_string(in.handle);
    if (in.unpack_bytes) extra += "unpacks " + format_size(in.unpack_bytes);
    if (micro_batches > 1 && in.phase != Phase::Step && in.runs_in != MicroBatches::All)
      extra += std::string("  [") +
               (in.runs_in == MicroBatches::Last    ? "last micro-batch"
                : in.runs_in == MicroBatches::First ? "first micro-batch"
                                                    : "all but the last micro-batch") +
               "]";
    std::snprintf(line, sizeof line, "%5zu %-4s %-15s %-40s %s\n", i, phase_name(in.phase), op_name(in.kind), what.c_str(),
                  extra.c_str());
    out += line;
  }
  return out;
}

std::string Program::instruction_line(size_t index) const {
  const Instr& in = instrs[index];
  std::string what = subject(in);
  return std::to_string(index) + " (" + phase_name(in.phase) + " " + op_name(in.kind) + (what.empty() ? "" : " " + what) + ")";
}

std::string Program::subject(const Instr& in) const {
  std::string what = runs_module(in.kind) ? in.module : "";
  if (in.kind == OpKind::OptimizerStep) what = std::to_string(in.params.size()) + " parameters (local shards)";
  else if (!runs_module(in.kind))
    for (int p : in.params) what += (what.empty() ? "" : ",") + params[p].name;
  if (in.kind == OpKind::Wait) what = "%" + std::to_string(in.handle);
  if (what.empty()) what = in.module;  // a tensor-parallel sync, a pipeline send or recv, names its module
  return what;
}

std::string Program::to_json() const {
  nlohmann::json j;
  j["model"] = model;
  j["shape"] = {{"micro_batch", shape.micro_batch}, {"seq", shape.seq}};
  j["micro_batches"] = micro_batches;
  j["mesh"] = {{"tp", mesh.tp}, {"pp", mesh.pp}, {"stage", mesh.stage}, {"tp_rank", mesh.tp_rank}};
  j["sharding"] = {{"dp", sharding.dp}, {"params", sharding.params}, {"grads", sharding.grads}, {"optim", sharding.optim}};
  j["guarantees"] = {{"gathers_placed", gathers_placed}, {"reductions_placed", reductions_placed}};
  j["params"] = nlohmann::json::array();
  for (auto& p : params) j["params"].push_back({{"name", p.name}, {"numel", p.numel}, {"element_bytes", p.element_bytes}});
  j["instructions"] = nlohmann::json::array();
  for (auto& in : instrs) {
    nlohmann::json x{{"op", op_name(in.kind)}, {"phase", phase_name(in.phase)}};
    if (const char* c = issued_collective(in)) x["collective"] = c;
    if (!in.module.empty()) x["module"] = in.module;
    if (!in.params.empty()) x["params"] = in.params;
    if (in.group.role != Role::None) x["group"] = {{"role", role_name(in.group.role)}, {"size", in.group.size}};
    if (in.bytes) x["bytes"] = in.bytes;
    if (in.handle >= 0) x["handle"] = in.handle;
    if (in.flops > 0) x["flops"] = in.flops;
    if (in.activation_bytes) x["activation_bytes"] = in.activation_bytes;
    if (in.unpack_bytes) x["unpack_bytes"] = in.unpack_bytes;
    if (in.phase != Phase::Step) x["runs_in"] = micro_batches_name(in.runs_in);
    x["times_per_step"] = times_per_step(*this, in);
    j["instructions"].push_back(x);
  }
  return j.dump(1);
}

bool Program::operator==(const Program& o) const { return to_json() == o.to_json(); }

int64_t param_bytes(const Program& p, int q) { return p.params[q].numel * p.params[q].element_bytes; }

int64_t total_param_bytes(const Program& p, const std::vector<int>& params) {
  int64_t bytes = 0;
  for (int q : params) bytes += param_bytes(p, q);
  return bytes;
}

int64_t optimizer_slice_elements(const Program& p, int q) {
  int64_t n = p.params[static_cast<size_t>(q)].numel, s = p.sharding.optim;
  return (n + s - 1) / s;
}

bool gathered_in_place(const Program& p, const Instr& in) {
  return in.params.size() == 1 && optimizer_slice_elements(p, in.params[0]) * p.sharding.optim == p.params[in.params[0]].numel;
}

Instr collective(Program& p, OpKind kind, Phase phase, int q, GroupRef group, int64_t bytes) {
  Instr in;
  in.kind = kind;
  in.phase = phase;
  in.params = {q};
  in.group = std::move(group);
  in.bytes = bytes;
  in.handle = p.new_handle();
  return in;
}

Instr scalar_collective(Program& p, OpKind kind, Phase phase, GroupRef group) {
  Instr in;
  in.kind = kind;
  in.phase = phase;
  in.group = std::move(group);
  in.bytes = 8;  // one double
  in.handle = p.new_handle();
  return in;
}

Instr wait_for(int handle, Phase phase, MicroBatches runs_in) {
  Instr w;
  w.kind = OpKind::Wait;
  w.phase = phase;
  w.handle = handle;
  w.runs_in = runs_in;
  return w;
}

Instr release_of(const Program& p, int q, Phase phase) {
  Instr r;
  r.kind = OpKind::Release;
  r.phase = phase;
  r.params = {q};
  r.bytes = param_bytes(p, q);
  return r;
}

}  // namespace loom::ir
