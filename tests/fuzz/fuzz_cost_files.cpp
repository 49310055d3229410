// libFuzzer target over the loaders of the files the cost model reads (issue #15 §6): a cluster
// description and a profile, and the sizes both and --memory-limit are written in. Any input must
// either load or raise a loom::UserError; a crash, a sanitizer report or any other exception is a
// bug. What loads is also priced: a cluster's collectives at a few sizes inside a node and
// across its nodes, on its idle link and on its link beside compute, its compute and copies; a
// profile's collectives at a few sizes, which walks its samples, and "this machine" derived from
// it (machine_cluster, as `loom simulate --save-cluster` and `loom plan --profile` derive it) on a
// program of the profile's own ops, then priced as a cluster is. Built with -DLOOM_FUZZ=ON
// (clang); run by scripts/fuzz.sh, seeded with clusters/*.json and tests/fuzz/seeds/*.json.
#include <cstdint>
#include <string>

#include "backend/cost/analytic_cost.h"
#include "backend/cost/cluster.h"
#include "backend/cost/machine_cluster.h"
#include "backend/cost/profile.h"
#include "backend/ir/ir.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace {

void price(const loom::Cluster& c) {
  loom::Cluster beside = c;
  if (c.intra_node_beside_compute) beside.intra_node = *c.intra_node_beside_compute;
  for (int64_t bytes : {int64_t{0}, int64_t{1} << 20, int64_t{1} << 40}) {
    for (const std::string& op : loom::ring_collectives())
      for (loom::GroupSpan span : {loom::GroupSpan{c.devices_per_node, 1}, loom::GroupSpan{c.devices_per_node, c.nodes}}) {
        (void)loom::collective_seconds(c, op, bytes, span);
        (void)loom::collective_seconds(beside, op, bytes, span);
      }
    (void)loom::compute_seconds(c.device, static_cast<double>(bytes), bytes, loom::Precision::Bf16);
    (void)loom::host_copy_seconds(c, bytes);
    (void)loom::point_to_point_seconds(c, bytes, true);
  }
}

// A program of `p`'s ops, forward and backward, with FLOPs set on every other one (machine_cluster
// derives the compute rate from those and the memory rate from the rest) and a saved MiB each.
loom::ir::Program program_of(const loom::Profile& p) {
  loom::ir::Program program;
  for (size_t i = 0; i < p.ops.size(); ++i)
    for (loom::ir::Phase phase : {loom::ir::Phase::Forward, loom::ir::Phase::Backward}) {
      loom::ir::Instr in;
      in.kind = loom::ir::OpKind::Compute;
      in.phase = phase;
      in.module = p.ops[i].module;
      in.flops = i % 2 == 0 ? 1e9 : 0;
      in.activation_bytes = int64_t{1} << 20;
      program.instrs.push_back(in);
    }
  return program;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  loom::read_size(text);
  try {
    loom::Cluster c = loom::parse_cluster(text, "fuzz.json");
    (void)c.world();
    price(c);
  } catch (const loom::UserError&) {
  }
  try {
    loom::Profile p = loom::Profile::from_json(text, "fuzz.json");
    for (const loom::CollectiveProfile& c : p.collectives)
      for (int64_t bytes : {int64_t{0}, int64_t{1} << 10, int64_t{1} << 20, int64_t{1} << 40}) (void)c.predict_ms(bytes);
    // machine_cluster reads its cluster file back before returning it (what --save-cluster writes).
    price(loom::machine_cluster(p, program_of(p), /*devices=*/2, int64_t{1} << 30, "fuzz machine"));  // the seed's world
  } catch (const loom::UserError&) {
  }
  return 0;
}
