#include "backend/comm/mesh_groups.h"

#include <vector>

#include "backend/comm/shard_groups.h"

namespace loom {

MeshGroups make_mesh_groups(comm::Group& world, int tp, int pp, int optim_block) {
  MeshGroups g;
  g.at = MeshLayout::of(world.size(), world.rank(), tp, pp);
  const MeshLayout& m = g.at;
  g.tp = strided_group(world, tp, 1, ir::Role::Tp);
  g.dp = strided_group(world, m.dp * tp, tp, ir::Role::Dp);
  g.pipeline = strided_group(world, world.size(), m.dp * tp, ir::Role::Pipeline);
  for (int block = 0; block < m.dp; block += optim_block) {
    std::vector<int> ranks;
    for (int s = 0; s < pp; ++s)
      for (int d = block; d < block + optim_block; ++d)
        for (int t = 0; t < tp; ++t) ranks.push_back(m.rank_at(s, d, t));
    auto group = ranks.size() > 1 ? comm::new_subgroup(world, ranks, ir::Role::Model) : nullptr;
    if (m.dp_rank / optim_block == block / optim_block) g.model = group;
  }
  for (int s = 0; s + 1 < pp; ++s)
    for (int d = 0; d < m.dp; ++d)
      for (int t = 0; t < tp; ++t) {
        auto pair = comm::new_subgroup(world, {m.rank_at(s, d, t), m.rank_at(s + 1, d, t)}, ir::Role::StagePair);
        if (!pair) continue;
        (s == m.stage ? g.next : g.previous) = pair;
      }
  return g;
}

}  // namespace loom
