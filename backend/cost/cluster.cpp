#include "backend/cost/cluster.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/cost/json_fields.h"
#include "backend/data_dirs.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom {

namespace {
constexpr int64_t kMostSimulatedDevices = int64_t{1} << 24;
std::string simulated_devices_text() { return std::to_string(kMostSimulatedDevices) + " (2^24)"; }
}  // namespace

double EfficiencyTable::at(double size) const {
  if (steps.empty()) return 1.0;
  double e = steps.front().second;
  for (const auto& [threshold, efficiency] : steps)
    if (size >= threshold) e = efficiency;
  return e;
}

namespace {

using nlohmann::json;

// Reads the fields of one cluster file, naming the file and the field in every error.
class Reader : public JsonFields {
 public:
  explicit Reader(std::string origin)
      : JsonFields(std::move(origin), "see docs/simulate.md for the cluster format, or start from clusters/dgx-a100.json") {}

  double positive(const json& object, const std::string& path, const std::string& key) const {
    const json& v = at(object, path, key);
    if (!v.is_number() || v.get<double>() <= 0) fail(join(path, key), "must be a positive number, not " + shown_json(v));
    return v.get<double>();
  }
  double fraction(const json& object, const std::string& path, const std::string& key) const {
    double f = positive(object, path, key);
    if (f > 1) fail(join(path, key), "is a fraction of the peak: at most 1, not " + shown_json(at(object, path, key)));
    return f;
  }
  // [[threshold, efficiency], ...] in any order; efficiencies in (0, 1].
  EfficiencyTable table(const json& object, const std::string& path, const std::string& key, bool fractions = true) const {
    const json& v = at(object, path, key);
    std::string field = join(path, key);
    if (!v.is_array() || v.empty()) fail(field, "must be a list of [size, efficiency] pairs");
    EfficiencyTable t;
    for (const json& step : v) {
      if (!step.is_array() || step.size() != 2 || !step[0].is_number() || !step[1].is_number() || step[0].get<double>() < 0 ||
          step[1].get<double>() <= 0 || (fractions && step[1].get<double>() > 1))
        fail(field, "holds " + shown_json(step) + ": each entry is [size >= 0, efficiency in (0, 1]]");
      t.steps.emplace_back(step[0].get<double>(), step[1].get<double>());
    }
    std::sort(t.steps.begin(), t.steps.end());
    return t;
  }
  // A field the format does not have is most likely a misspelled one, whose value would be lost.
  void only(const json& object, const std::string& path, const std::vector<std::string>& fields) const {
    if (!object.is_object()) return;
    for (const auto& [key, value] : object.items()) {
      if (std::find(fields.begin(), fields.end(), key) != fields.end()) continue;
      std::string known;
      for (const std::string& f : fields) known += (known.empty() ? "" : ", ") + f;
      fail(join(path, shown_name(key)), "is not a field of " + (path.empty() ? std::string("a cluster") : "`" + path + "`") + " (its fields: " + known + ")");
    }
  }
  // `collectives`: whether collectives run on it (the host link carries copies only).
  LinkSpec link(const json& object, const std::string& key, bool collectives = true) const {
    const json& l = at(object, "", key);
    if (collectives) only(l, key, {"GBps", "efficiency", "latency_us", "collective_efficiency"});
    else only(l, key, {"GBps", "efficiency", "latency_us"});
    LinkSpec s;
    s.bandwidth = positive(l, key, "GBps") * 1e9;
    s.efficiency = fraction(l, key, "efficiency");
    s.latency_s = positive(l, key, "latency_us") * 1e-6;
    if (l.contains("collective_efficiency")) {
      std::string path = join(key, "collective_efficiency");
      const json& each = at(l, key, "collective_efficiency");
      if (!each.is_object()) fail(path, "must be a JSON object of collective names to fractions, not " + shown_json(each));
      only(each, path, ring_collectives());
      for (const auto& [name, value] : each.items()) s.collective_efficiency[name] = fraction(each, path, name);
    }
    return s;
  }

};

}  // namespace

