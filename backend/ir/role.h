// A process group's role in the step (ir::Role): which ranks it joins, as the IR, the comm
// layer's groups and a profile's collective prices name it. Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace loom::ir {

// Which ranks a group joins (backend/comm/shard_groups.cpp and mesh_groups.cpp make them). A
// number, not a name: a planner prices the collectives of thousands of programs by role.
enum class Role : uint8_t {
  None,        // not a collective
  Params,      // s_p: a parameter's shards
  Grads,       // s_g / s_p: peers of a gradient shard
  Replicas,    // dp / s_p: replicas of a parameter shard
  Optim,       // s_os / s_p: peers of an optimizer-state slice
  OptimBlock,  // s_os: an optimizer-state block
  Dp,          // every data-parallel rank (under a mesh: those of one stage and tensor position)
  World,       // every rank
  Tp,          // a mesh's tensor-parallel group
  Model,       // a mesh's dp ranks of every stage and tensor position
  Pipeline,    // a mesh's stages
  StagePair,   // two neighbouring stages (send and receive)
};

// Every role a group plays (all but None), in order: what a list of the roles walks.
inline constexpr Role kGroupRoles[] = {Role::Params, Role::Grads, Role::Replicas, Role::Optim, Role::OptimBlock, Role::Dp,
                                      Role::World,  Role::Tp,    Role::Model,    Role::Pipeline, Role::StagePair};

// Its name as `loom explain`, the IR's JSON and a profile write it ("params", "optim_block", ...).
const char* role_name(Role r);
// The role `name` names (role_name's inverse); None for a name of no role.
Role role_named(const std::string& name);

// Whether, in a pipeline, a group of this role joins ranks of one stage only: the mesh's tensor-
// and data-parallel groups, and the sharding's groups, which lie inside a data-parallel group.
bool inside_one_stage(Role r);

}  // namespace loom::ir
