// loom simulate: replay a schedule's step programs under a cost model (a cluster file or a
// measured profile) and report the step time, compute, exposed communication and peak memory,
// without a GPU or a training run (issue #15 §3).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/data_dirs.h"
#include "backend/cost/instruction_cost.h"
#include "backend/cost/machine_cluster.h"
#include "backend/instrument/model_trace.h"
#include "backend/lower/lower_schedule.h"
#include "backend/lower/lower_step.h"
#include "backend/passes/profile_planning.h"
#include "backend/sim/memory_calibration.h"
#include "backend/sim/memory_plot.h"
#include "backend/sim/profile_simulation.h"
#include "backend/sim/simulator.h"
#include "backend/train/output_paths.h"
#include "cli/workflow.h"
#include "lang/value.h"
#include "verifier/schedule_rules.h"

namespace loom::cli {

std::string communication_text(const std::map<std::string, double>& busy_s) {
  std::vector<std::pair<double, std::string>> kinds;
  for (const auto& [kind, s] : busy_s) kinds.emplace_back(-s, kind);
  std::sort(kinds.begin(), kinds.end());
  std::string text;
  char ms[32];
  for (const auto& [minus_s, kind] : kinds) {
    double value = -minus_s * 1e3;  // three figures or so, without an exponent: 1330, 76.4, 0.52
    std::snprintf(ms, sizeof ms, value >= 100 ? " %.0f" : value >= 1 ? " %.1f" : " %.2g", value);
    text += (text.empty() ? "" : ", ") + kind + ms;
  }
  return text.empty() ? "none" : text;
}

namespace {

// The cluster --cluster names (none for a profile), and the ranks per node the run has: the
// schedule is planned and priced for the same nodes.
std::optional<Cluster> chosen_cluster(const SimulateOptions& o, int& local_world) {
  local_world = o.local_world;
  if (o.cluster.empty()) return std::nullopt;
  Cluster cluster = with_nodes(load_cluster(o.cluster, cluster_dirs()), o.nodes);
  local_world = run_ranks_per_node(cluster, o.nproc, "--nproc", local_world, "--nodes");
  return cluster;
}

// The run a profile must have measured to price this one (its schedule is not compared).
ProfileKeyInputs profiled_run(const SimulateOptions& o) { return {o.model, "", o.nproc, 0, o.micro_batch, o.seq, o.accum}; }

// The profile --profile names, checked against the run it prices (none on a cluster).
std::optional<Profile> chosen_profile(const SimulateOptions& o) {
  if (o.profile.empty()) return std::nullopt;
  Profile profile = load_profile(o.profile);
  check_profile_fits(profile, o.profile, profiled_run(o));
  return profile;
}

// The step on a profile, with the memory the profile measured (`calibration`, by stage; identity
// off a GPU): each rank at its own op times where the profile has them and the step allows,
// unless --representative (profile_simulation.h).
SimResult simulate_profiled(const SimulateOptions& o, const Profile& profile, const std::vector<ir::Program>& stages,
                            const std::vector<MemoryCalibration>& calibration) {
  bool each_rank = !o.representative && each_rank_simulable(stages, profile);
  return simulate_on_profile(stages, profile, o.profile, calibration, each_rank);
}

// What the memory-aware passes plan with. On a cluster: the limit (by default its device's, as
// `loom run` on a GPU takes) and its instruction times and memory. On a profile, as `loom run`
// plans: the limit alone, by default the one the profiled run planned within, so the simulated
// program is the one that was measured (--replanned then plans again on the profile:
// simulate_planned).
MemoryPlanning memory_planning(const SimulateOptions& o, const std::shared_ptr<ClusterCost>& cluster_cost,
                               const std::optional<Profile>& profile) {
  MemoryPlanning m;
  if (cluster_cost) {
    m.limit = MemoryPlanning::limit_or_default(o.memory_limit, cluster_cost->cluster().device.memory_bytes);
    m.plan_with(cluster_cost);
  } else {
    m.limit = planning_limit(o.memory_limit, *profile);  // check_cost_model: a profile where no cluster
  }
  return m;
}

// Where the limit the passes plan within comes from, for a message.
std::string limit_origin(const SimulateOptions& o, const ClusterCost* cluster_cost, int64_t limit) {
  if (o.memory_limit >= 0) return "--memory-limit " + format_size(limit);
  if (!cluster_cost) return format_size(limit) + ", the limit the profiled run planned within (--memory-limit sets another limit)";
  const Cluster& c = cluster_cost->cluster();
  return format_size(limit) + ", 90% of cluster " + c.name + "'s " + format_size(c.device.memory_bytes) +
         " devices (--memory-limit sets another limit)";
}

// --save-cluster: this machine as a cluster file, from the profile the simulation was priced
// on (one node of the profiled ranks, each with an equal share of the physical memory).
void save_machine_cluster(const SimulateOptions& o, const std::optional<Profile>& profile, const ir::Program& program) {
  if (!profile)
    throw UserError(SourceRange{}, "--save-cluster derives this machine from a profile; this run is priced on a cluster",
                    "give --profile FILE instead of --cluster");
  std::string name = std::filesystem::path(o.save_cluster).stem().string();
  note_profile_beside_collectives(*profile, o.profile, profiled_run(o), "loom simulate");
  write_whole_file(o.save_cluster, cluster_json(machine_cluster(*profile, program, o.nproc, machine_memory_per_rank(o.nproc), name)));
}

// What a simulation found, for the report.
struct Simulation {
  RuntimePlan plan;
  std::vector<ir::Program> stages;
  SimResult result;
  std::string priced_by;  // "cluster NAME" or "profile FILE"
  std::optional<Profile> profile;  // the one --profile names (none on a cluster)
  double tokens_per_s_per_rank = 0;
  std::vector<MemoryCalibration> memory_calibration;  // by stage, from a GPU profile (else identity or none)
  bool host_timed = false;  // a GPU profile's ops have host parts: kernels can wait for the host
  int64_t memory_limit = 0;  // what the passes planned within (0: none)
  std::string memory_limit_from;  // "--memory-limit 600.0 MiB", or the cluster device's share
};

void print_report(const SimulateOptions& o, const Simulation& s) {
  const RuntimePlan& plan = s.plan;
  const SimResult& r = s.result;
  const std::string& priced_by = s.priced_by;
  const std::vector<MemoryCalibration>& calibration = s.memory_calibration;
  std::printf("loom simulate: %s at %d ranks (tp %d, pp %d, dp %d), %s, %lld micro-batch(es) of %lld x %lld tokens per rank\n",
              o.model.c_str(), o.nproc, plan.tp, plan.pp, o.nproc / (plan.tp * plan.pp), priced_by.c_str(),
              static_cast<long long>(o.accum), static_cast<long long>(o.micro_batch), static_cast<long long>(o.seq));
  std::printf("  step            %10.3f ms  (stage %d ends last)\n", r.step_s * 1e3, r.critical_stage);
  std::printf("  compute         %10.3f ms\n", r.compute_s * 1e3);
  std::printf("  exposed comm    %10.3f ms  (communication, copies and waits not hidden by compute%s)\n", r.exposed_comm_s * 1e3,
              s.host_timed ? "; on a GPU also the kernels waiting for the host" : "");
  std::printf("  peak memory     %10s     on stage %d, at instruction %s\n", format_size(r.peak_bytes).c_str(), r.peak_stage,
              s.stages[static_cast<size_t>(r.peak_stage)].instruction_line(r.peak_instr).c_str());
  std::printf("  tokens/s/rank   %10.0f\n", s.tokens_per_s_per_rank);
  std::string ends = r.ranks_simulated > 1 ? "rank " + std::to_string(r.critical_rank) : "stage " + std::to_string(r.critical_stage);
  std::printf("  communication   %s  (ms each kind kept its stream busy on %s, where the step ends; hidden by compute or not)\n",
              communication_text(r.comm_busy_s).c_str(), ends.c_str());
  if (r.ranks_simulated > 1)
    std::printf("  each of the %d ranks simulated at its own measured op times (the step ends with rank %d)\n",
                r.ranks_simulated, r.critical_rank);
  if (s.profile && s.profile->measured_step_ms >= 0)
    std::printf("  profiled step   %10.3f ms  (what the profiled run's measured steps took, its profiler's work included: the "
                "slowest rank's median)\n",
                s.profile->measured_step_ms);
  for (size_t stage = 0; stage < calibration.size(); ++stage) {
    const MemoryCalibration& c = calibration[stage];
    if (c.activation_scale == 1 && c.outside_bytes == 0) continue;
    std::printf("  stage %zu's memory as the GPU profile measured it: activations x%.2f of the traced fp32 bytes, %s held outside the model\n",
                stage, c.activation_scale, format_size(c.outside_bytes).c_str());
  }
}

// `sch` lowered and replayed under the cost model `o` names; `o` takes the schedule's batch().
Simulation simulate_planned(const Schedule& sch, SimulateOptions& o, std::optional<Cluster> cluster, int local_world) {
  Simulation s;
  s.priced_by = cluster ? "cluster " + cluster->name : "profile " + o.profile;
  s.plan = lower_schedule(sch);
  o.micro_batch = s.plan.micro_batch_or(o.micro_batch);
  o.accum = s.plan.accum_or(o.accum);
  std::shared_ptr<ClusterCost> cluster_cost;
  if (cluster)
    cluster_cost = std::make_shared<ClusterCost>(std::move(*cluster), o.precision == "fp32" ? Precision::Fp32 : Precision::Bf16, local_world);
  std::optional<Profile>& profile = s.profile = chosen_profile(o);
  StepOptions step_options;
  step_options.grad_norm = o.clip > 0;
  step_options.accum = o.accum;
  step_options.memory = memory_planning(o, cluster_cost, profile);
  s.memory_limit = step_options.memory.limit;
  s.memory_limit_from = limit_origin(o, cluster_cost.get(), s.memory_limit);
  ir::OpTrace trace = trace_model(o.model, {o.micro_batch, o.seq}, s.plan.replacements);
  s.stages = lower_stage_programs(s.plan, trace, o.nproc, step_options);
  // The memory the profile measured of the programs the run starts with, which the programs the
  // passes plan from it (--replanned) take too, as a run's re-plan (--replan-at) plans and predicts.
  if (o.replanned) {
    s.memory_calibration = plan_on_profile(step_options.memory, *profile, s.stages);
    s.stages = lower_stage_programs(s.plan, trace, o.nproc, step_options);
  } else if (profile) {
    s.memory_calibration = memory::measured_calibrations(s.stages, *profile, step_options.memory.state_bytes);
  }
  s.result = cluster_cost ? simulate(s.stages, *cluster_cost) : simulate_profiled(o, *profile, s.stages, s.memory_calibration);
  if (profile)
    for (const OpProfile& op : profile->ops) s.host_timed = s.host_timed || op.forward_host_ms >= 0 || op.backward_host_ms >= 0;
  // A replica's tokens are shared by its tp x pp ranks.
  double tokens_per_rank = static_cast<double>(o.micro_batch * o.seq * o.accum) / (s.plan.tp * s.plan.pp);
  s.tokens_per_s_per_rank = s.result.step_s > 0 ? tokens_per_rank / s.result.step_s : 0;
  return s;
}

void check_cost_model(const SimulateOptions& o) {
  check_run_shape("--nproc", "nproc", o.nproc, o.local_world, o.seq, o.micro_batch, o.accum);
  check_choice("--precision", "precision", o.precision, kPrecisions);
  check_one_cost_model("loom simulate", o.cluster, o.profile);
  check_nodes_on_cluster(o.nodes, o.profile);
  if (o.representative && o.profile.empty())
    throw UserError(SourceRange{}, "--representative chooses how a profile's ranks are simulated; this run is priced on a cluster",
                    "give --profile FILE, or leave --representative out (a cluster's ranks are always simulated by one per stage)");
  if (o.replanned && o.profile.empty())
    throw UserError(SourceRange{}, "--replanned plans with a profile's measured times; this run is priced on a cluster",
                    "give --profile FILE instead of --cluster (on a cluster the passes always plan with its times)");
}

nlohmann::json calibration_json(const std::vector<MemoryCalibration>& by_stage) {
  nlohmann::json stages = nlohmann::json::array();
  for (const MemoryCalibration& c : by_stage) stages.push_back({{"activation_scale", c.activation_scale}, {"outside_bytes", c.outside_bytes}});
  return stages;
}

nlohmann::json report_json(const Simulation& s) {
  const SimResult& r = s.result;
  return {{"step_s", r.step_s},
          {"compute_s", r.compute_s},
          {"exposed_comm_s", r.exposed_comm_s},
          {"comm_busy_s", r.comm_busy_s},
          {"peak_bytes", r.peak_bytes},
          {"peak_stage", r.peak_stage},
          {"stage_peak_bytes", r.stage_peak_bytes},
          {"peak_instruction", r.peak_instr},
          {"critical_stage", r.critical_stage},
          {"tokens_per_s_per_rank", s.tokens_per_s_per_rank},
          {"priced_by", s.priced_by},
          {"ranks_simulated", r.ranks_simulated},
          {"critical_rank", r.critical_rank},
          {"memory_calibration", calibration_json(s.memory_calibration)},
          // What the profiled run's steps took; -1 on a cluster or an older profile.
          {"profiled_step_s", s.profile && s.profile->measured_step_ms >= 0 ? s.profile->measured_step_ms / 1e3 : -1.0}};
}

// The memory plot's SVG: the command and simulate_json (loom.simulate's memory_plot) draw it alike.
std::string memory_plot_text(const SimulateOptions& o, const Simulation& s) {
  return memory_plot_svg(s.result, "loom simulate: " + o.model + " at " + std::to_string(o.nproc) + " ranks, " + s.priced_by);
}

int simulate_schedule(const SimulateOptions& given) {
  SimulateOptions o = given;  // with the schedule's batch(), once lowered
  SourceManager sources;
  try {
    check_cost_model(o);
    if (!o.trace.empty()) check_output_file(o.trace, "--trace");
    if (!o.memory_plot.empty()) check_output_file(o.memory_plot, "--memory-plot");
    if (!o.save_cluster.empty()) check_output_file(o.save_cluster, "--save-cluster");
    int local_world = 0;
    std::optional<Cluster> cluster = chosen_cluster(o, local_world);
    std::unique_ptr<Schedule> sch = planned_schedule(o.file, o.model, o.nproc, local_world, o.sets, o.stdlib, sources);
    Simulation s = simulate_planned(*sch, o, std::move(cluster), local_world);
    const SimResult& r = s.result;
    if (s.memory_limit > 0 && r.peak_bytes > s.memory_limit)
      std::fprintf(stderr, "loom simulate: warning: the simulated peak %s is above %s: the schedule's base "
                   "placement does not fit (prefetch(budget=auto), unshard(auto) and bucket(size=auto) only add where "
                   "memory allows)\n",
                   format_size(r.peak_bytes).c_str(), s.memory_limit_from.c_str());
    if (!o.save_cluster.empty()) save_machine_cluster(o, s.profile, s.stages[0]);
    if (!o.trace.empty()) write_whole_file(o.trace, sim_trace_json(r, s.stages));
    if (!o.memory_plot.empty()) write_whole_file(o.memory_plot, memory_plot_text(o, s));
    if (!o.json) {
      print_report(o, s);
      return kOk;
    }
    std::cout << report_json(s).dump(1) << "\n";
    return kOk;
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), &sources);
    return e.diagnostic().range.known() ? kUserError : kUsageError;
  } catch (const WriteError& e) {
    std::cerr << "loom simulate: " << e.what() << "\n";
    return kUserError;
  }
}

}  // namespace