Cluster parse_cluster(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw UserError(SourceRange{}, origin + " is not JSON: " + json_error_text(e), "see docs/simulate.md for the cluster format");
  }
  Reader r(origin);
  if (!j.is_object())
    throw UserError(SourceRange{}, origin + " must hold a JSON object, not " + std::string(j.type_name()),
                    "see docs/simulate.md for the cluster format, or start from clusters/dgx-a100.json");
  Cluster c;
  c.origin = origin;
  c.name = r.text(j, "", "name");
  if (j.is_object() && j.contains("description")) c.description = r.text(j, "", "description");
  r.only(j, "", {"name", "description", "nodes", "devices_per_node", "device", "intra_node", "intra_node_beside_compute", "inter_node",
                 "host", "inter_node_scale"});
  c.nodes = r.count(j, "", "nodes", 1);
  c.devices_per_node = r.count(j, "", "devices_per_node", 1);
  if (static_cast<int64_t>(c.nodes) * c.devices_per_node > kMostSimulatedDevices)
    r.fail("nodes", "times `devices_per_node` is " + std::to_string(static_cast<int64_t>(c.nodes) * c.devices_per_node) +
                        " devices: at most " + simulated_devices_text() + " are simulated");
  const json& d = r.at(j, "", "device");
  r.only(d, "device", {"name", "memory", "matrix_tflops", "matrix_efficiency_by_gflop", "memory_GBps", "memory_efficiency_by_mb"});
  c.device.name = r.text(d, "device", "name");
  c.device.memory_bytes = parse_size(r.text(d, "device", "memory"));
  if (c.device.memory_bytes <= 0) r.fail("device.memory", "must be a size such as \"80GiB\"");
  const json& tflops = r.at(d, "device", "matrix_tflops");
  r.only(tflops, "device.matrix_tflops", {"bf16", "fp32"});
  c.device.matrix_flops_bf16 = r.positive(tflops, "device.matrix_tflops", "bf16") * 1e12;
  c.device.matrix_flops_fp32 = r.positive(tflops, "device.matrix_tflops", "fp32") * 1e12;
  c.device.matrix_efficiency = r.table(d, "device", "matrix_efficiency_by_gflop");
  c.device.memory_bandwidth = r.positive(d, "device", "memory_GBps") * 1e9;
  c.device.memory_efficiency = r.table(d, "device", "memory_efficiency_by_mb");
  c.intra_node = r.link(j, "intra_node");
  if (j.contains("intra_node_beside_compute")) c.intra_node_beside_compute = r.link(j, "intra_node_beside_compute");
  c.inter_node = r.link(j, "inter_node");
  c.host = r.link(j, "host", /*collectives=*/false);
  if (j.contains("inter_node_scale")) c.inter_node_scale = r.table(j, "", "inter_node_scale");
  return c;
}

std::vector<std::string> cluster_dirs() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("LOOM_CLUSTER_PATH"); path && *path) {
    std::stringstream entries(path);
    for (std::string dir; std::getline(entries, dir, ':');)
      if (!dir.empty()) dirs.push_back(dir);
  }
  dirs.push_back(shipped_cluster_dir());
  return dirs;
}

std::vector<std::string> cluster_names(const std::vector<std::string>& dirs) {
  std::set<std::string> names;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      if (std::error_code file_ec; entry.path().extension() == ".json" && entry.is_regular_file(file_ec))
        names.insert(entry.path().stem().string());
  }
  return {names.begin(), names.end()};
}

std::string cluster_names_text(const std::vector<std::string>& dirs) {
  std::string text;
  for (const std::string& n : cluster_names(dirs)) text += (text.empty() ? "" : ", ") + n;
  return text.empty() ? "none" : text;
}

