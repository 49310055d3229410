// loom verify: differential testing of a schedule (slapo.txt §3.5, issue #5). One step of the
// plain model (data parallelism, no directives) and one of the scheduled model, from the same
// seed on the same ranks and batch, each recorded (step_record.h): every module's output and
// the gradients at its outputs and inputs, the loss, every reduced gradient, every parameter
// after the step. The records are compared rank by rank; the first quantity beyond the
// tolerance, in step order, names the module that diverged; bisection over prefixes of the
// directive trace names the directive that broke equivalence. The runs and the bisection are
// the differential tester's library (verifier/differential); this is its command line and report.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "verifier/differential/bisection.h"
#include "verifier/differential/recorded_runs.h"
#include "verifier/differential/step_record_compare.h"
#include "cli/workflow.h"
#include "lang/diagnostics.h"

namespace loom::cli {

namespace {

namespace fs = std::filesystem;

// What the scheduled run computes or reduces in decides the default tolerance.
std::string run_dtype(const TrainOptions& t) {
  if (resolved_device(t) == "cuda" && t.precision == "bf16") return "bf16";
  return t.reduce_dtype;
}

std::string describe(const QuantityDifference& d) {
  std::string what;
  switch (d.kind) {
    case RecordKind::Output: what = "the output of " + d.name; break;
    case RecordKind::OutputGrad: what = "the gradient at the output of " + d.name; break;
    case RecordKind::InputGrad: what = "the gradient " + d.name + " passes to its input " + std::to_string(d.index); break;
    case RecordKind::Loss: what = "the loss of micro-batch " + std::to_string(d.call); break;
    case RecordKind::ParamGrad: what = "the reduced gradient of " + d.name; break;
    case RecordKind::Param: what = "the parameter " + d.name + " after the optimizer step"; break;
  }
  if ((d.kind == RecordKind::Output || d.kind == RecordKind::OutputGrad || d.kind == RecordKind::InputGrad) && d.call > 0)
    what += " (call " + std::to_string(d.call + 1) + ")";
  return what + " on rank " + std::to_string(d.rank);
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

nlohmann::json difference_json(const QuantityDifference& d) {
  return {{"kind", record_kind_name(d.kind)}, {"name", d.name}, {"module", d.module}, {"call", d.call},
          {"rank", d.rank}, {"max_abs", std::isinf(d.max_abs) ? -1.0 : d.max_abs}, {"allowed", d.allowed}, {"note", d.note}};
}

// What verify found, for its report.
struct Outcome {
  std::vector<Directive> directives;
  int model_parallel = 1;  // tp * pp: the plain model ran at nproc / (tp * pp) ranks
  Tolerance tol;
  RecordComparison cmp;
  double loss_plain = 0, loss_scheduled = 0;
  Bisection bisection;
  std::vector<const Directive*> suspects;  // the breaking directive, or those it is among
  int runs = 0;
  double seconds = 0;
  fs::path kept;  // the records' folder, with --keep
};

// The report as one JSON object (--json).
nlohmann::json report_json(const VerifyOptions& o, const Outcome& r) {
  const TrainOptions& t = o.train;
  nlohmann::json compared = nlohmann::json::object();
  for (auto& k : r.cmp.kinds) {
    nlohmann::json j{{"count", k.compared}};
    if (k.largest) j["largest"] = difference_json(*k.largest);
    compared[record_kind_name(k.kind)] = j;
  }
  nlohmann::json j{{"equivalent", r.cmp.equivalent()},
                   {"schedule", t.schedule_file},
                   {"model", t.model},
                   {"ranks", o.nproc},
                   {"plain_ranks", o.nproc / r.model_parallel},
                   {"tolerance", {{"dtype", r.tol.dtype}, {"atol", r.tol.atol}, {"rtol", r.tol.rtol}}},
                   {"loss", {{"plain", r.loss_plain}, {"scheduled", r.loss_scheduled}, {"difference", std::abs(r.loss_plain - r.loss_scheduled)}}},
                   {"compared", compared},
                   {"recorded_by_one_run", r.cmp.recorded_by_one_run},
                   {"unresolved_updates", r.cmp.unresolved_updates},
                   {"compressed", {{"compared", r.cmp.compressed.compared},
                                   {"largest_gradient_bound", r.cmp.compressed.largest_gradient_bound},
                                   {"estimated_entries", r.cmp.compressed.estimated}}},
                   {"first_divergence", r.cmp.first_divergence ? difference_json(*r.cmp.first_divergence) : nlohmann::json(nullptr)},
                   {"runs", r.runs},
                   {"seconds", r.seconds}};
  nlohmann::json breaking = nlohmann::json::array();
  for (size_t i = 0; i < r.suspects.size(); ++i)
    breaking.push_back({{"index", r.bisection.good + i + 1}, {"primitive", r.suspects[i]->primitive}, {"target", r.suspects[i]->target},
                        {"text", r.suspects[i]->to_sched()}, {"location", r.suspects[i]->where.to_string()}});
  j["breaking_directives"] = breaking;
  j["bisection"] = {{"directives", r.bisection.total}, {"verifying_prefix", r.bisection.good}, {"unrunnable_prefixes", r.bisection.unrunnable}};
  if (o.keep) j["kept"] = r.kept.string();
  return j;
}

// The report for a reader.
int report_text(const VerifyOptions& o, const Outcome& r) {
  const TrainOptions& t = o.train;
  std::printf("loom verify: %s on %s, %d rank%s, one step from seed %llu\n", t.schedule_file.c_str(), t.model.c_str(), o.nproc,
              o.nproc == 1 ? "" : "s", static_cast<unsigned long long>(t.seed));
  if (o.nproc == 1 && !r.directives.empty())
    std::printf("  note: at 1 rank nothing is sharded, split or reduced, so this compares little more than the plain "
                "model with itself; verify at the world size you will train with (--nproc N; the default is 2)\n");
  if (r.model_parallel > 1)
    std::printf("  tensor/pipeline parallel (tp x pp = %d): the plain model runs at %d rank(s), one per replica; each "
                "replica's slices and stages are reassembled before comparing\n",
                r.model_parallel, o.nproc / r.model_parallel);
  std::printf("  tolerance (%s): |scheduled - plain| <= %g + %g x the largest |plain| of each tensor\n", r.tol.dtype.c_str(), r.tol.atol,
              r.tol.rtol);
  std::printf("  loss: plain %.9g, scheduled %.9g, |difference| %s\n", r.loss_plain, r.loss_scheduled,
              num(std::abs(r.loss_plain - r.loss_scheduled)).c_str());
  for (auto& k : r.cmp.kinds) {
    static const char* labels[] = {"module outputs", "output gradients", "input gradients", "losses (per micro-batch)",
                                   "parameter gradients", "parameters after the step"};
    std::printf("  %-27s %5lld compared", (std::string(labels[static_cast<int>(k.kind)]) + ":").c_str(),
                static_cast<long long>(k.compared));
    if (k.largest && k.largest->max_abs > 0) std::printf(", largest |difference| %s in %s (rank %d)", num(k.largest->max_abs).c_str(), k.largest->name.c_str(), k.largest->rank);
    std::printf("\n");
  }
  if (r.cmp.compressed.compared) {
    std::printf("  compressed (lossy by design): %lld gradients and parameters of compress()ed modules compared against the "
                "compression's stated bound instead: TAGC's sparsification thresholds summed over the ranks (up to %s), "
                "and less than 2 x lr after the first AdamW step\n",
                static_cast<long long>(r.cmp.compressed.compared), num(r.cmp.compressed.largest_gradient_bound).c_str());
    if (r.cmp.compressed.estimated)
      std::printf("  TAGC could not peel %lld entries (the sketch was too small for the union of the ranks' non-zeros) and "
                  "estimated them; their error was checked against the same bound\n",
                  static_cast<long long>(r.cmp.compressed.estimated));
  }
  if (r.cmp.unresolved_updates)
    std::printf("  %lld updated parameter elements differ beyond the tolerance where their gradient is within it of zero "
                "(its sign is rounding): allowed AdamW's first-step bound 2 x lr = %s more\n",
                static_cast<long long>(r.cmp.unresolved_updates), num(2 * r.tol.step_lr).c_str());
  if (r.cmp.recorded_by_one_run)
    std::printf("  (%lld quantities recorded by one run only: inside a checkpoint()ed module gradients exist only in the recomputation)\n",
                static_cast<long long>(r.cmp.recorded_by_one_run));
  if (!r.kept.empty()) std::printf("  records, metrics and logs kept in %s\n", r.kept.string().c_str());
  if (r.cmp.equivalent()) {
    std::printf("equivalent (%d runs, %.1f s)\n", r.runs, r.seconds);
    return kOk;
  }
  const QuantityDifference& d = *r.cmp.first_divergence;
  std::printf("NOT equivalent (%d runs, %.1f s)\n", r.runs, r.seconds);
  std::printf("  first divergence: %s: |difference| %s, %s allowed%s\n", describe(d).c_str(), num(d.max_abs).c_str(),
              num(d.allowed).c_str(), d.note.empty() ? "" : (" (" + d.note + ")").c_str());
  std::printf("  diverging module: %s\n", d.module.c_str());
  if (r.suspects.size() == 1)
    std::printf("  breaking directive: %s at %s\n", r.suspects[0]->to_sched().c_str(), r.suspects[0]->where.to_string().c_str());
  else if (!r.suspects.empty())
    std::printf("  breaking directive: one of these %zu (the prefixes between them could not run on their own):\n", r.suspects.size());
  if (r.suspects.size() > 1)
    for (const Directive* d : r.suspects) std::printf("    %s at %s\n", d->to_sched().c_str(), d->where.to_string().c_str());
  if (r.bisection.done)
    std::printf("    (bisection over the directive trace: the first %zu of %zu directives verify, the first %zu do not)\n",
                r.bisection.good, r.bisection.total, r.bisection.bad);
  return kUserError;
}

}  // namespace

namespace {

// Both sides run and compared, and, when they differ, the breaking directive searched.
Outcome verify_runs(const VerifyOptions& o) {
  // NaN passes the options' `at least 0` check (every comparison with it is false) and would call
  // every quantity different: a tolerance is a finite number of at least 0.
  for (const auto& [option, keyword, value] : {std::tuple{"--atol", "atol", o.atol}, std::tuple{"--rtol", "rtol", o.rtol}})
    if (value && !(std::isfinite(*value) && *value >= 0))
      throw UserError(SourceRange{}, std::string(option) + " must be a finite number of at least 0, got " + std::to_string(*value),
                      std::string("give ") + option + " (in Python: " + keyword + "=) such as 1e-5");
  auto started = std::chrono::steady_clock::now();
  TrainOptions t = o.train;
  Outcome r;
  ValidatedRun validated = validate_run(t, o.nproc, o.nproc);
  r.directives = validated.directives;
  r.model_parallel = validated.plan.tp * validated.plan.pp;
  // The plain run trains the batch the schedule's batch() sets, as the scheduled one does.
  t.micro_batch = validated.plan.micro_batch_or(t.micro_batch);
  t.accum = validated.plan.accum_or(t.accum);
  Tolerance& tol = r.tol;
  tol = default_tolerance(run_dtype(t));
  if (o.atol) tol.atol = *o.atol;
  if (o.rtol) tol.rtol = *o.rtol;
  TrainOptions one_step = t;
  one_step.steps = 1;  // what the recorded runs train
  tol.step_lr = learning_rate(one_step, 0);

  char tmpl[] = "/tmp/loom-verify-XXXXXX";
  fs::path dir = mkdtemp(tmpl);
  RecordedRuns runs(t, o.nproc, o.nproc / r.model_parallel, dir);
  std::string error;
  if (!runs.run("plain", false, -1, error) || !runs.run("scheduled", true, -1, error)) {
    if (!o.keep) fs::remove_all(dir);
    throw RunFailed(error);
  }
  auto plain = runs.records("plain");
  r.cmp = compare_step_records(plain, runs.records("scheduled", &plain), tol);
  r.loss_plain = runs.loss("plain");
  r.loss_scheduled = runs.loss("scheduled");
  if (!r.cmp.equivalent() && o.bisect && !r.directives.empty())
    r.bisection = bisect_directives(r.directives.size(), [&](size_t k) -> std::optional<bool> {
      std::string name = "prefix-" + std::to_string(k), failed;
      if (!runs.run(name, true, static_cast<int64_t>(k), failed)) return std::nullopt;
      return compare_step_records(plain, runs.records(name, &plain), tol).equivalent();
    });
  r.runs = runs.count();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (o.keep) r.kept = dir;
  else fs::remove_all(dir);
  // The suspects: directives good+1..bad (one when every prefix could run).
  if (r.bisection.done)
    for (size_t i = r.bisection.good; i < r.bisection.bad; ++i) r.suspects.push_back(&r.directives[i]);
  return r;
}

}  // namespace

nlohmann::json verify_report(const VerifyOptions& o) { return report_json(o, verify_runs(o)); }

int verify_schedule(const VerifyOptions& o) {
  try {
    Outcome r = verify_runs(o);
    if (!o.json) return report_text(o, r);
    std::cout << report_json(o, r).dump(1) << "\n";
    return r.cmp.equivalent() ? kOk : kUserError;
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), nullptr);
    return kUserError;
  } catch (const RunFailed& e) {
    std::cerr << "error: " << e.what();
    return kUserError;
  }
}

