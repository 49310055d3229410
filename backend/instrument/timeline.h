// The executed timeline of a run, in Chrome trace format (viewable in Perfetto): steps
// (category "step"), phases ("phase"), module calls and the waits for collectives ("wait") on
// one track, collectives on another (from launch to their transfer's completion on gloo, a local
// finish such as reduce_scatter's sum then lying in the wait; to the wait that completed them on
// NCCL, whose futures complete when queued, and for gloo's sends and receives, which have no
// future), one process per rank. `loom report` reads it back
// (backend/report/step_shares.h). Torch-free; off unless enabled.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace loom::timeline {

// Starts recording on this process (rank `rank`); everything before is not recorded.
void enable(int rank);
bool enabled();
// Microseconds since enable().
double now_us();

enum class Track { Compute = 0, Comm = 1 };
// Records a finished span.
void record(const std::string& name, const char* category, Track track, double start_us, double end_us);

// Records the span of its scope on the compute track.
class Span {
 public:
  Span(std::string name, const char* category);
  ~Span();

 private:
  std::string name_;
  const char* category_;
  double start_;
  bool active_;
};

// This rank's events, as JSON lines. (The caller writes them: a failed write is its error.)
std::string rank_events();
// The per-rank files `prefix.rank<N>` for N < world (rank_events() of each), merged into one
// Chrome trace.
std::string merged_trace(const std::string& prefix, int world);
// Removes those files (once the merged trace is written: until then they are the only copy).
void remove_rank_files(const std::string& prefix, int world);

}  // namespace loom::timeline
