// What a failing rank tells a launcher that is not Loom's own (torchrun, mpirun, srun) beyond
// its exit code and its stderr. These launchers name the rank that failed first as the cause:
// torchrun by its error file's time, or else by the poll that saw the exit; mpirun by the first
// exit. Loom's own launcher tells cause from consequence by the ranks' messages instead
// (launcher.h), so under it a rank only prints.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace loom {

// How a rank failed: what it printed, and whether it is a consequence (its collective broke
// because another rank stopped or stalled: comm::CommError).
struct RankFailure {
  std::string said;
  bool consequence = false;
};

// How long a consequence waits before it exits under another launcher, so that the rank whose
// own error it is exits first: longer than torchrun's monitor interval (5 s by default), so its
// agent sees the cause's exit alone and stops the others itself; mpirun stops them at once.
constexpr std::chrono::seconds kConsequenceExitDelay{10};

// torchrun's error file for a rank (what its agent reads from TORCHELASTIC_ERROR_FILE): the
// message its failure summary shows, and the time it orders failures by.
std::string elastic_error_file_json(const std::string& said, int64_t unix_seconds);

// Under a launcher that is not Loom's: writes torchrun's error file where it asks for one, then,
// for a consequence, waits kConsequenceExitDelay. Call after printing the error and closing the
// rank's connections (a peer still in a collective with this rank then fails at once).
void report_to_launcher(const RankFailure& failure);

}  // namespace loom
