// The analytic cost model and the cluster files (issue #15 §1): figures computed by hand from
// the formulas in docs/simulate.md, on the shipped clusters.
#include <doctest/doctest.h>

#include <cmath>
#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/cost/analytic_cost.h"
#include "backend/cost/cluster.h"
#include "backend/cost/instruction_cost.h"
#include "backend/cost/machine_cluster.h"
#include "lang/diagnostics.h"
#include "helpers.h"

using namespace loom;
using ir::OpKind;

namespace {
Cluster shipped(const std::string& name) { return load_cluster(name, cluster_dirs()); }

// A valid cluster file's text with `field`'s line replaced by `replacement` (or dropped).
std::string dgx_a100_text() {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/clusters/dgx-a100.json");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}
}  // namespace

TEST_CASE("the shipped clusters load, with the figures their sources give") {
  CHECK(cluster_names(cluster_dirs()) == std::vector<std::string>{"dgx-a100", "dgx-h100", "lins-a800"});
  Cluster lins = shipped("lins-a800");
  CHECK(lins.world() == 1024);  // lins.txt §VI-A: 128 servers of 8 GPUs
  CHECK(lins.device.memory_bytes == 80LL << 30);
  CHECK(lins.device.matrix_flops_bf16 == doctest::Approx(312e12));
  CHECK(lins.intra_node.bandwidth == doctest::Approx(200e9));  // 400 GB/s both ways
  CHECK(lins.inter_node.bandwidth == doctest::Approx(12.5e9));  // 800 Gbit/s per server, 8 GPUs
  Cluster h100 = shipped("dgx-h100");
  CHECK(h100.device.matrix_flops_bf16 == doctest::Approx(989e12));
  CHECK(h100.inter_node.latency_s == doctest::Approx(2e-6));
}

TEST_CASE("efficiency tables are steps: the largest threshold not above the size") {
  EfficiencyTable t{{{0, 0.1}, {1, 0.6}, {16, 0.9}, {128, 0.95}}};
  CHECK(t.at(0.5) == 0.1);
  CHECK(t.at(1) == 0.6);
  CHECK(t.at(20) == 0.9);
  CHECK(t.at(1e6) == 0.95);
  CHECK(EfficiencyTable{}.at(3) == 1.0);
}

TEST_CASE("compute: a roofline of matrix and memory time, each at its efficiency for the size") {
  const DeviceSpec& a100 = shipped("dgx-a100").device;
  // 2 TFLOP: 2000 GFLOP, efficiency 0.95 at 312 TFLOP/s.
  CHECK(compute_seconds(a100, 2e12, 0, Precision::Bf16) == doctest::Approx(2e12 / (312e12 * 0.95)));
  CHECK(compute_seconds(a100, 2e12, 0, Precision::Fp32) == doctest::Approx(2e12 / (19.5e12 * 0.95)));
  // 0.5 GFLOP runs at 10%; 64 MB at 0.75 of 2039 GB/s; the larger wins.
  CHECK(compute_seconds(a100, 0.5e9, 0, Precision::Bf16) == doctest::Approx(0.5e9 / (312e12 * 0.1)));
  CHECK(compute_seconds(a100, 0, 64000000, Precision::Bf16) == doctest::Approx(64e6 / (2039e9 * 0.75)));
  CHECK(compute_seconds(a100, 0.5e9, 64000000, Precision::Bf16) == doctest::Approx(64e6 / (2039e9 * 0.75)));
  CHECK(compute_seconds(a100, 0, 0, Precision::Bf16) == 0);
}

TEST_CASE("collectives inside a node: ring factors (n-1)/n and 2(n-1)/n, a latency per step") {
  Cluster c = shipped("dgx-a100");
  double link = 300e9 * 0.6;
  CHECK(collective_seconds(c, "all_reduce", 1000000000, {8, 1}) == doctest::Approx(14 * 1e-6 + 2.0 * 7 / 8 * 1e9 / link));
  CHECK(collective_seconds(c, "all_gather", 1000000000, {8, 1}) == doctest::Approx(7 * 1e-6 + 7.0 / 8 * 1e9 / link));
  CHECK(collective_seconds(c, "reduce_scatter", 1000000000, {8, 1}) == collective_seconds(c, "all_gather", 1000000000, {8, 1}));
  CHECK(collective_seconds(c, "all_reduce", 1000000000, {1, 1}) == 0);  // a group of one communicates nothing
  // A collective with a fraction of its own: its bandwidth term at that fraction, its latency the link's.
  c.intra_node.collective_efficiency["reduce_scatter"] = 0.3;
  CHECK(collective_seconds(c, "reduce_scatter", 1000000000, {8, 1}) == doctest::Approx(7 * 1e-6 + 7.0 / 8 * 1e9 / (300e9 * 0.3)));
  CHECK(collective_seconds(c, "all_gather", 1000000000, {8, 1}) == doctest::Approx(7 * 1e-6 + 7.0 / 8 * 1e9 / link));
  // Across nodes each level takes its link's fraction for the collective it runs: an all-reduce's
  // reduce-scatter inside the node at 0.3.
  double across = collective_seconds(c, "all_reduce", 1000000000, {8, 2});
  c.intra_node.collective_efficiency.clear();
  CHECK(across - collective_seconds(c, "all_reduce", 1000000000, {8, 2}) ==
        doctest::Approx(7.0 / 8 * 1e9 / (300e9 * 0.3) - 7.0 / 8 * 1e9 / link));
}

TEST_CASE("collectives across nodes: inside each node on NVLink, across on 1/per_node of the data") {
  Cluster c = shipped("dgx-a100");
  double nvlink = 300e9 * 0.6, nic = 25e9 * 0.9;
  double rs_inside = 7 * 1e-6 + 7.0 / 8 * 1e9 / nvlink;
  double ar_across = 2 * 2e-6 + 2.0 * 1 / 2 * 1.25e8 / nic;  // 2 nodes, 1 GB / 8 per device
  CHECK(collective_seconds(c, "all_reduce", 1000000000, {8, 2}) == doctest::Approx(rs_inside + ar_across + rs_inside));
  double ag_across = 1 * 2e-6 + 1.0 / 2 * 1.25e8 / nic;
  CHECK(collective_seconds(c, "all_gather", 1000000000, {8, 2}) == doctest::Approx(ag_across + rs_inside));
  // One rank per node: the whole buffer crosses.
  CHECK(collective_seconds(c, "all_reduce", 1000000000, {1, 4}) == doctest::Approx(6 * 2e-6 + 2.0 * 3 / 4 * 1e9 / nic));
  // A scale penalty lowers the efficiency across nodes.
  c.inter_node_scale = EfficiencyTable{{{1, 1.0}, {4, 0.5}}};
  CHECK(collective_seconds(c, "all_reduce", 1000000000, {1, 4}) == doctest::Approx(6 * 2e-6 + 2.0 * 3 / 4 * 1e9 / (nic * 0.5)));
  // A collective's own fraction across nodes takes the penalty too: the two multiply.
  c.inter_node.collective_efficiency["all_reduce"] = 0.45;
  CHECK(collective_seconds(c, "all_reduce", 1000000000, {1, 4}) == doctest::Approx(6 * 2e-6 + 2.0 * 3 / 4 * 1e9 / (25e9 * 0.45 * 0.5)));
}

TEST_CASE("where a group's ranks sit, point-to-point and host copies") {
  auto strided = [](int size, int stride) {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r * stride);
    return ranks;
  };
  CHECK(span_of_ranks(strided(8, 1), 8).nodes == 1);
  CHECK(span_of_ranks(strided(16, 1), 8).per_node == 8);
  CHECK(span_of_ranks(strided(16, 1), 8).nodes == 2);
  CHECK(span_of_ranks(strided(4, 2), 8).per_node == 4);  // ranks 0, 2, 4, 6
  CHECK(span_of_ranks(strided(8, 4), 8).per_node == 2);  // ranks 0, 4 | 8, 12 | ...
  CHECK(span_of_ranks(strided(8, 4), 8).nodes == 4);
  CHECK(span_of_ranks(strided(128, 8), 8).per_node == 1);
  CHECK(span_of_ranks(strided(128, 8), 8).nodes == 128);
  CHECK(span_of_ranks({3, 9, 10}, 8).per_node == 2);  // nodes 0 and 1
  Cluster c = shipped("dgx-a100");
  CHECK(point_to_point_seconds(c, 1000000, false) == doctest::Approx(1e-6 + 1e6 / (300e9 * 0.6)));
  CHECK(point_to_point_seconds(c, 1000000, true) == doctest::Approx(2e-6 + 1e6 / (25e9 * 0.9)));
  CHECK(host_copy_seconds(c, 1000000) == doctest::Approx(10e-6 + 1e6 / (32e9 * 0.8)));
}

