#include "backend/passes/bucket_data_parallel.h"

#include <map>
#include <set>

#include "backend/passes/gradient_buckets.h"

namespace loom::passes {
namespace {

// The index of the bucket() module holding every parameter of `in`, or -1.
int bucket_module_of(const ir::Program& p, const ir::Instr& in, const PassInputs& inputs) {
  if (in.params.empty()) return -1;
  int module = loom::bucket_module_of(p.params[in.params[0]].name, inputs.buckets);
  for (int q : in.params)
    if (loom::bucket_module_of(p.params[q].name, inputs.buckets) != module) return -1;
  return module;
}

}  // namespace

bool bucket_data_parallel(ir::Program& p, const PassInputs& inputs) {
  if (p.sharding.dp <= 1 || p.sharding.optim > 1) return false;
  // The data-parallel reductions in the order backward completes them; one of a bucket()
  // module's parameters (the bucket pass merged them) stays a bucket of its own.
  std::vector<size_t> at;
  std::vector<int64_t> bytes;
  std::vector<int> declared;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const ir::Instr& in = p.instrs[i];
    if (in.kind != ir::OpKind::AllReduce || in.phase != ir::Phase::Backward || in.group.role != ir::Role::Dp) continue;
    at.push_back(i);
    bytes.push_back(in.bytes);
    declared.push_back(bucket_module_of(p, in, inputs));
  }
  std::vector<std::vector<size_t>> buckets = plan_gradient_buckets(bytes, declared, inputs.data_parallel_bucket_bytes);
  if (buckets.size() == at.size()) return false;
  std::map<size_t, ir::Instr> placed;  // instruction index -> the bucket launched there
  std::map<int, int> handle_of;        // a member's old handle -> its bucket's
  std::set<size_t> merged_away;
  for (const std::vector<size_t>& b : buckets) {
    ir::Instr bucket = p.instrs[at[b.back()]];
    bucket.params.clear();
    bucket.bytes = 0;
    bucket.handle = p.new_handle();
    for (size_t k : b) {
      const ir::Instr& member = p.instrs[at[k]];
      bucket.params.insert(bucket.params.end(), member.params.begin(), member.params.end());
      bucket.bytes += member.bytes;
      handle_of[member.handle] = bucket.handle;
      merged_away.insert(at[k]);
    }
    placed[at[b.back()]] = bucket;
  }
  std::vector<ir::Instr> out;
  std::set<int> waited;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    ir::Instr in = p.instrs[i];
    if (placed.count(i)) {
      out.push_back(placed[i]);
      continue;
    }
    if (merged_away.count(i)) continue;
    if (in.kind == ir::OpKind::Wait && handle_of.count(in.handle)) {
      in.handle = handle_of[in.handle];
      if (!waited.insert(in.handle).second) continue;  // one wait per bucket
    }
    out.push_back(in);
  }
  p.instrs = std::move(out);
  return true;
}

}  // namespace loom::passes
