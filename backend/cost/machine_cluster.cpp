#include "backend/cost/machine_cluster.h"

#include <nlohmann/json.hpp>

#include "backend/cost/step_estimate.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom {
namespace {

// Achieved FLOP/s of the forward ops with FLOPs, and bytes/s of those without.
std::pair<double, double> achieved_rates(const Profile& profile, const ir::Program& program, const std::string& origin) {
  std::vector<double> ms = estimate_step(program, profile, origin).instruction_ms;
  double flops = 0, flop_s = 0, bytes = 0, byte_s = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    const ir::Instr& in = program.instrs[i];
    if (in.kind != ir::OpKind::Compute || in.phase != ir::Phase::Forward || ms[i] <= 0) continue;
    if (in.flops > 0) {
      flops += in.flops;
      flop_s += ms[i] / 1000;
    } else if (in.activation_bytes > 0) {
      bytes += static_cast<double>(in.activation_bytes);
      byte_s += ms[i] / 1000;
    }
  }
  if (flop_s <= 0 || byte_s <= 0)
    throw UserError(SourceRange{}, origin + " times no forward op " + (flop_s <= 0 ? "with" : "without") + " FLOPs",
                    "profile a model with matrix products and element-wise ops (every reference model has both)");
  return {flops / flop_s, bytes / byte_s};
}

// The link the profile's all-reduce on its largest group measured on idle cores: the link's
// own speed (the cluster model has no contention with compute).
LinkSpec measured_link(const Profile& profile, const std::string& origin) {
  const CollectiveProfile* best = nullptr;
  for (const CollectiveProfile& c : profile.collectives)
    if (c.collective == "all_reduce" && !c.beside_compute && c.group_size > 1 && c.fit.beta_ms_per_byte > 0 &&
        (!best || c.group_size > best->group_size))
      best = &c;
  if (!best)
    throw UserError(SourceRange{}, origin + " has no all-reduce measured over two or more ranks",
                    "profile at --nproc 2 or more");
  int n = best->group_size;
  LinkSpec link;
  link.bandwidth = 2.0 * (n - 1) / n / (best->fit.beta_ms_per_byte / 1000);
  link.latency_s = std::max(best->fit.alpha_ms / 1000 / (2.0 * (n - 1)), 1e-9);
  link.efficiency = 1;
  return link;
}

}  // namespace

Cluster machine_cluster(const Profile& profile, const ir::Program& program, int devices, int64_t memory_bytes,
                        const std::string& name) {
  auto [flop_rate, byte_rate] = achieved_rates(profile, program, name);
  Cluster c;
  c.name = name;
  c.description = "this machine, measured by loom profile (" + profile.device + ", " + std::to_string(devices) +
                  " ranks): achieved rates, not peaks";
  c.nodes = 1;
  c.devices_per_node = devices;
  c.device.name = profile.device;
  c.device.memory_bytes = memory_bytes;
  c.device.matrix_flops_bf16 = c.device.matrix_flops_fp32 = flop_rate;
  c.device.matrix_efficiency = {{{0, 1.0}}};
  c.device.memory_bandwidth = byte_rate;
  c.device.memory_efficiency = {{{0, 1.0}}};
  c.intra_node = c.inter_node = measured_link(profile, name);
  c.host = {byte_rate, 1, 1e-6};
  return c;
}

std::string cluster_json(const Cluster& c) {
  auto table = [](const EfficiencyTable& t) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& [size, e] : t.steps) steps.push_back({size, e});
    return steps;
  };
  auto link = [](const LinkSpec& l) { return nlohmann::json{{"GBps", l.bandwidth / 1e9}, {"efficiency", l.efficiency}, {"latency_us", l.latency_s * 1e6}}; };
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
  if (!c.inter_node_scale.steps.empty()) j["inter_node_scale"] = table(c.inter_node_scale);
  return j.dump(2) + "\n";
}

}  // namespace loom