TEST_CASE("a bad cluster file is a user error naming the file, the field and the fix") {
  std::string good = dgx_a100_text();
  CHECK_NOTHROW(parse_cluster(good, "good.json"));
  CHECK_THROWS_WITH_AS(parse_cluster("{ not json", "bad.json"), doctest::Contains("bad.json is not JSON"), UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"nodes\": 16,", ""), "c.json"), "c.json: `nodes` is missing", UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"GBps\": 300", "\"GBps\": -3"), "c.json"),
                       "c.json: `intra_node.GBps` must be a positive number, not -3", UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"efficiency\": 0.6", "\"efficiency\": 60"), "c.json"),
                       doctest::Contains("`intra_node.efficiency` is a fraction of the peak: at most 1, not 60"), UserError);
  // The value as written, in its own notation: a huge one is not spelled out in 309 digits.
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"efficiency\": 0.6", "\"efficiency\": 1e308"), "c.json"),
                       doctest::Contains("at most 1, not 1e+308"), UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"80GiB\"", "\"lots\""), "c.json"),
                       "c.json: `device.memory` must be a size such as \"80GiB\"", UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "[[0, 0.1], [1, 0.6]", "[[0, 2], [1, 0.6]"), "c.json"),
                       doctest::Contains("`device.matrix_efficiency_by_gflop` holds [0,2]"), UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "[[0, 0.1], [1, 0.6], [16, 0.9], [128, 0.95]]", "[]"), "c.json"),
                       doctest::Contains("`device.matrix_efficiency_by_gflop` must be a list of [size, efficiency] pairs"), UserError);
  try {
    parse_cluster(replaced(good, "\"nodes\": 16,", ""), "c.json");
    FAIL("a cluster without nodes was accepted");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().hint.find("docs/simulate.md") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"nodes\": 16", "\"nodes\": 0.5"), "c.json"),
                       "c.json: `nodes` must be a whole number of at least 1, not 0.5", UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"description\": \"DGX", "\"description\": 7, \"x\": \"DGX"), "c.json"),
                       "c.json: `description` must be a string, not 7", UserError);
  CHECK_THROWS_WITH_AS(parse_cluster("[1, 2]", "c.json"), "c.json must hold a JSON object, not array", UserError);
  nlohmann::json listed = nlohmann::json::parse(good);
  listed["device"] = nlohmann::json::array({1});
  CHECK_THROWS_WITH_AS(parse_cluster(listed.dump(), "c.json"), "c.json: `device` must be a JSON object, not array", UserError);
  // A misspelled field would be lost: refused, with the fields there are.
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"nodes\": 16,", "\"nodes\": 16, \"inter_node_scal\": [[1, 0.5]],"), "c.json"),
                       "c.json: `inter_node_scal` is not a field of a cluster (its fields: name, description, nodes, devices_per_node, "
                       "device, intra_node, intra_node_beside_compute, inter_node, host, inter_node_scale)",
                       UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"nodes\": 16,", "\"nodes\": 16, \"intra_node_beside_compute\": {\"GBps\": -1},"), "c.json"),
                       doctest::Contains("c.json: `intra_node_beside_compute.GBps` must be a positive number"), UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"memory_GBps\"", "\"memory_GBPS\": 1, \"memory_GBps\""), "c.json"),
                       doctest::Contains("c.json: `device.memory_GBPS` is not a field of `device` (its fields: name, memory,"), UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"latency_us\": 1}", "\"latency_us\": 1, \"latency\": 1}"), "c.json"),
                       doctest::Contains("c.json: `intra_node.latency` is not a field of `intra_node`"), UserError);
  // A link's fractions by collective: names the ring model prices, each a fraction.
  std::string own = "\"latency_us\": 1, \"collective_efficiency\": ";
  Cluster fractions = parse_cluster(replaced(good, "\"latency_us\": 1}", own + "{\"all_gather\": 0.5}}"), "c.json");
  CHECK(fractions.intra_node.efficiency_of("all_gather") == 0.5);
  CHECK(fractions.intra_node.efficiency_of("all_reduce") == 0.6);  // the link's own
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"latency_us\": 1}", own + "{\"allgather\": 0.5}}"), "c.json"),
                       "c.json: `intra_node.collective_efficiency.allgather` is not a field of `intra_node.collective_efficiency` "
                       "(its fields: all_gather, reduce_scatter, all_reduce)",
                       UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"latency_us\": 1}", own + "{\"all_gather\": 50}}"), "c.json"),
                       doctest::Contains("c.json: `intra_node.collective_efficiency.all_gather` is a fraction of the peak: at most 1"),
                       UserError);
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"latency_us\": 10}", own + "{\"all_gather\": 0.5}}"), "c.json"),
                       "c.json: `host.collective_efficiency` is not a field of `host` (its fields: GBps, efficiency, latency_us)",
                       UserError);  // no collective runs on the host link
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(good, "\"latency_us\": 1}", own + "0.5}"), "c.json"),
                       "c.json: `intra_node.collective_efficiency` must be a JSON object of collective names to fractions, not 0.5",
                       UserError);
  // 2^24 x 2^24 devices would overflow the world's count.
  CHECK_THROWS_WITH_AS(parse_cluster(replaced(replaced(good, "\"nodes\": 16", "\"nodes\": 16777216"), "\"devices_per_node\": 8",
                                              "\"devices_per_node\": 16777216"),
                                     "c.json"),
                       "c.json: `nodes` times `devices_per_node` is 281474976710656 devices: at most 16777216 (2^24) are simulated",
                       UserError);
  CHECK_THROWS_WITH_AS(load_cluster("dgx-z900", cluster_dirs()),
                       "no cluster named 'dgx-z900' (known: dgx-a100, dgx-h100, lins-a800)", UserError);
  try {
    load_cluster("dgx-a100.json", cluster_dirs());  // a shipped cluster's file name, not a file here
    FAIL("a file that is not there was read");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().message == "cannot read the cluster file 'dgx-a100.json'");
    CHECK(e.diagnostic().hint == "check the path, or name the cluster without .json: --cluster dgx-a100");
  }
  CHECK_THROWS_WITH_AS(load_cluster("/tmp", cluster_dirs()), "the cluster file '/tmp' is a directory", UserError);
  CHECK_THROWS_WITH_AS(load_cluster("/nonexistent/c.json", cluster_dirs()), "cannot read the cluster file '/nonexistent/c.json'",
                       UserError);
}

