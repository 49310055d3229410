// The process groups of a Lins sharding (lins.txt §IV-B/C, Fig. 4): parameter groups of s_p
// consecutive ranks (a node is filled first, Eq. 7), and, among the ranks that hold the same
// parameter shard, the gradient and optimizer-state subgroups inside blocks of s_g and s_os
// consecutive ranks. A group of one rank is nullptr: it needs no collective.
#pragma once

#include <memory>

#include "backend/comm/communicator.h"
#include "backend/ir/ir.h"

namespace loom {

struct ShardGroups {
  ir::Sharding factors;
  std::shared_ptr<comm::Group> params;       // s_p consecutive ranks: all-gather, reduce-scatter
  std::shared_ptr<comm::Group> replicas;     // the dp / s_p ranks holding this rank's parameter shard
  std::shared_ptr<comm::Group> grad_peers;   // s_g / s_p of them inside this s_g block (select & drop per micro-batch)
  std::shared_ptr<comm::Group> optim_peers;  // s_os / s_p of them inside this s_os block (spread updated parameters)
  std::shared_ptr<comm::Group> optim_block;  // s_os consecutive ranks: together they hold every optimizer state once
  int grad_slot = 0;   // which 1/(s_g/s_p) of the parameter shard this rank keeps gradients for
  int optim_slot = 0;  // which 1/(s_os/s_p) of the parameter shard this rank updates
};

// Every world rank calls this with the same factors: c10d needs every subgroup created by
// every rank in the same order. Factors must divide each other (s_p | s_g | s_os | dp). Under
// a mesh (mesh_layout.h) the sharding runs inside each data-parallel group: the dp ranks of one
// stage and tensor-parallel rank, `tp` world ranks apart.
ShardGroups make_shard_groups(comm::Group& world, const ir::Sharding& factors, int tp = 1);

// This rank's group for `role` among blocks of `block` consecutive ranks, members `stride`
// apart (stride 1: consecutive ranks). nullptr when the group would hold one rank.
std::shared_ptr<comm::Group> strided_group(comm::Group& world, int block, int stride, ir::Role role);

}  // namespace loom
