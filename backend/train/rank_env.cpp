#include "backend/train/rank_env.h"

#include <cctype>
#include <cstdlib>

#include "lang/diagnostics.h"

extern char** environ;

namespace loom {
namespace {

int read_int(const std::map<std::string, std::string>& env, const std::string& name, int fallback, bool required) {
  auto it = env.find(name);
  if (it == env.end()) {
    if (required)
      throw UserError(SourceRange{}, "launcher variable " + name + " is missing",
                      "set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT together, as torchrun does");
    return fallback;
  }
  char* end = nullptr;
  long v = std::strtol(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || v < 0 || v > 1'000'000)
    throw UserError(SourceRange{}, "launcher variable " + name + "='" + it->second + "' is not a non-negative integer",
                    "fix or unset it");
  return static_cast<int>(v);
}

std::string read_str(const std::map<std::string, std::string>& env, const std::string& name, const std::string& fallback) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? fallback : it->second;
}

// Slurm's SLURM_STEP_NODELIST is a compressed host list; the first host is the master.
std::string first_slurm_host(const std::string& list) {
  std::string host;
  for (size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == ',') break;
    if (c == '[') {  // node[01-04,07] -> node01
      size_t j = i + 1;
      while (j < list.size() && std::isdigit(static_cast<unsigned char>(list[j]))) host += list[j++];
      break;
    }
    host += c;
  }
  return host;
}

// Slurm's ranks per node. srun sets SLURM_NTASKS_PER_NODE only when asked for it, and
// SLURM_STEP_TASKS_PER_NODE ("2(x3)": two on each of three nodes; "4,2") always; the first
// node's count, which rank_env_from checks against the world.
int slurm_tasks_per_node(const std::map<std::string, std::string>& env, int world) {
  if (env.count("SLURM_NTASKS_PER_NODE")) return read_int(env, "SLURM_NTASKS_PER_NODE", world, false);
  std::string list = read_str(env, "SLURM_STEP_TASKS_PER_NODE", read_str(env, "SLURM_TASKS_PER_NODE", ""));
  size_t digits = 0;
  while (digits < list.size() && digits < 6 && std::isdigit(static_cast<unsigned char>(list[digits]))) ++digits;
  return digits == 0 ? world : std::stoi(list.substr(0, digits));
}

// Without MASTER_PORT, a Slurm job's ranks meet on a port of their own job, so that two jobs
// on one node do not collide on 29500: 20000 + job id mod 10000, below Linux's ephemeral ports
// (32768 on), which other connections take.
int slurm_default_port(const std::map<std::string, std::string>& env) {
  long long job = std::strtoll(read_str(env, "SLURM_JOB_ID", "9500").c_str(), nullptr, 10);
  return 20000 + static_cast<int>((job < 0 ? -job : job) % 10000);
}

}  // namespace

std::optional<RankEnv> rank_env_from(const std::map<std::string, std::string>& env) {
  RankEnv e;
  if (env.count("RANK") || env.count("WORLD_SIZE")) {
    e.source = "torchrun";
    e.rank = read_int(env, "RANK", 0, true);
    e.world = read_int(env, "WORLD_SIZE", 1, true);
    e.local_rank = read_int(env, "LOCAL_RANK", e.rank, false);
    e.local_world = read_int(env, "LOCAL_WORLD_SIZE", e.world, false);
    e.agent_store = read_str(env, "TORCHELASTIC_USE_AGENT_STORE", "") == "True";
    e.restart_count = read_int(env, "TORCHELASTIC_RESTART_COUNT", 0, false);
  } else if (env.count("SLURM_PROCID")) {
    e.source = "slurm";
    e.rank = read_int(env, "SLURM_PROCID", 0, true);
    e.world = read_int(env, "SLURM_NTASKS", 1, true);
    e.local_rank = read_int(env, "SLURM_LOCALID", 0, false);
    e.local_world = slurm_tasks_per_node(env, e.world);
    e.master_port = slurm_default_port(env);
    e.master_addr = first_slurm_host(read_str(env, "SLURM_STEP_NODELIST", read_str(env, "SLURM_NODELIST", "127.0.0.1")));
  } else if (env.count("OMPI_COMM_WORLD_RANK")) {
    e.source = "openmpi";
    e.rank = read_int(env, "OMPI_COMM_WORLD_RANK", 0, true);
    e.world = read_int(env, "OMPI_COMM_WORLD_SIZE", 1, true);
    e.local_rank = read_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, false);
    e.local_world = read_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", e.world, false);
  } else {
    return std::nullopt;
  }
  // MASTER_ADDR/MASTER_PORT, when given, win over what the scheduler implies.
  e.master_addr = read_str(env, "MASTER_ADDR", e.master_addr);
  e.master_port = read_int(env, "MASTER_PORT", e.master_port, false);
  if (e.world < 1) throw UserError(SourceRange{}, "the world size is 0", "set WORLD_SIZE (or SLURM_NTASKS) to at least 1");
  if (e.rank >= e.world)
    throw UserError(SourceRange{}, "rank " + std::to_string(e.rank) + " is not below the world size " + std::to_string(e.world),
                    "ranks are numbered 0.." + std::to_string(e.world - 1));
  if (e.local_world < 1 || e.world % e.local_world != 0 || e.local_rank >= e.local_world)
    throw UserError(SourceRange{},
                    "local rank " + std::to_string(e.local_rank) + " of " + std::to_string(e.local_world) +
                        " per node does not fit a world of " + std::to_string(e.world),
                    "every node runs the same number of ranks");
  if (e.master_port < 1 || e.master_port > 65535)
    throw UserError(SourceRange{}, "MASTER_PORT " + std::to_string(e.master_port) + " is not a TCP port", "use 1..65535");
  return e;
}

std::optional<RankEnv> rank_env_from_process() {
  std::map<std::string, std::string> env;
  for (char** p = environ; p && *p; ++p) {
    std::string kv(*p);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return rank_env_from(env);
}

std::map<std::string, std::string> torchrun_variables(const RankEnv& e) {
  return {{"RANK", std::to_string(e.rank)},
          {"WORLD_SIZE", std::to_string(e.world)},
          {"LOCAL_RANK", std::to_string(e.local_rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(e.local_world)},
          {"MASTER_ADDR", e.master_addr},
          {"MASTER_PORT", std::to_string(e.master_port)}};
}

}  // namespace loom