TEST_CASE("a hostile cluster file or name (nested deeper than the stack, megabytes long, unlookupable) is a user error, never a crash") {
  std::string good = dgx_a100_text();
  auto refusal = [](const std::string& text) {
    try {
      parse_cluster(text, "c.json");
    } catch (const UserError& e) {
      return e.diagnostic().message;
    }
    return std::string("accepted");
  };
  // Printed whole, a value nested 200,000 deep overflowed the stack (dump() recurses).
  std::string deep = std::string(200000, '[') + std::string(200000, ']');
  CHECK(refusal(replaced(good, "\"nodes\": 16", "\"nodes\": " + deep)) ==
        "c.json: `nodes` must be a whole number of at least 1, not a list of 1 entry");
  CHECK(refusal(replaced(good, "\"description\": \"", "\"description\": " + deep + ", \"x\": \"")) ==
        "c.json: `description` must be a string, not a list of 1 entry");
  std::string many = "[1";
  for (int i = 0; i < 100000; ++i) many += ",1";
  CHECK(refusal(replaced(good, "\"nodes\": 16", "\"nodes\": " + many + "]")) ==
        "c.json: `nodes` must be a whole number of at least 1, not a list of 100001 entries");
  CHECK(refusal(replaced(good, "\"nodes\": 16", "\"nodes\": \"" + std::string(100000, 'n') + "\"")) ==
        "c.json: `nodes` must be a whole number of at least 1, not \"" + std::string(60, 'n') + "\"...");
  // Cut at a character's start: a cut inside "é" would make dump() throw (an internal error).
  std::string accents;
  for (int i = 0; i < 31; ++i) accents += "\u00e9";  // 2 bytes each in UTF-8
  CHECK(refusal(replaced(good, "\"nodes\": 16", "\"nodes\": \"a" + accents + "\"")) ==
        "c.json: `nodes` must be a whole number of at least 1, not \"a" + accents.substr(0, 58) + "\"...");
  CHECK(refusal(replaced(good, "\"nodes\": 16,", "\"nodes\": 16, \"" + std::string(1000, 'k') + "\": 1,"))
            .rfind("c.json: `" + std::string(60, 'k') + "...` is not a field of a cluster (its fields: ", 0) == 0);
  // An unterminated string of a megabyte: the parser's words quote it, cut.
  std::string unterminated = refusal("{\"name\": \"" + std::string(1 << 20, 'x'));
  CHECK(unterminated.size() < 400);
  CHECK(unterminated.find("... (cut)") == unterminated.size() - 9);
  CHECK(refusal(replaced(good, "\"nodes\": 16", "\"nodes\": {\"a\": 1}")) ==
        "c.json: `nodes` must be a whole number of at least 1, not {\"a\":1}");
  // Over 2^24 says so, rather than "at least 1".
  CHECK(refusal(replaced(good, "\"nodes\": 16", "\"nodes\": 16777217")) == "c.json: `nodes` must be at most 16777216 (2^24), not 16777217");
  CHECK(refusal(replaced(good, "\"nodes\": 16", "\"nodes\": 18446744073709551615")) ==
        "c.json: `nodes` must be at most 16777216 (2^24), not 18446744073709551615");
  // The parser's words, without nlohmann's tag.
  std::string broken = refusal("{ not json");
  CHECK(broken.rfind("c.json is not JSON: parse error at line 1, column 4: syntax error while parsing object key", 0) == 0);
  CHECK(broken.find("[json.exception") == std::string::npos);
  CHECK(refusal("").rfind("c.json is not JSON: parse error at line 1, column 1: syntax error while parsing value - unexpected end of input", 0) == 0);
  // A name the file system cannot look up (longer than a file name may be) is no cluster's.
  CHECK_THROWS_WITH_AS(load_cluster(std::string(300, 'a'), cluster_dirs()), doctest::Contains("no cluster named 'aaaa"), UserError);
  // A shipped cluster's path without .json: its file is named.
  std::string shipped = std::string(LOOM_SOURCE_DIR) + "/clusters/dgx-a100";
  try {
    load_cluster(shipped, cluster_dirs());
    FAIL("a path that is not a file was read");
  } catch (const UserError& e) {
    CHECK(e.diagnostic().message == "cannot read the cluster file '" + shipped + "'");
    CHECK(e.diagnostic().hint == "check the path: its file is " + shipped + ".json");
  }
}