nlohmann::json simulate_json(const Schedule& schedule, const SimulateOptions& given) {
  check_schedule_rules(schedule);  // as planned_schedule does for the command
  SimulateOptions o = given;
  o.nproc = schedule.context().world;
  o.local_world = schedule.context().local_world;
  check_cost_model(o);
  if (!o.memory_plot.empty()) check_output_file(o.memory_plot, "memory_plot");
  int local_world = 0;
  std::optional<Cluster> cluster = chosen_cluster(o, local_world);
  Simulation s = simulate_planned(schedule, o, std::move(cluster), local_world);
  if (!o.memory_plot.empty()) {
    write_output_file(o.memory_plot, {memory_plot_text(o, s)}, "memory_plot", "free space, or choose another file");
  }
  return report_json(s);
}

int64_t machine_memory_per_rank(int ranks) {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / ranks;
}

void add_simulate(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<SimulateOptions>();
  o->stdlib = stdlib_dir();
  CLI::App* c = app.add_subcommand("simulate",
                                   "Replay a schedule's step under a cost model (a cluster file or a profile): step time, compute, "
                                   "exposed communication, peak memory; no GPU, no training (docs/simulate.md)");
  c->add_option("file", o->file, "the .sched file (optional: plain data parallelism)");
  c->add_option("--model", o->model, "reference model (see `loom models`)")->required();
  c->add_option("--nproc", o->nproc, "ranks of the simulated run")->check(at_least(1));
  c->add_option("--local-world", o->local_world, "ranks per node (default: the cluster's devices per node)")->check(at_least(0));
  c->add_option("--seq", o->seq, "tokens per sequence")->check(at_least(1));
  c->add_option("--micro-batch", o->micro_batch, "sequences per rank per micro-batch")->check(at_least(1));
  c->add_option("--accum", o->accum, "micro-batches per step")->check(at_least(1));
  c->add_option("--clip", o->clip, "the run's --clip: 0 plans no gradient-norm all-reduce");
  c->add_option("--set", o->sets, "fix a tune() knob: --set name=value (repeatable)");
  c->add_option("--cluster", o->cluster, "a cluster by name (clusters/, $LOOM_CLUSTER_PATH) or a cluster file's path");
  c->add_option("--nodes", o->nodes, kNodesHelp)->check(at_least(0));
  c->add_option("--profile", o->profile, "a profile from `loom profile --out FILE` (measured on this machine)");
  c->add_option("--precision", o->precision, "the compute precision priced on a cluster's device")->check(CLI::IsMember(kPrecisions));
  c->add_flag("--json", o->json, "print {\"step_s\", \"compute_s\", \"exposed_comm_s\", \"peak_bytes\", ...} as JSON");
  as_size(c->add_option("--memory-limit", o->memory_limit,
                        "bytes per rank, e.g. 600MiB: prefetch(budget=auto), unshard(auto) and bucket(size=auto) plan within it "
                        "(default on a cluster: 90% of its device's memory, as a GPU run; on a profile: the limit the profiled run planned within, 90% of a GPU by default, none on a CPU; 0: none, "
                        "so that auto prefetches one block ahead and unshards nothing)"))
      ->default_str("");  // -1, not given: the text says what that means
  c->add_flag("--replanned", o->replanned,
              "with --profile: the passes plan with the profile's measured times and memory, the program a run's "
              "--replan-at settles on where each round is switched to and measures what the profile did (as `loom explain --profile` shows); "
              "default: the program a run starts with");
  c->add_flag("--representative", o->representative,
              "with --profile: simulate one rank per stage at each op's slowest rank's time; default: each rank at its own "
              "measured times where the step allows (one stage, every collective over all ranks)");
  c->add_option("--trace", o->trace, "write the simulated timeline in Chrome trace format (open it beside `loom run --trace`'s)");
  c->add_option("--memory-plot", o->memory_plot, "draw the simulated memory timeline as an SVG file");
  c->add_option("--save-cluster", o->save_cluster,
                "with --profile: write this machine as a cluster file (its achieved compute rate, the memory rates of its "
                "element-wise ops and its optimizer step, and its measured all-reduce links on idle cores and beside "
                "compute), for `loom plan --cluster FILE`; derive it from a data-parallel profile (docs/simulate.md)");
  c->add_option("--stdlib", o->stdlib, "directory of the standard schedules");
  c->callback([&run, o] { run = [o] { return simulate_schedule(*o); }; });
}

}  // namespace loom::cli
