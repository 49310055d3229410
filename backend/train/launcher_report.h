// What a failing rank tells a launcher that is not Loom's own (torchrun, mpirun, srun, or ranks
// started by hand with torchrun's variables) beyond its exit code and its stderr. torchrun names
// the failure with the earliest time in its error files (else the poll that saw the exit) as the
// root cause, and mpirun the first rank to exit; srun reports each task as it exits. Loom's own
// launcher tells cause from consequence by the ranks' messages instead (launcher.h), so under it a
// rank only prints.
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

// Under another launcher, where torchrun asks for one, writes the error file, whole or not at
// all (torchrun's agent fails on a damaged one), stamped with when the rank will exit: now, or
// for a consequence after kConsequenceExitDelay, so that a poll seeing both exits still orders
// the cause first. Best effort: a file that cannot be written is left out. Call before closing
// the rank's connections, so the cause's time is not later than it need be.
void write_launcher_error_file(const RankFailure& failure);

// Under another launcher, a consequence waits kConsequenceExitDelay. Call after closing the
// rank's connections (a peer still in a collective with this rank then fails at once).
void delay_consequence_exit(const RankFailure& failure);

}  // namespace loom
