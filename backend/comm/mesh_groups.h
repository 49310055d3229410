// The process groups of a mesh (mesh_layout.h): this rank's tensor-parallel group, its
// data-parallel replicas, its model (the tp x pp ranks of one replica), its pipeline, and the
// pairs with the neighbouring stages that activations and their gradients cross. A group of
// one rank is nullptr.
#pragma once

#include <memory>

#include "backend/comm/communicator.h"
#include "backend/lower/mesh_layout.h"

namespace loom {

struct MeshGroups {
  MeshLayout at;
  std::shared_ptr<comm::Group> tp;        // same stage and replica
  std::shared_ptr<comm::Group> dp;        // same stage and tp rank: gradient averaging
  std::shared_ptr<comm::Group> model;     // same replica (optimizer block): every gradient element once (norm)
  std::shared_ptr<comm::Group> pipeline;  // same replica and tp rank: parameters outside the stages
  std::shared_ptr<comm::Group> previous;  // {stage - 1, this rank}: the previous stage is group rank 0
  std::shared_ptr<comm::Group> next;      // {this rank, stage + 1}: this rank is group rank 0
};

// Every world rank calls this with the same degrees (c10d creates subgroups collectively).
// `optim_block`: with optimizer states sharded over blocks of s_os data-parallel ranks, the
// model group spans a block, whose ranks hold every gradient element once between them.
MeshGroups make_mesh_groups(comm::Group& world, int tp, int pp, int optim_block = 1);

}  // namespace loom