TEST_CASE("clusters users add: $LOOM_CLUSTER_PATH is searched first") {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("loom_cluster_path_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "mine.json") << replaced(dgx_a100_text(), "\"name\": \"dgx-a100\"", "\"name\": \"mine\"");
  // A file of the same name as a shipped cluster replaces it.
  std::ofstream(dir / "dgx-a100.json") << replaced(dgx_a100_text(), "\"nodes\": 16", "\"nodes\": 2");
  setenv("LOOM_CLUSTER_PATH", dir.c_str(), 1);
  CHECK(cluster_dirs().front() == dir.string());
  CHECK(load_cluster("mine", cluster_dirs()).name == "mine");
  CHECK(load_cluster("dgx-a100", cluster_dirs()).nodes == 2);
  unsetenv("LOOM_CLUSTER_PATH");
  std::filesystem::remove_all(dir);
}

namespace {

// What run_ranks_per_node refuses the run with (an empty diagnostic, failing, where it does not).
Diagnostic ranks_per_node_refusal(const Cluster& cluster, int world, const std::string& world_flag, int local_world,
                                  const std::string& nodes_flag) {
  try {
    run_ranks_per_node(cluster, world, world_flag, local_world, nodes_flag);
  } catch (const UserError& e) {
    return e.diagnostic();
  }
  FAIL("run_ranks_per_node refuses " << world_flag << " " << world << " on cluster " << cluster.name);
  return {};
}

}  // namespace

