// loom profile: measure one training step under a schedule — each compute op's forward and
// backward time and memory, and every collective of the run's process groups over a sweep of
// sizes, fitted — on N local ranks. The profile is cached, keyed by the model, the schedule,
// the world, the shapes and the loom binary, and reused while they are unchanged.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "backend/cost/in_step_collectives.h"
#include "backend/cost/profile.h"
#include "backend/passes/pass.h"
#include "backend/train/output_paths.h"
#include "backend/train/rank_env.h"
#include "cli/commands.h"
#include "lang/diagnostics.h"
#include "lang/value.h"

namespace loom::cli {
namespace {

struct ProfileOptions {
  TrainOptions train;
  int nproc = 1;
  int64_t measured_steps = 3;
  std::string out;
  std::string cache_dir;
  bool refresh = false;
  bool json = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Which loom this is: its executable's size and last write, so that a profile cached by an
// earlier build (whose profiler or executor may time differently) is measured again.
std::string this_build() {
  std::error_code error;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "";
  auto size = std::filesystem::file_size(exe, error);
  auto written = std::filesystem::last_write_time(exe, error);
  if (error) return "";
  std::ostringstream s;
  s << std::hex << fnv1a(exe.string() + " " + std::to_string(size) + " " + std::to_string(written.time_since_epoch().count()));
  return s.str();
}

// The figures depend on the batch the ranks train: the schedule's batch() where it sets one.
std::string key_of(const ProfileOptions& o) {
  TrainOptions trained = with_schedule_batch(o.train, o.nproc, o.nproc);
  ProfileKeyInputs k;
  k.model = o.train.model;
  k.schedule = o.train.schedule_file.empty() ? "" : read_file(o.train.schedule_file);
  for (auto& set : o.train.sets) k.schedule += "\n--set " + set;
  k.world = o.nproc;
  k.local_world = o.nproc;
  k.micro_batch = trained.micro_batch;
  k.seq = o.train.seq;
  k.accum = trained.accum;
  std::string device = resolved_device(o.train);
  bool cuda = device == "cuda";
  k.device = device + " backend=" + o.train.backend + " reduce=" + o.train.reduce_dtype;
  k.precision = cuda ? o.train.precision : "fp32";
  k.threads = resolved_threads(o.train, o.nproc);
  // Another limit plans another program: the one the run plans within. On a CPU, which has no
  // device to fill, none given is none, as 0 is (one profile for both); on a GPU none given is
  // 90% of the device, which only the run finds, so the key keeps it as given.
  k.memory_limit = cuda ? o.train.memory_limit : MemoryPlanning::limit_or_default(o.train.memory_limit, 0);
  k.build = this_build();
  return profile_key(k);
}

std::string fixed(double x, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << x;
  return s.str();
}

void print_profile(const Profile& p, std::ostream& out) {
  out << "ops (" << p.ops.size() << ", mean over " << p.measured_steps << " measured steps, max over ranks):\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-28s %10s %10s %12s %12s %12s\n", "module", "fwd ms", "bwd ms", "mem before", "fwd peak",
                "bwd peak");
  out << line;
  double forward = 0, backward = 0;
  for (auto& op : p.ops) {
    std::snprintf(line, sizeof line, "  %-28s %10s %10s %12s %12s %12s\n", op.module.c_str(), fixed(op.forward_ms, 3).c_str(),
                  fixed(op.backward_ms, 3).c_str(), format_size(op.memory_before_bytes).c_str(),
                  format_size(op.forward_peak_bytes).c_str(), format_size(op.backward_peak_bytes).c_str());
    out << line;
    forward += op.forward_ms, backward += op.backward_ms;
  }
  out << "  total: forward " << fixed(forward, 2) << " ms, backward " << fixed(backward, 2) << " ms\n";
  auto measured = [](double ms) { return ms >= 0 ? fixed(ms, 2) + " ms" : std::string("not measured"); };
  out << "step tail: optimizer step " << measured(p.optimizer_step_ms);
  if (p.optimizer_elements > 0) out << " (" << p.optimizer_elements << " elements on the rank updating most)";
  out << ", gradient norm's own work " << measured(p.grad_norm_ms) << " (without its all-reduce)\n";
  out << "measured steps: " << measured(p.measured_step_ms) << " each (the slowest rank's median, this profiler's work included); "
      << "the passes planned within " << (p.memory_limit_bytes > 0 ? format_size(p.memory_limit_bytes) : std::string("no memory limit"))
      << "\n";
  out << "unpacking at waits (members copied out of a collective's buffer): ";
  if (p.device == "cuda") out << "not measured (on a GPU the host sees only the copies' queueing)\n";
  else if (p.unpack_gb_per_s > 0) out << format_size(p.unpack_bytes_per_step) << " a step at " << fixed(p.unpack_gb_per_s, 2) << " GB/s\n";
  else out << "none\n";
  if (p.collectives.empty()) return;
  out << "collectives (alpha-beta fit; time at 1 MiB from the table; timed on idle cores, and beside the ranks' compute):\n";
  std::snprintf(line, sizeof line, "  %-12s %5s %-15s %-15s %10s %12s %12s\n", "group", "size", "collective", "timed", "alpha us",
                "GB/s", "1 MiB ms");
  out << line;
  for (auto& c : p.collectives) {
    double gbps = c.fit.beta_ms_per_byte > 0 ? 1e-6 / c.fit.beta_ms_per_byte : 0;
    std::snprintf(line, sizeof line, "  %-12s %5d %-15s %-15s %10s %12s %12s\n", c.group.c_str(), c.group_size, c.collective.c_str(),
                  c.beside_compute ? "beside compute" : "idle", fixed(c.fit.alpha_ms * 1000, 1).c_str(), fixed(gbps, 3).c_str(),
                  fixed(c.predict_ms(1 << 20), 3).c_str());
    out << line;
  }
  // One scale for the collectives the steps measured, every one but a pipeline's transfers; a
  // pipeline's groups inside a stage and across stages have one each (in_step_collectives.h).
  bool pipeline = std::any_of(p.collectives.begin(), p.collectives.end(), [](const CollectiveProfile& c) { return c.group == "stage_pair"; });
  std::optional<double> inside = applied_in_step_scale(p, pipeline ? InStepGroups::InsideStage : InStepGroups::All);
  std::optional<double> across = pipeline ? applied_in_step_scale(p, InStepGroups::AcrossStages) : std::nullopt;
  out << "  in the measured steps the collectives kept the collective stream busy ";
  if (inside) out << fixed(*inside, 2) << "x" << (pipeline ? " (groups inside a stage)" : "") << (across ? " and " : "");
  if (across) out << fixed(*across, 2) << "x (groups across stages, the least over the ranks)";
  out << " as long as these sweeps price them (in_step_scale: the 1 MiB column and every prediction include it)\n";
  bool scaled = inside.value_or(1) != 1 || across.value_or(1) != 1;
  if (p.measured_steps < 3 && scaled)
    out << "  (from " << p.measured_steps << " measured step" << (p.measured_steps == 1 ? "" : "s")
        << ": one in which a rank waited for a late peer would set it; --steps 3 or more take the median)\n";
}

int profile(ProfileOptions o) {
  std::string key = key_of(o);
  std::string cache_dir = o.cache_dir.empty() ? default_profile_cache_dir() : o.cache_dir;
  std::string path = profile_cache_path(cache_dir, o.train.model, o.nproc, key);
  o.train.profile_out = path;
  o.train.profile_key = key;
  o.train.steps = o.train.profile_warmup + o.measured_steps;
  if (std::optional<int> rc = train_if_rank(o.train)) return *rc;  // one rank of the profiling run

  std::optional<Profile> cached = o.refresh ? std::nullopt : load_cached_profile(path, key);
  if (cached) {
    std::cerr << "loom profile: reusing " << path << " (same model, schedule, world, shapes, memory limit and loom binary; --refresh measures again)\n";
  } else {
    try {
      prepare_output_directory(cache_dir, "--cache-dir");
      if (!o.out.empty()) check_output_file(o.out, "--out");
      validate_run(o.train, o.nproc, o.nproc);
    } catch (const UserError& e) {
      std::cerr << render(e.diagnostic(), nullptr);
      return kUserError;
    }
    if (int rc = launch(relaunch_as_ranks(o.nproc), std::cerr)) return rc;
    cached = load_cached_profile(path, key);
    if (!cached) {
      std::cerr << "error: the profiling run finished but wrote no profile at " << path << "\n";
      return kUserError;
    }
    std::cerr << "loom profile: saved " << path << "\n";
  }
  try {
    if (!o.out.empty()) write_whole_file(o.out, cached->to_json());
  } catch (const WriteError& e) {
    UserError error(SourceRange{}, std::string("--out: ") + e.what(), "free space, or choose another file; the profile stays in " + path);
    std::cerr << render(error.diagnostic(), nullptr);
    return kUserError;
  }
  if (o.json) std::cout << cached->to_json();
  else print_profile(*cached, std::cout);
  return kOk;
}

}  // namespace

void add_profile(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<ProfileOptions>();
  TrainOptions& t = o->train;
  CLI::App* c = app.add_subcommand(
      "profile", "Measure a step under a schedule: per-op time and memory, collective costs (cached; see docs/backend.md)");
  add_step_options(c, t);
  c->add_option("--nproc", o->nproc, "ranks to start on this node")->check(at_least(1));
  c->add_option("--steps", o->measured_steps, "measured steps (each op's times are the mean over them, the measured step their median; on a shared CPU measure more)")->check(at_least(1));
  c->add_option("--warmup-steps", t.profile_warmup, "unmeasured steps first")->check(at_least(0));
  c->add_option("--out", o->out, "also write the profile (JSON) to this file");
  c->add_option("--cache-dir", o->cache_dir, "profile cache (default: $LOOM_CACHE_DIR, else ~/.cache/loom/profiles)");
  c->add_flag("--refresh", o->refresh, "measure again even when a cached profile matches");
  c->add_flag("--json", o->json, "print the profile as JSON instead of tables");
  c->callback([&run, o] { run = [o] { return profile(*o); }; });
}

}  // namespace loom::cli