Cluster load_cluster(const std::string& name_or_path, const std::vector<std::string>& dirs) {
  bool is_path = name_or_path.find('/') != std::string::npos ||
                 (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0);
  std::string path;
  if (is_path) {
    path = name_or_path;
  } else {
    // A folder or name the system cannot look up (too long, a loop of links) holds no cluster.
    std::error_code ec;
    for (const std::string& dir : dirs)
      if (std::filesystem::exists(std::filesystem::path(dir) / (name_or_path + ".json"), ec)) {
        path = (std::filesystem::path(dir) / (name_or_path + ".json")).string();
        break;
      }
    if (path.empty())
      throw UserError(SourceRange{}, "no cluster named '" + name_or_path + "' (known: " + cluster_names_text(dirs) + ")",
                      "name one of those, give a cluster file's path, or add NAME.json to a folder in $LOOM_CLUSTER_PATH");
  }
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw UserError(SourceRange{}, "the cluster file '" + path + "' is a directory", "give a cluster file's path, or a cluster's name");
  std::ifstream in(path);
  if (!in) {
    // "dgx-a100.json" where the shipped cluster was meant: its name is "dgx-a100".
    std::string stem = std::filesystem::path(path).stem().string();
    std::vector<std::string> known = cluster_names(dirs);
    bool named = std::filesystem::path(path).extension() == ".json" && std::find(known.begin(), known.end(), stem) != known.end();
    std::error_code ec;
    bool json_beside = !named && std::filesystem::is_regular_file(path + ".json", ec);  // "clusters/dgx-a100" for its file
    throw UserError(SourceRange{}, "cannot read the cluster file '" + path + "'",
                    named         ? "check the path, or name the cluster without .json: --cluster " + stem
                    : json_beside ? "check the path: its file is " + path + ".json"
                                  : "check the path");
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_cluster(text.str(), path);
}

namespace {

// What to do when `world` ranks do not split evenly over the cluster's nodes: the ranks per node
// that would (each dividing the world, within a node, on the nodes there are).
std::string ranks_per_node_hint(const Cluster& cluster, int world, const std::string& world_flag) {
  std::string fitting;
  for (int d = 1; d <= std::min(world, cluster.devices_per_node); ++d)
    if (world % d == 0 && world / d <= cluster.nodes) fitting += (fitting.empty() ? "" : ", ") + std::to_string(d);
  if (fitting.empty())
    return "no number of ranks per node splits " + std::to_string(world) + " ranks over cluster " + cluster.name +
           "'s nodes: give a " + world_flag + " that does";
  return "every node runs the same number of ranks: give --local-world one of " + fitting;
}

// ", or more nodes of its kind: --nodes N" where `nodes_flag` (empty: none) can give the cluster
// the nodes `world` ranks need at `per_node` a node; "" where it cannot or they do not split.
std::string more_nodes_hint(const std::string& nodes_flag, int world, int per_node) {
  if (nodes_flag.empty() || per_node < 1 || world % per_node != 0) return "";
  return ", or more nodes of its kind: " + nodes_flag + " " + std::to_string(world / per_node);
}

}  // namespace

Cluster with_nodes(Cluster cluster, int nodes) {
  if (nodes < 0)
    throw UserError(SourceRange{}, "--nodes " + std::to_string(nodes) + " is not a number of nodes",
                    "give --nodes (in Python: nodes=) 1 or more, or 0 for the nodes the cluster's file has");
  if (nodes == 0 || nodes == cluster.nodes) return cluster;
  if (static_cast<int64_t>(nodes) * cluster.devices_per_node > kMostSimulatedDevices)
    throw UserError(SourceRange{},
                    "--nodes " + std::to_string(nodes) + " of cluster " + cluster.name + " is " +
                        std::to_string(static_cast<int64_t>(nodes) * cluster.devices_per_node) + " devices: at most " +
                        simulated_devices_text() + " are simulated",
                    "give at most " + std::to_string(kMostSimulatedDevices / cluster.devices_per_node) + " nodes (in Python: nodes=)");
  cluster.name += " at " + std::to_string(nodes) + (nodes == 1 ? " node" : " nodes");
  cluster.nodes = nodes;
  return cluster;
}

int run_ranks_per_node(const Cluster& cluster, int world, const std::string& world_flag, int local_world, const std::string& nodes_flag) {
  auto refuse = [&](const std::string& what, const std::string& hint) { throw UserError(SourceRange{}, what, hint); };
  std::string ranks = world_flag + " " + std::to_string(world);
  if (world > cluster.world())
    refuse(ranks + " is more than cluster " + cluster.name + " has (" + std::to_string(cluster.world()) + " devices)",
           "use at most " + std::to_string(cluster.world()) + " ranks" +
               more_nodes_hint(nodes_flag, world, local_world > 0 ? std::min(local_world, cluster.devices_per_node) : cluster.devices_per_node));
  if (local_world > cluster.devices_per_node)
    refuse("--local-world " + std::to_string(local_world) + " is more than a node of cluster " + cluster.name + " has (" +
               std::to_string(cluster.devices_per_node) + " devices)",
           "give at most " + std::to_string(cluster.devices_per_node) + ", or leave --local-world out");
  if (local_world > world)
    refuse("--local-world " + std::to_string(local_world) + " is more than " + ranks, "give at most " + std::to_string(world));
  int per_node = local_world > 0 ? local_world : std::min(world, cluster.devices_per_node);
  std::string hint = ranks_per_node_hint(cluster, world, world_flag);
  if (world % per_node != 0 && local_world > 0)
    refuse("--local-world " + std::to_string(local_world) + " does not divide " + ranks, hint);
  if (world % per_node != 0)
    refuse(ranks + " does not split evenly over cluster " + cluster.name + "'s nodes of " + std::to_string(per_node) + " devices",
           hint + ", or " + world_flag + " a multiple of " + std::to_string(per_node));
  if (world / per_node > cluster.nodes)
    refuse(ranks + " at " + std::to_string(per_node) + " per node needs " + std::to_string(world / per_node) + " nodes; cluster " +
               cluster.name + " has " + std::to_string(cluster.nodes),
           hint + more_nodes_hint(nodes_flag, world, per_node));
  return per_node;
}

}  // namespace loom