TEST_CASE("--nodes: a shipped cluster on more nodes of its kind, priced as its own nodes are") {
  Cluster h100 = shipped("dgx-h100");
  Cluster grown = with_nodes(h100, 128);
  CHECK(grown.nodes == 128);
  CHECK(grown.world() == 1024);
  CHECK(grown.name == "dgx-h100 at 128 nodes");
  // The node count only says what fits: a collective over the same ranks costs the same.
  CHECK(collective_seconds(grown, "all_reduce", 1000000000, {8, 16}) == collective_seconds(h100, "all_reduce", 1000000000, {8, 16}));
  CHECK(run_ranks_per_node(grown, 1024, "--world", 0, "--nodes") == 8);
  Diagnostic beyond = ranks_per_node_refusal(h100, 1024, "--world", 0, "--nodes");
  CHECK(beyond.message == "--world 1024 is more than cluster dgx-h100 has (128 devices)");
  CHECK(beyond.hint == "use at most 128 ranks, or more nodes of its kind: --nodes 128");
  Diagnostic too_few_nodes = ranks_per_node_refusal(h100, 64, "--nproc", 2, "--nodes");
  CHECK(too_few_nodes.message == "--nproc 64 at 2 per node needs 32 nodes; cluster dgx-h100 has 16");
  CHECK(too_few_nodes.hint.find(", or more nodes of its kind: --nodes 32") != std::string::npos);
  // At a node's share of ranks the hint names the nodes they need; where they do not split
  // evenly, or the cluster cannot be resized (a profiled machine's), it names none.
  CHECK(ranks_per_node_refusal(h100, 256, "--nproc", 4, "--nodes").hint == "use at most 128 ranks, or more nodes of its kind: --nodes 64");
  CHECK(ranks_per_node_refusal(h100, 129, "--nproc", 0, "--nodes").hint == "use at most 128 ranks");
  CHECK(ranks_per_node_refusal(h100, 64, "--world", 2, "").hint.find("--nodes") == std::string::npos);
  // 0, or the nodes it has, keeps the cluster as it is, its name too.
  CHECK(with_nodes(h100, 0).name == "dgx-h100");
  CHECK(with_nodes(h100, 16).name == "dgx-h100");
  CHECK(with_nodes(h100, 2).world() == 16);
  CHECK(with_nodes(h100, 1).name == "dgx-h100 at 1 node");
  CHECK_THROWS_WITH_AS(with_nodes(h100, -1), "--nodes -1 is not a number of nodes", UserError);
  CHECK_THROWS_WITH_AS(with_nodes(h100, 4000000),
                       "--nodes 4000000 of cluster dgx-h100 is 32000000 devices: at most 16777216 (2^24) are simulated", UserError);
}

