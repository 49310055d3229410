#include "backend/cost/analytic_cost.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "lang/diagnostics.h"

namespace loom {
namespace {

// One level of ring on `n` ranks over `link`: its latency per step and its bandwidth term, at
// the fraction of the link `op` reaches times `scale` (across nodes, the penalty of their number).
double ring_seconds(const LinkSpec& link, double scale, std::string_view op, int n, double bytes) {
  if (n <= 1 || bytes <= 0) return 0;
  double steps = op == "all_reduce" ? 2.0 * (n - 1) : n - 1;
  return steps * link.latency_s + ring_factor(op, n) * bytes / (link.bandwidth * link.efficiency_of(op) * scale);
}

}  // namespace

double ring_factor(std::string_view op, int n) {
  if (op == "all_gather" || op == "reduce_scatter") return static_cast<double>(n - 1) / n;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  throw InternalError("cost model: no ring model for the collective " + std::string(op));
}

GroupSpan span_of_ranks(const std::vector<int>& ranks, int devices_per_node) {
  // The nodes in order, counted by runs (a planner prices thousands of groups of up to 1,024 ranks).
  std::vector<int> nodes;
  nodes.reserve(ranks.size());
  for (int r : ranks) nodes.push_back(r / devices_per_node);
  std::sort(nodes.begin(), nodes.end());
  GroupSpan span{0, 0};
  for (size_t i = 0, run = 0; i < nodes.size(); ++i) {
    run = i > 0 && nodes[i] == nodes[i - 1] ? run + 1 : 1;
    if (run == 1) ++span.nodes;
    span.per_node = std::max(span.per_node, static_cast<int>(run));
  }
  return span;
}

double compute_seconds(const DeviceSpec& device, double flops, int64_t bytes_moved, Precision precision) {
  double peak = precision == Precision::Bf16 ? device.matrix_flops_bf16 : device.matrix_flops_fp32;
  double matrix = flops > 0 ? flops / (peak * device.matrix_efficiency.at(flops / 1e9)) : 0;
  double bytes = static_cast<double>(bytes_moved);
  double memory = bytes > 0 ? bytes / (device.memory_bandwidth * device.memory_efficiency.at(bytes / 1e6)) : 0;
  return std::max(matrix, memory);
}

double collective_seconds(const Cluster& cluster, std::string_view op, int64_t bytes, GroupSpan span) {
  double b = static_cast<double>(bytes);
  const LinkSpec &intra = cluster.intra_node, &inter = cluster.inter_node;
  int k = span.per_node, m = span.nodes;
  if (m <= 1) return ring_seconds(intra, 1, op, k, b);
  double across = cluster.inter_node_scale.at(m);
  double part = b / k;  // what each device of a node carries across nodes
  if (op == "all_reduce")
    return ring_seconds(intra, 1, "reduce_scatter", k, b) + ring_seconds(inter, across, "all_reduce", m, part) +
           ring_seconds(intra, 1, "all_gather", k, b);
  if (op == "all_gather") return ring_seconds(inter, across, "all_gather", m, part) + ring_seconds(intra, 1, "all_gather", k, b);
  if (op == "reduce_scatter")
    return ring_seconds(intra, 1, "reduce_scatter", k, b) + ring_seconds(inter, across, "reduce_scatter", m, part);
  throw InternalError("cost model: no ring model for the collective " + std::string(op));
}

double point_to_point_seconds(const Cluster& cluster, int64_t bytes, bool across_nodes) {
  const LinkSpec& link = across_nodes ? cluster.inter_node : cluster.intra_node;
  return link.latency_s + static_cast<double>(bytes) / (link.bandwidth * link.efficiency);
}

double host_copy_seconds(const Cluster& cluster, int64_t bytes) {
  return cluster.host.latency_s + static_cast<double>(bytes) / (cluster.host.bandwidth * cluster.host.efficiency);
}

}  // namespace loom
