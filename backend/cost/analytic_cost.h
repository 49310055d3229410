// The analytic cost model (issue #15 §1): what a compute op costs on a cluster's device, from
// its FLOPs and the bytes it moves (a roofline with Calculon's efficiency-by-size tables), and
// what a collective, a point-to-point transfer or a host copy costs on the cluster's links
// (alpha-beta rings, lins.txt §IV-A, two levels when a group spans nodes). The formulas and
// their sources are in docs/simulate.md. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cost/cluster.h"

namespace loom {

enum class Precision { Bf16, Fp32 };

// Where a group's ranks sit: `per_node` of them on each of `nodes` nodes.
struct GroupSpan {
  int per_node = 1;
  int nodes = 1;
  int size() const { return per_node * nodes; }
};

// The span of the ranks `ranks` (world ranks, numbered node by node, `devices_per_node` to a
// node): the most of them on one node, and how many nodes they touch.
GroupSpan span_of_ranks(const std::vector<int>& ranks, int devices_per_node);

// Seconds of one op: the larger of its matrix time (flops at the precision's peak times the
// efficiency for its GFLOP) and its memory time (`bytes_moved` at the memory bandwidth times
// the efficiency for its MB).
double compute_seconds(const DeviceSpec& device, double flops, int64_t bytes_moved, Precision precision);

// The ring model's factor for `op` on `n` ranks: the bytes each rank sends per byte of the whole
// buffer, (n-1)/n for all-gather and reduce-scatter, 2(n-1)/n for all-reduce. (The IR's
// broadcast, Lins' spread of updated slices, runs as an all-gather and is priced as one:
// ir::collective_op.)
double ring_factor(std::string_view op, int n);

// Seconds of a ring collective, `op` as c10d names it ("all_gather", "reduce_scatter",
// "all_reduce"), on `bytes`: the whole buffer (all_gather: its output,
// reduce_scatter: its input). On one node: (steps) x latency + ring_factor x bytes / (bandwidth
// x the link's efficiency for `op`, LinkSpec::efficiency_of). Across nodes, hierarchically: the
// part inside each node on NVLink, the part across nodes on 1/per_node of the data with each
// device's share of the NICs, times inter_node_scale; each level at its link's efficiency for
// the collective it runs (an all-reduce's levels inside a node are a reduce-scatter and an
// all-gather). 0 for a group of one.
double collective_seconds(const Cluster& cluster, std::string_view op, int64_t bytes, GroupSpan span);

// Seconds of sending `bytes` to one other rank (pipeline send/recv).
double point_to_point_seconds(const Cluster& cluster, int64_t bytes, bool across_nodes);

// Seconds of copying `bytes` between the device and the host (offload, reload).
double host_copy_seconds(const Cluster& cluster, int64_t bytes);

}  // namespace loom
