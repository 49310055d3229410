#include "backend/comm/shard_groups.h"

#include <string>
#include <vector>

#include "lang/diagnostics.h"

namespace loom {

std::shared_ptr<comm::Group> strided_group(comm::Group& world, int block, int stride, ir::Role role) {
  if (block / stride <= 1) return nullptr;
  std::shared_ptr<comm::Group> mine;
  for (int start = 0; start < world.size(); start += block)
    for (int offset = 0; offset < stride; ++offset) {
      std::vector<int> ranks;
      for (int r = start + offset; r < start + block; r += stride) ranks.push_back(r);
      if (auto g = comm::new_subgroup(world, ranks, role)) mine = g;
    }
  return mine;
}

ShardGroups make_shard_groups(comm::Group& world, const ir::Sharding& f, int tp) {
  if (world.size() % (f.dp * tp) || f.params < 1 || f.grads % f.params || f.optim % f.grads || f.dp % f.optim)
    throw InternalError("make_shard_groups: factors (" + std::to_string(f.params) + ", " + std::to_string(f.grads) + ", " +
                        std::to_string(f.optim) + ") at dp " + std::to_string(f.dp) + " do not divide each other");
  ShardGroups g;
  g.factors = f;
  // Blocks of k dp ranks are blocks of k * tp world ranks (tp ranks adjacent, stages outermost).
  g.params = strided_group(world, f.params * tp, tp, ir::Role::Params);
  g.replicas = strided_group(world, f.dp * tp, f.params * tp, ir::Role::Replicas);
  g.grad_peers = strided_group(world, f.grads * tp, f.params * tp, ir::Role::Grads);
  g.optim_peers = strided_group(world, f.optim * tp, f.params * tp, ir::Role::Optim);
  g.optim_block = strided_group(world, f.optim * tp, tp, ir::Role::OptimBlock);
  g.grad_slot = g.grad_peers ? g.grad_peers->rank() : 0;
  g.optim_slot = g.optim_peers ? g.optim_peers->rank() : 0;
  return g;
}

}  // namespace loom
