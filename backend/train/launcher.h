// The local launcher behind `loom run --nproc N`: starts N worker processes (forks of this
// one, or a program exec'd) with the variables torchrun sets, forwards their stderr prefixed by
// rank, and stops them all when one fails or on Ctrl-C. Torch-free.
#pragma once

#include <chrono>
#include <iosfwd>
#include <string>
#include <vector>

namespace loom {

struct LaunchSpec {
  std::vector<std::string> argv;  // the worker command; argv[0] is the executable
  int nproc = 1;                  // ranks on this node
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;            // 0: pick a free port (single node only)
  std::chrono::seconds grace{5};  // how long stopped workers get before SIGKILL
  // argv is this program's command line (loom_executable()): a worker is then a fork of this
  // process that runs it, where can_fork_program() says one can be (loom_executable.h).
  bool fork_program = false;
};

// Set in each worker's environment: Loom's launcher has already validated the run and shown
// what the schedule prints, so the ranks need not again.
inline constexpr const char* kLaunchedByLoom = "LOOM_LAUNCHER";

// What a rank's hint says where its collective broke because another rank stopped (trainer.cpp):
// the launcher reports the rank that failed on its own instead.
inline constexpr const char* kAnotherRankStopped = "another rank stopped or stalled";

// Runs the workers to completion. Returns 0 when all succeed; otherwise stops the
// others and returns 1 (130 after Ctrl-C), having written to `err` which rank failed
// and its last error lines.
int launch(const LaunchSpec& spec, std::ostream& err);

// A TCP port that was free a moment ago, from below the ephemeral range where it can be.
int pick_free_port();

}  // namespace loom
