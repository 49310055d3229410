#include "backend/cost/machine_cluster.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "backend/cost/analytic_cost.h"
#include "backend/cost/memory_model.h"
#include "backend/cost/step_estimate.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom {
namespace {

// What a profile's timed work moved, as the cost model prices it by bytes, and in what time.
struct Streamed {
  double bytes = 0, seconds = 0;
  double least = 0, most = 0;  // the smallest and the largest piece, in bytes
  void add(double piece_bytes, double piece_seconds) {
    least = bytes > 0 ? std::min(least, piece_bytes) : piece_bytes;
    most = std::max(most, piece_bytes);
    bytes += piece_bytes;
    seconds += piece_seconds;
  }
  double rate() const { return bytes / seconds; }
};

// The rates a profile's work reached: the FLOP/s of the forward ops with FLOPs, the bytes/s of
// the forward ops without (their saved bytes: small pieces, compute-bound on a CPU), and of the
// step's tail (the optimizer step and the gradient norm over the elements the update changed:
// large pieces, streamed at the memory's speed).
struct AchievedRates {
  double flop_rate = 0;
  Streamed element_wise, tail;
};

AchievedRates achieved_rates(const Profile& profile, const ir::Program& program, const std::string& origin) {
  std::vector<double> ms = estimate_step(program, profile, origin).instruction_ms;
  double flops = 0, flop_s = 0;
  AchievedRates rates;
  for (size_t i = 0; i < ms.size(); ++i) {
    const ir::Instr& in = program.instrs[i];
    if (in.kind != ir::OpKind::Compute || in.phase != ir::Phase::Forward || ms[i] <= 0) continue;
    if (in.flops > 0) {
      flops += in.flops;
      flop_s += ms[i] / 1000;
    } else if (in.activation_bytes > 0) {
      rates.element_wise.add(static_cast<double>(in.activation_bytes), ms[i] / 1000);
    }
  }
  if (flop_s <= 0 || rates.element_wise.seconds <= 0)
    throw UserError(SourceRange{}, origin + " times no forward op " + (flop_s <= 0 ? "with" : "without") + " FLOPs",
                    "profile a model with matrix products and element-wise ops (every reference model has both)");
  rates.flop_rate = flops / flop_s;
  auto elements = static_cast<double>(profile.optimizer_elements);
  StateBytes states = StateBytes::loom_adamw();
  if (elements > 0 && profile.optimizer_step_ms > 0) rates.tail.add(states.optimizer_step_bytes(elements), profile.optimizer_step_ms / 1000);
  if (elements > 0 && profile.grad_norm_ms > 0) rates.tail.add(states.grad_norm_bytes(elements), profile.grad_norm_ms / 1000);
  return rates;
}

// The device's memory: its bandwidth the faster of the two kinds of work, and an efficiency
// for each by the size of a piece, with the step between the element-wise ops' largest and the
// tail's smallest (on a log scale), so that each prices at the rate it reached. Where the two
// overlap in size (or the tail was not measured), one rate over all of it.
void set_memory(DeviceSpec& device, const AchievedRates& rates) {
  const Streamed &small = rates.element_wise, &large = rates.tail;
  device.memory_efficiency = {{{0, 1.0}}};
  if (large.seconds <= 0 || small.most >= large.least) {
    device.memory_bandwidth = (small.bytes + large.bytes) / (small.seconds + large.seconds);
    return;
  }
  device.memory_bandwidth = std::max(small.rate(), large.rate());
  double step_mb = std::sqrt(small.most * large.least) / 1e6;
  device.memory_efficiency = {{{0, small.rate() / device.memory_bandwidth}, {step_mb, large.rate() / device.memory_bandwidth}}};
}

// The link the profile's collectives on its largest group measured in one regime (on idle cores,
// or beside the ranks' compute); none where it has no all-reduce there. The latency is the
// all-reduce's per ring step; the bandwidth the fastest collective's, each reaching its own
// fraction of it (gloo's all-gather and reduce-scatter run other algorithms than its
// all-reduce). Not the in-step scale: that is the profiled schedule's own (what its collectives
// took in its steps over the sweeps), and carried to other schedules it priced them worse
// (docs/simulate.md).
std::optional<LinkSpec> measured_link(const Profile& profile, bool beside_compute) {
  const CollectiveProfile* all_reduce = nullptr;
  for (const CollectiveProfile& c : profile.collectives)
    if (c.collective == "all_reduce" && c.beside_compute == beside_compute && c.group_size > 1 && c.fit.beta_ms_per_byte > 0 &&
        (!all_reduce || c.group_size > all_reduce->group_size))
      all_reduce = &c;
  if (!all_reduce) return std::nullopt;
  int n = all_reduce->group_size;
  std::map<std::string, double> reached;  // bytes/s of link, by collective
  for (const CollectiveProfile& c : profile.collectives)
    if (c.group == all_reduce->group && c.group_size == n && c.beside_compute == beside_compute && c.fit.beta_ms_per_byte > 0 &&
        std::find(ring_collectives().begin(), ring_collectives().end(), c.collective) != ring_collectives().end())
      reached[c.collective] = ring_factor(c.collective, n) / (c.fit.beta_ms_per_byte / 1000);
  LinkSpec link;
  for (const auto& [collective, bandwidth] : reached) link.bandwidth = std::max(link.bandwidth, bandwidth);
  link.latency_s = std::max(all_reduce->fit.alpha_ms / 1000 / (2.0 * (n - 1)), 1e-9);
  link.efficiency = reached.at("all_reduce") / link.bandwidth;
  for (const auto& [collective, bandwidth] : reached)
    if (collective != "all_reduce") link.collective_efficiency[collective] = bandwidth / link.bandwidth;
  return link;
}

}  // namespace