TEST_CASE("where a program's groups sit, from the ranks backend/comm makes them of") {
  ClusterCost cost(shipped("dgx-a100"), Precision::Bf16, 8);
  auto collective = [](ir::Role role, int size, OpKind kind = OpKind::AllReduce, ir::Phase phase = ir::Phase::Step) {
    ir::Instr in;
    in.kind = kind;
    in.phase = phase;
    in.group = {role, size};
    return in;
  };
  // tp 2 x pp 2 x dp 4 (16 ranks, 8 to a node), s_os 2: the model group is ranks 0-3 and 8-11.
  ir::Program p;
  p.mesh = {2, 2, 0, 0};
  p.sharding = {4, 1, 1, 2};
  GroupSpan model = cost.span(p, collective(ir::Role::Model, 8));
  CHECK(model.per_node == 4);
  CHECK(model.nodes == 2);
  CHECK(cost.span(p, collective(ir::Role::Tp, 2)).nodes == 1);
  CHECK(cost.span(p, collective(ir::Role::Dp, 4)).per_node == 4);  // ranks 0, 2, 4, 6
  CHECK(cost.span(p, collective(ir::Role::Pipeline, 2)).nodes == 2);
  // tp 1 x dp 4 x pp 4 (16 ranks): stage 1's activation goes to stage 2 across nodes (ranks 4 and 8),
  // stage 0's to stage 1 inside one (0 and 4).
  ir::Program q;
  q.mesh = {1, 4, 1, 0};
  q.sharding = {4, 1, 1, 1};
  CHECK(cost.span(q, collective(ir::Role::StagePair, 2, OpKind::Send, ir::Phase::Forward)).nodes == 2);
  CHECK(cost.span(q, collective(ir::Role::StagePair, 2, OpKind::Recv, ir::Phase::Forward)).nodes == 1);
  CHECK(span_of_ranks({0, 4, 8, 12}, 8).per_node == 2);
  CHECK(span_of_ranks({0, 4, 8, 12}, 8).nodes == 2);
}

TEST_CASE("a wait's unpacking on a cluster: each byte read and written once at the device's memory bandwidth") {
  ClusterCost cost(shipped("dgx-a100"), Precision::Bf16, 8);
  ir::Program p;
  ir::Instr unpacking;
  unpacking.kind = OpKind::Wait;
  unpacking.unpack_bytes = 32'000'000;  // 64 MB moved, at 75% of the A100's 2,039 GB/s
  CHECK(cost.own_seconds(p, unpacking) == doctest::Approx(64e6 / (2039e9 * 0.75)));
  CHECK(cost.seconds(p, unpacking) == 0);  // the wait itself: the host's time until its collective ends
  unpacking.unpack_bytes = 0;
  CHECK(cost.own_seconds(p, unpacking) == 0);
}

namespace {

// A program of a matrix product `a` (2 GFLOP forward) and an element-wise op `b` (1 MB saved),
// with a profile of it on two ranks: `a` 10 ms and `b` 1 ms forward, an all-reduce fitted at
// 0.1 ms empty and 1 ms per MB; the optimizer step not timed.
std::pair<ir::Program, Profile> profiled_machine() {
  ir::Program p;
  p.params = {{"w", 10, 4}};
  auto compute = [](const std::string& module, ir::Phase phase, double flops, int64_t saved) {
    ir::Instr in;
    in.kind = OpKind::Compute;
    in.phase = phase;
    in.module = module;
    in.flops = flops;
    in.activation_bytes = saved;
    return in;
  };
  p.instrs = {compute("a", ir::Phase::Forward, 2e9, 0), compute("b", ir::Phase::Forward, 0, 1000000),
              compute("b", ir::Phase::Backward, 0, 1000000), compute("a", ir::Phase::Backward, 4e9, 0)};
  Profile profile;
  profile.device = "cpu";
  profile.ops = {{"a", 10, 20, 0, 0, 0, 0}, {"b", 1, 2, 0, 0, 0, 0}};
  CollectiveProfile reduce;
  reduce.collective = "all_reduce";
  reduce.group = "world";
  reduce.group_size = 2;
  reduce.fit = {0.1, 1e-6};
  profile.collectives = {reduce};
  return {p, profile};
}

}  // namespace