void add_verify(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<VerifyOptions>();
  TrainOptions& t = o->train;
  CLI::App* c = app.add_subcommand(
      "verify",
      "Check that a schedule computes what the plain model computes: one step of each, compared module by module; "
      "when they differ, name the first diverging module and the directive that broke it (see docs/verify.md)");
  add_step_options(c, t);
  c->get_option("file")->required()->description("the .sched file to verify against the plain model");
  c->add_option("--nproc", o->nproc, "ranks for both runs")->check(at_least(1));
  c->add_option("--seed", t.seed, "seed of the weights and the batch (the same for both runs)");
  c->add_option("--atol", o->atol, "absolute tolerance (default by dtype: fp32 1e-5, fp16 1e-3, bf16 1e-2)")->check(at_least(0));
  c->add_option("--rtol", o->rtol, "tolerance relative to each tensor's largest |value| (default: fp32 1e-4, fp16 1e-2, bf16 5e-2)")
      ->check(at_least(0));
  c->add_flag("--no-bisect", [o](int64_t) { o->bisect = false; }, "when not equivalent, do not search for the breaking directive");
  c->add_flag("--json", o->json, "print the report as JSON");
  c->add_flag("--keep", o->keep, "keep the runs' records, metrics and logs (their directory is printed)");
  c->callback([&run, o] { run = [o] { return verify_schedule(*o); }; });
}

}  // namespace loom::cli