Cluster machine_cluster(const Profile& profile, const ir::Program& program, int devices, int64_t memory_bytes,
                        const std::string& name) {
  AchievedRates rates = achieved_rates(profile, program, name);
  Cluster c;
  c.name = name;
  c.description = "this machine, measured by loom profile (" + profile.device + ", " + std::to_string(devices) +
                  " ranks): achieved rates, not peaks";
  c.nodes = 1;
  c.devices_per_node = devices;
  c.device.name = profile.device;
  c.device.memory_bytes = memory_bytes;
  c.device.matrix_flops_bf16 = c.device.matrix_flops_fp32 = rates.flop_rate;
  c.device.matrix_efficiency = {{{0, 1.0}}};
  set_memory(c.device, rates);
  std::optional<LinkSpec> idle = measured_link(profile, false);
  if (!idle) throw UserError(SourceRange{}, name + " has no all-reduce measured over two or more ranks", "profile at --nproc 2 or more");
  c.intra_node = c.inter_node = *idle;
  c.intra_node_beside_compute = measured_link(profile, true);
  // A copy to the host reads and writes each byte in the same memory, at the streaming rate.
  c.host.bandwidth = c.device.memory_bandwidth * c.device.memory_efficiency.steps.back().second / 2;
  c.host.efficiency = 1;
  c.host.latency_s = 1e-6;
  // Times at or near zero give rates no number holds (infinite, or 0/0): the cluster file
  // --save-cluster would write could not be read back, nor priced. Refused as the file would be.
  try {
    (void)parse_cluster(cluster_json(c), name);
  } catch (const UserError& e) {
    throw UserError(SourceRange{}, name + ": the rates derived from the profile's times are no cluster: " + e.diagnostic().message,
                    "measure the profile again with `loom profile` (its ops or collectives were timed at or near zero)");
  }
  return c;
}

std::string group_beside_the_ops(const Profile& profile) {
  if (profile.device != "cpu") return "";
  for (const CollectiveProfile& c : profile.collectives)
    if (c.group != "world") return c.group;
  return "";
}

std::string cluster_json(const Cluster& c) {
  auto table = [](const EfficiencyTable& t) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& [size, e] : t.steps) steps.push_back({size, e});
    return steps;
  };
  auto link = [](const LinkSpec& l) {
    nlohmann::json j{{"GBps", l.bandwidth / 1e9}, {"efficiency", l.efficiency}, {"latency_us", l.latency_s * 1e6}};
    for (const auto& [collective, efficiency] : l.collective_efficiency) j["collective_efficiency"][collective] = efficiency;
    return j;
  };
  nlohmann::json j{{"name", c.name},
                   {"description", c.description},
                   {"nodes", c.nodes},
                   {"devices_per_node", c.devices_per_node},
                   {"device",
                    {{"name", c.device.name},
                     {"memory", std::to_string(c.device.memory_bytes)},
                     {"matrix_tflops", {{"bf16", c.device.matrix_flops_bf16 / 1e12}, {"fp32", c.device.matrix_flops_fp32 / 1e12}}},
                     {"matrix_efficiency_by_gflop", table(c.device.matrix_efficiency)},
                     {"memory_GBps", c.device.memory_bandwidth / 1e9},
                     {"memory_efficiency_by_mb", table(c.device.memory_efficiency)}}},
                   {"intra_node", link(c.intra_node)},
                   {"inter_node", link(c.inter_node)},
                   {"host", link(c.host)}};
  if (c.intra_node_beside_compute) j["intra_node_beside_compute"] = link(*c.intra_node_beside_compute);
  if (!c.inter_node_scale.steps.empty()) j["inter_node_scale"] = table(c.inter_node_scale);
  return j.dump(2) + "\n";
}

}  // namespace loom