TEST_CASE("this machine as a cluster: the rates a profile measured, written in the cluster format") {
  auto [p, profile] = profiled_machine();
  Cluster here = machine_cluster(profile, p, 2, 1LL << 30, "here");
  CHECK(here.device.matrix_flops_bf16 == doctest::Approx(2e9 / 0.010));  // 2 GFLOP in 10 ms
  CHECK(here.device.memory_bandwidth == doctest::Approx(1e6 / 0.001));   // 1 MB in 1 ms
  CHECK(here.host.bandwidth == doctest::Approx(1e6 / 0.001 / 2));        // a copy reads and writes each byte
  CHECK(here.intra_node.bandwidth == doctest::Approx(1.0 / 1e-9));       // ring factor 1 at n = 2
  CHECK(here.intra_node.latency_s == doctest::Approx(0.1e-3 / 2));
  CHECK(here.world() == 2);
  Cluster again = parse_cluster(cluster_json(here), "here.json");
  CHECK(again.device.matrix_flops_fp32 == doctest::Approx(here.device.matrix_flops_fp32));
  CHECK(again.intra_node.latency_s == doctest::Approx(here.intra_node.latency_s));
  CHECK(again.device.memory_bytes == 1LL << 30);
  CHECK_FALSE(here.intra_node_beside_compute.has_value());  // the profile timed no all-reduce beside compute
  CHECK(group_beside_the_ops(profile).empty());  // data parallelism's: collectives on the world alone
  // An all-reduce timed beside the ranks' compute, 0.4 ms empty and 3 ms per MB, is the link for
  // collectives that share the cores. The in-step scale (the profiled schedule's steps took twice
  // what the sweeps price) is that schedule's own: the links do not carry it.
  profile.collectives[0].in_step_scale = 2;
  CollectiveProfile beside = profile.collectives[0];
  beside.beside_compute = true;
  beside.fit = {0.4, 3e-6};
  profile.collectives.push_back(beside);
  here = parse_cluster(cluster_json(machine_cluster(profile, p, 2, 1LL << 30, "here")), "here.json");
  CHECK(here.intra_node.bandwidth == doctest::Approx(1.0 / 1e-9));
  CHECK(here.intra_node.latency_s == doctest::Approx(0.1e-3 / 2));
  REQUIRE(here.intra_node_beside_compute.has_value());
  CHECK(here.intra_node_beside_compute->bandwidth == doctest::Approx(1.0 / 3e-9));
  CHECK(here.intra_node_beside_compute->latency_s == doctest::Approx(0.4e-3 / 2));
  // The profile's all-gather on the same group and regime, 0.25 ms per MB: its ring factor at n = 2 is
  // half the all-reduce's, so it reached 2 GB/s of link where the all-reduce reached 1. The link
  // is the faster's, the all-reduce at half of it.
  CollectiveProfile world_gather = profile.collectives[0];
  world_gather.collective = "all_gather", world_gather.fit = {0.05, 0.25e-6};
  profile.collectives.push_back(world_gather);
  here = parse_cluster(cluster_json(machine_cluster(profile, p, 2, 1LL << 30, "here")), "here.json");
  CHECK(here.intra_node.bandwidth == doctest::Approx(2.0 / 1e-9));
  CHECK(here.intra_node.efficiency == doctest::Approx(0.5));
  CHECK(here.intra_node.efficiency_of("all_gather") == doctest::Approx(1.0));
  CHECK(here.intra_node.latency_s == doctest::Approx(0.1e-3 / 2));  // the all-reduce's, per ring step
  CHECK(collective_seconds(here, "all_gather", 1000000, {2, 1}) == doctest::Approx(0.05e-3 + 0.25e-3));  // as measured, past the latency
  CHECK(collective_seconds(here, "all_reduce", 1000000, {2, 1}) == doctest::Approx(0.1e-3 + 1e-3));
  CHECK_FALSE(here.intra_node_beside_compute->collective_efficiency.count("all_gather"));  // timed on idle cores only
  // A sweep that fitted no time per byte (a flat line of noise) says nothing of its bandwidth:
  // that collective takes the link's efficiency, the all-reduce's.
  profile.collectives.back().fit.beta_ms_per_byte = 0;
  here = machine_cluster(profile, p, 2, 1LL << 30, "here");
  CHECK(here.intra_node.bandwidth == doctest::Approx(1.0 / 1e-9));
  CHECK(here.intra_node.efficiency == doctest::Approx(1.0));
  CHECK(here.intra_node.collective_efficiency.empty());
  profile.collectives.pop_back();
  CollectiveProfile gather = profile.collectives[0];
  gather.collective = "all_gather", gather.group = "params";
  profile.collectives.push_back(gather);
  CHECK(group_beside_the_ops(profile) == "params");  // a sharded schedule's: its ops ran beside its gathers
  profile.device = "cuda";
  CHECK(group_beside_the_ops(profile).empty());  // on a GPU they do not share cores
  profile.collectives.clear();
  CHECK_THROWS_WITH_AS(machine_cluster(profile, p, 2, 1LL << 30, "here"),
                       "here has no all-reduce measured over two or more ranks", UserError);
  // A profile that timed no matrix product (or no element-wise op) measures no rate for it.
  auto [q, timed] = profiled_machine();
  auto refusal = [&q = q](const Profile& with) {
    return testing::refusal_of([&] { machine_cluster(with, q, 2, 1LL << 30, "here"); },
                               "profile a model with matrix products and element-wise ops (every reference model has both)");
  };
  CHECK(refusal(timed) == "accepted");
  Profile untimed = timed;
  untimed.ops[0].forward_ms = 0;  // `a`, the matrix product
  CHECK(refusal(untimed) == "here times no forward op with FLOPs");
  untimed = timed;
  untimed.ops[1].forward_ms = 0;  // `b`, the element-wise op
  CHECK(refusal(untimed) == "here times no forward op without FLOPs");
  // Times so near zero that the rates overflow: refused as the cluster file would be, not
  // written as one that cannot be read back (found by the fuzzer's round trip).
  Profile instant = timed;
  instant.ops[0].forward_ms = 1e-320;
  CHECK_THROWS_WITH_AS(machine_cluster(instant, q, 2, 1LL << 30, "here"),
                       doctest::Contains("here: the rates derived from the profile's times are no cluster: here: `device.matrix_tflops"),
                       UserError);
}

