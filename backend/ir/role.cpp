#include "backend/ir/role.h"

namespace loom::ir {

const char* role_name(Role r) {
  switch (r) {
    case Role::None: return "";
    case Role::Params: return "params";
    case Role::Grads: return "grads";
    case Role::Replicas: return "replicas";
    case Role::Optim: return "optim";
    case Role::OptimBlock: return "optim_block";
    case Role::Dp: return "dp";
    case Role::World: return "world";
    case Role::Tp: return "tp";
    case Role::Model: return "model";
    case Role::Pipeline: return "pipeline";
    case Role::StagePair: return "stage_pair";
  }
  return "?";
}

Role role_named(const std::string& name) {
  for (Role r : kGroupRoles)
    if (name == role_name(r)) return r;
  return Role::None;
}

bool inside_one_stage(Role r) {
  switch (r) {
    case Role::Params:
    case Role::Grads:
    case Role::Replicas:
    case Role::Optim:
    case Role::OptimBlock:
    case Role::Dp:
    case Role::Tp: return true;
    case Role::None:
    case Role::World:
    case Role::Model:
    case Role::Pipeline:
    case Role::StagePair: return false;
  }
  return false;
}

}  // namespace loom::ir
