// Where a rank sits in sch.mesh(tp=, pp=): rank = (stage * dp + dp_rank) * tp + tp_rank.
// Tensor-parallel ranks are adjacent (they talk in every layer), data-parallel replicas
// next, pipeline stages outermost, as in Megatron-LM. Torch-free.
#pragma once

namespace loom {

struct MeshLayout {
  int tp = 1, pp = 1, dp = 1;
  int tp_rank = 0, dp_rank = 0, stage = 0;

  static MeshLayout of(int world, int rank, int tp, int pp) {
    MeshLayout m;
    m.tp = tp;
    m.pp = pp;
    m.dp = world / (tp * pp);
    m.tp_rank = rank % tp;
    m.dp_rank = rank / tp % m.dp;
    m.stage = rank / (tp * m.dp);
    return m;
  }
  int rank_at(int stage_, int dp_rank_, int tp_rank_) const { return (stage_ * dp + dp_rank_) * tp + tp_rank_; }
  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage == pp - 1; }
};

}  // namespace loom