TEST_CASE("this machine as a cluster: the step's tail streams faster than the element-wise ops, and each prices at its rate") {
  auto [p, profile] = profiled_machine();
  p.params = {{"w", 1'000'000, 4}};
  ir::Instr step, norm;
  step.kind = OpKind::OptimizerStep, step.phase = ir::Phase::Step;
  norm.kind = OpKind::GradNorm, norm.phase = ir::Phase::Step, norm.group = {ir::Role::World, 2};
  // The update of 1,000,000 elements read and wrote 32 MB (4 + 4 + 8 bytes each) in 16 ms; the
  // norm read 4 MB and the clipping read and wrote them, 12 MB in 6 ms: 2 GB/s, twice what `b`'s
  // 1 MB in 1 ms reached.
  profile.optimizer_elements = 1'000'000;
  profile.optimizer_step_ms = 16;
  profile.grad_norm_ms = 6;
  Cluster here = machine_cluster(profile, p, 2, 1LL << 30, "here");
  CHECK(here.device.memory_bandwidth == doctest::Approx(2e9));
  REQUIRE(here.device.memory_efficiency.steps.size() == 2);
  CHECK(here.device.memory_efficiency.steps[0].second == doctest::Approx(0.5));
  CHECK(here.device.memory_efficiency.steps[1].first == doctest::Approx(std::sqrt(1.0 * 12)));  // MB, between 1 and 12
  CHECK(here.device.memory_efficiency.steps[1].second == doctest::Approx(1.0));
  CHECK(here.host.bandwidth == doctest::Approx(1e9));
  // Priced on it, each piece of this program takes what it was measured at.
  ClusterCost cost(parse_cluster(cluster_json(here), "here.json"), Precision::Fp32, 2);
  CHECK(cost.seconds(p, p.instrs[1]) == doctest::Approx(0.001));
  CHECK(cost.seconds(p, step) == doctest::Approx(0.016));
  CHECK(cost.own_seconds(p, norm) == doctest::Approx(0.006));
  // Where the element-wise ops are the faster (the update's 32 MB in 64 ms: 0.5 GB/s), the
  // bandwidth is theirs and the efficiency steps down for the large pieces.
  profile.optimizer_step_ms = 64;
  profile.grad_norm_ms = -1;
  here = machine_cluster(profile, p, 2, 1LL << 30, "here");
  CHECK(here.device.memory_bandwidth == doctest::Approx(1e9));
  REQUIRE(here.device.memory_efficiency.steps.size() == 2);
  CHECK(here.device.memory_efficiency.steps[0].second == doctest::Approx(1.0));
  CHECK(here.device.memory_efficiency.steps[1].second == doctest::Approx(0.5));
  CHECK(ClusterCost(here, Precision::Fp32, 2).seconds(p, step) == doctest::Approx(0.064));
  // Pieces whose sizes overlap (an update of 10 elements, 320 bytes, smaller than `b`'s 1 MB)
  // share one rate: all the bytes over all the time.
  profile.optimizer_elements = 10;
  profile.grad_norm_ms = -1;
  here = machine_cluster(profile, p, 2, 1LL << 30, "here");
  CHECK(here.device.memory_bandwidth == doctest::Approx((1e6 + 320) / (0.001 + 0.064)));
  CHECK(here.device.memory_efficiency.steps.size() == 1);
}

TEST_CASE("the gradient norm on a cluster: its pass over the rank's gradients and their clipping, at the memory bandwidth") {
  ClusterCost cost(shipped("dgx-a100"), Precision::Bf16, 8);
  ir::Program p;
  p.params = {{"a", 1'000'000, 4}, {"b", 3'000'000, 4}};
  p.sharding = {2, 2, 2, 2};  // each rank clips its optimizer slices: 2,000,000 fp32 gradients
  ir::Instr norm;
  norm.kind = OpKind::GradNorm;
  norm.phase = ir::Phase::Step;
  norm.group = {ir::Role::OptimBlock, 2};
  // The norm reads them, the clipping reads and writes them: 24 MB at 75% of the A100's 2,039 GB/s.
  CHECK(cost.own_seconds(p, norm) == doctest::Approx(24e6 / (2039e9 * 0.75)));
  p.sharding = {2, 1, 1, 1};  // data parallelism: every rank the whole of each
  CHECK(cost.own_seconds(p, norm) == doctest::Approx(48e6 / (2039e9 * 0.75)));
}
