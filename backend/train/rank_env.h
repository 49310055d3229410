// Who this process is in a distributed run, read from the variables that torchrun,
// srun (Slurm) or mpirun (Open MPI) set; torch-free.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace loom {

struct RankEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source;  // "torchrun", "slurm", "openmpi": which variables were found
  // torchrun's agent already serves the store at master_addr:master_port
  // (TORCHELASTIC_USE_AGENT_STORE=True, its static rendezvous): every rank joins it as a
  // client, under the prefix of this restart (TORCHELASTIC_RESTART_COUNT), as torch does.
  bool agent_store = false;
  int restart_count = 0;
};

// The rank environment, or nullopt when no launcher variables are set (so this
// process should act as the launcher itself). Inconsistent or partial variables are
// a UserError naming the variable. `env` defaults to the process environment.
std::optional<RankEnv> rank_env_from(const std::map<std::string, std::string>& env);
std::optional<RankEnv> rank_env_from_process();

// The variables torchrun sets for `e`, which Loom's own launcher sets for its workers.
std::map<std::string, std::string> torchrun_variables(const RankEnv& e);

}  // namespace loom
