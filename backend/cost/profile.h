// A measured profile of one training step under a schedule (issue #4 §3): per compute op its
// forward and backward time and memory, per collective and process-group role its time as a
// function of bytes. Written by `loom profile`, saved in a cache keyed by everything that
// changes the figures, and read by passes. Every figure was reduced (max) across ranks before
// it was saved, so every rank holds the same profile; each rank's own op times are kept beside
// them. Torch-free.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/cost/collective_cost.h"

namespace loom {

// An op's times take, as the trace counts FLOPs and activations (op_trace.h), the work outside
// any op that follows it in forward (the attention scores after c_attn, the loss after the head)
// and whose backward precedes its backward, less the time spent waiting for collectives and
// recomputing ops in between (on CPU; on a GPU the op's own kernels only, for now).
struct OpProfile {
  std::string module;                // the traced op (module path), in forward order
  double forward_ms = 0;             // mean over the measured steps (a step sums them)
  double backward_ms = 0;            // its backward, excluding a checkpoint() recomputation
  int64_t memory_before_bytes = 0;   // in use just before its forward
  int64_t forward_peak_bytes = 0;    // the peak during its forward
  int64_t backward_before_bytes = 0; // in use just before its backward
  int64_t backward_peak_bytes = 0;   // the peak during its backward
  // Each rank's own mean times, by rank (the figures above are the slowest rank's, op by op);
  // empty for one rank and in profiles written before they were kept.
  std::vector<double> forward_ms_by_rank, backward_ms_by_rank;
  // On a GPU, the host's part of the op, the slowest rank's: the wall clock from its call to its
  // return less the waits, with the host's op-free work after it (as above). The times above are
  // its kernels', which run behind the host, so a step of short kernels waits for the host. -1:
  // not measured (a CPU, whose op times are the host's; a backward that ended on another thread).
  double forward_host_ms = -1, backward_host_ms = -1;
  // What its backward allocates beyond what it began with (input gradients, temporaries).
  int64_t backward_workspace_bytes() const { return std::max<int64_t>(0, backward_peak_bytes - backward_before_bytes); }
};

// One collective on one process-group role ("world", "params", "grad_peers", "optim_peers",
// "replicas", "optim_block"; under a mesh "tp", "dp", "model", "pipeline", and "stage_pair" for
// a pipeline's send and recv), over a sweep of sizes, in one of two regimes. On CPU the ranks'
// threads share the cores: a collective that runs while the ranks compute (a gradient reduction
// overlapping backward) waits for cores and takes up to several times what one that the ranks
// wait for at once (a tensor-parallel all-reduce, the loss's) takes. A GPU profile has one regime.
struct CollectiveProfile {
  std::string collective;  // "all_gather", "reduce_scatter", "all_reduce", "send", "recv"
  std::string group;       // the role
  int group_size = 0;
  bool beside_compute = false;  // timed while a thread per rank computed its share of a core
  std::vector<CollectiveSample> samples;  // sorted by bytes
  AlphaBeta fit;
  // What the measured steps' collectives took, as a multiple of what these sweeps price them
  // at (backend/cost/in_step_collectives.h): one figure for every collective of a one-stage
  // program; in a pipeline one for the groups inside a stage and one for those across stages;
  // 1 for the sends and receives.
  double in_step_scale = 1;

  // The sweep's time for `bytes`, times the in-step scale.
  double predict_ms(int64_t bytes) const;
};

struct Profile {
  std::string key;       // what the figures depend on (profile_key)
  std::string device;    // "cpu" or "cuda"
  int measured_steps = 0;
  double optimizer_step_ms = -1;  // the optimizer's update (mean over the measured steps); -1: not measured
  // The elements that update changed, on the rank that changed the most (its parameters or
  // their slices); 0: not recorded (a profile from before it was). A profile priced for another
  // schedule's sharding (loom plan --profile) knows from it the rate the update streamed at.
  int64_t optimizer_elements = 0;
  // The gradient norm's own work (its norm and the clipping; its all-reduce is a collective's
  // time), likewise; -1: not measured (no --clip, or a profile from before it was).
  double grad_norm_ms = -1;
  // The waits' unpacking (ir::Instr::unpack_bytes: copying members out of a collective's flat
  // buffer): the slowest rank's rate over the measured steps, and the bytes a step unpacked;
  // -1: nothing was unpacked, or on a GPU (the host sees only the copies' queueing).
  double unpack_gb_per_s = -1;
  int64_t unpack_bytes_per_step = 0;
  // The limit the measured run's memory-aware passes planned within (0: none; on a GPU by
  // default 90% of its memory): `loom simulate` and `loom explain` on this profile plan within
  // it unless told another, so that they lower the program that was measured.
  int64_t memory_limit_bytes = 0;
  // The measured steps' own wall time, the profiler's work in them included: the slowest rank's
  // median; -1: not recorded (a profile from before it was). Beside a run's step it says what
  // profiling cost the step the simulator replays (benchmarks/sim_accuracy.sh, `prof/run`).
  double measured_step_ms = -1;
  std::vector<OpProfile> ops;
  std::vector<CollectiveProfile> collectives;

  // The collective on that role in the regime asked for, else in the other; nullptr when this
  // profile has no such collective on that role.
  const CollectiveProfile* collective(const std::string& collective, const std::string& group, bool beside_compute) const;
  // How many ranks' own op times the profile holds (0: only the slowest rank's).
  int ranks_timed() const;
  // The profile with every op at rank `rank`'s own times (its memory figures stay the ranks'
  // maxima). Needs 0 <= rank < ranks_timed().
  Profile as_timed_on(int rank) const;
  std::string to_json() const;
  // Throws UserError when `text` is not a Loom profile.
  static Profile from_json(const std::string& text, const std::string& origin);
};

// A stable 64-bit hash of text (FNV-1a), for cache and database keys.
uint64_t fnv1a(const std::string& text);

// The limit to plan a program on `profile` within: `given` where one is (>= 0), else the one the
// profiled run planned within, so that the program planned is the one measured.
int64_t planning_limit(int64_t given, const Profile& profile);

// Everything the figures depend on, as one canonical line of text.
struct ProfileKeyInputs {
  std::string model;
  std::string schedule;  // the .sched file's text, and the --set overrides
  int world = 1;
  int local_world = 1;
  int64_t micro_batch = 0;
  int64_t seq = 0;
  int64_t accum = 1;
  std::string device;
  std::string precision;
  int threads = 0;
  int64_t memory_limit = -1;  // --memory-limit (0: none; -1: not given, on a GPU the device's default)
  std::string build;  // the loom that measured (its executable's size and time), so a rebuild measures afresh
};
std::string profile_key(const ProfileKeyInputs& inputs);

// Throws UserError when `profile` was measured for another model, world size, micro-batch,
// sequence length or number of micro-batches than `run` (its schedule, local world, device,
// precision and threads are not compared), naming each difference.
void check_profile_fits(const Profile& profile, const std::string& origin, const ProfileKeyInputs& run);

// Where a profile of `key` is cached: DIR/<model>-w<world>-<16 hex digits of the key's hash>.json.
std::string profile_cache_path(const std::string& dir, const std::string& model, int world, const std::string& key);
// The cache directory: $LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom/profiles, else ~/.cache/loom/profiles.
std::string default_profile_cache_dir();

// The profile saved at `path`. Throws UserError when it cannot be read or is not a profile.
Profile load_profile(const std::string& path);

// The profile cached at `path` if there is one and it was made for `key`.
std::optional<Profile> load_cached_profile(const std::string& path, const std::string& key);

}  // namespace loom
