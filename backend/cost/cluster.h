// A cluster the analytic cost model prices a step on (issue #15 §1): how many nodes of how many
// devices, what one device computes and holds, and the links inside a node, across nodes and to
// the host. Clusters are JSON files in folders users add to (docs/simulate.md has the format);
// Loom ships lins-a800, dgx-a100 and dgx-h100 in clusters/. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom {

// A step function of efficiency by size, as Calculon's system files give it: the entry with
// the largest threshold not above the size applies (sizes below every threshold get the first).
struct EfficiencyTable {
  std::vector<std::pair<double, double>> steps;  // (threshold, fraction of peak), ascending thresholds
  double at(double size) const;
};

struct DeviceSpec {
  std::string name;
  int64_t memory_bytes = 0;
  double matrix_flops_bf16 = 0;   // peak dense matrix FLOP/s in bf16 (tensor cores)
  double matrix_flops_fp32 = 0;   // ... in fp32
  EfficiencyTable matrix_efficiency;  // by the GFLOP of one op
  double memory_bandwidth = 0;        // bytes/s
  EfficiencyTable memory_efficiency;  // by the MB one op moves
};

// One kind of link, as each device sees it.
struct LinkSpec {
  double bandwidth = 0;   // bytes/s one way, per device (across nodes: the node's NICs shared out)
  double efficiency = 1;  // the fraction of it reached: by a collective without its own below, a transfer, a copy
  double latency_s = 0;   // per message (one ring step)
  // The fraction a collective reaches where it is not `efficiency`, by name (all_gather,
  // reduce_scatter, all_reduce): a library runs some by other algorithms than the
  // rest (nccl-tests report each its own bus bandwidth; gloo's all-gather is a broadcast per rank).
  // Links collectives run on only: the host link's file entry refuses it.
  std::map<std::string, double, std::less<>> collective_efficiency;

  double efficiency_of(std::string_view collective) const {
    auto own = collective_efficiency.find(collective);
    return own == collective_efficiency.end() ? efficiency : own->second;
  }
};

// The collectives the ring model prices, which collective_efficiency may name.
inline const std::vector<std::string>& ring_collectives() {
  static const std::vector<std::string> names{"all_gather", "reduce_scatter", "all_reduce"};
  return names;
}

struct Cluster {
  std::string name;
  std::string description;
  std::string origin;  // the file it was read from
  int nodes = 1;
  int devices_per_node = 1;
  DeviceSpec device;
  LinkSpec intra_node, inter_node, host;
  // The link inside a node as a collective sees it while the ranks go on computing beside it,
  // where the two share the device (a CPU's cores: a collective issued before other work, or
  // while another is in flight, as a profile's `beside_compute` sweep times it); absent: the
  // intra-node link's. "This machine" has one (machine_cluster.h); a GPU cluster none.
  std::optional<LinkSpec> intra_node_beside_compute;
  // The inter-node efficiency's multiplier by the number of nodes a collective spans
  // (lins.txt §III-A: effective bandwidth falls with scale); empty: 1 at every scale.
  EfficiencyTable inter_node_scale;

  int world() const { return nodes * devices_per_node; }
};

// Reads a cluster from JSON text. Throws UserError naming `origin` and the field when it is
// malformed.
Cluster parse_cluster(const std::string& json_text, const std::string& origin);

// The folders clusters are looked up in: each entry of $LOOM_CLUSTER_PATH (colon-separated),
// then the shipped clusters/.
std::vector<std::string> cluster_dirs();
// The names of the clusters in `dirs` (file names without .json), sorted, without repeats.
std::vector<std::string> cluster_names(const std::vector<std::string>& dirs);
// The same, for a message: "dgx-a100, dgx-h100, lins-a800" ("none" when there are none).
std::string cluster_names_text(const std::vector<std::string>& dirs);
// `name_or_path`: a file (it has a '/' or ends in .json) or a name looked up in `dirs`, the
// first folder that has NAME.json winning. Throws UserError listing the known names.
Cluster load_cluster(const std::string& name_or_path, const std::vector<std::string>& dirs);

// `cluster` with `nodes` nodes of its kind, named for them ("dgx-h100 at 128 nodes"): `--nodes`, a
// cluster the size of the planned run without writing its file. 0, or the nodes it has, keeps
// `cluster` as it is, name and all. Throws UserError for fewer than 0 nodes, or nodes holding
// more devices than are simulated (2^24).
Cluster with_nodes(Cluster cluster, int nodes);

// The ranks per node of a run of `world` ranks (`world_flag` names the option that says so) on
// `cluster`: `local_world`, or when it is 0 the cluster's devices per node (all ranks when there
// are fewer). Throws UserError when the run does not fit the cluster, or its ranks do not split
// evenly over nodes; where `nodes_flag` can resize the cluster (with_nodes; empty for a
// profiled machine, which cannot be), the hint names the nodes that would fit.
int run_ranks_per_node(const Cluster& cluster, int world, const std::string& world_flag, int local_world,
                       const std::string& nodes_flag);

}  // namespace loom
