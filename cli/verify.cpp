// loom verify: differential testing of a schedule (issue #5 §2, first part). Trains one step
// of the plain model (data parallelism) and one of the scheduled model, from the same seed on
// the same batch, and compares the loss and every parameter after the optimizer step.
// Not yet: forward outputs and gradients on their own, localisation to the first diverging
// module, bisection over the directive trace (docs/verify.md).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/saved_model_compare.h"
#include "cli/commands.h"
#include "lang/diagnostics.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

struct VerifyOptions {
  TrainOptions train;
  int nproc = 1;
  double atol = 1e-5;
  bool json = false;
  bool keep = false;
};

// Runs `loom run` with `args` quietly (its output goes to `log`); returns its exit code.
int run_quietly(const std::vector<std::string>& args, const fs::path& log) {
  std::string cmd = "'" + fs::read_symlink("/proc/self/exe").string() + "'";
  for (auto& a : args) cmd += " '" + a + "'";
  cmd += " > '" + log.string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

double first_loss(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::string line;
  std::getline(in, line);
  return nlohmann::json::parse(line).at("loss").get<double>();
}

std::string tail_of(const fs::path& log) {
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  for (size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i) out += "  " + lines[i] + "\n";
  return out;
}

int verify(const VerifyOptions& o) {
  try {
    validate_run(o.train, o.nproc, o.nproc);
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), nullptr);
    return kUserError;
  }
  char tmpl[] = "/tmp/loom-verify-XXXXXX";
  fs::path dir = mkdtemp(tmpl);
  const TrainOptions& t = o.train;
  std::vector<std::string> common{"--model", t.model, "--nproc", std::to_string(o.nproc), "--data", t.data, "--micro-batch",
                                  std::to_string(t.micro_batch), "--seq", std::to_string(t.seq), "--seed", std::to_string(t.seed),
                                  "--steps", "1", "--threads", std::to_string(resolved_threads(t, o.nproc)), "--device", t.device,
                                  "--stdlib", t.stdlib};
  for (auto& s : t.sets) common.insert(common.end(), {"--set", s});
  struct Side {
    const char* name;
    std::string schedule;
    double loss = 0;
  } sides[2] = {{"plain", ""}, {"scheduled", t.schedule_file}};
  for (Side& side : sides) {
    std::vector<std::string> args{"run"};
    if (!side.schedule.empty()) args.push_back(side.schedule);
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), {"--save", (dir / side.name).string(), "--metrics", (dir / (std::string(side.name) + ".jsonl")).string()});
    fs::path log = dir / (std::string(side.name) + ".log");
    if (int rc = run_quietly(args, log)) {
      std::cerr << "error: the " << side.name << " run failed (exit code " << rc << "); its last lines:\n" << tail_of(log);
      return kUserError;
    }
    side.loss = first_loss(dir / (std::string(side.name) + ".jsonl"));
  }
  std::vector<ParameterDifference> diffs =
      compare_saved_models(t.model, (dir / "plain" / "step-000001" / "model.pt").string(),
                           (dir / "scheduled" / "step-000001" / "model.pt").string());
  double loss_diff = std::abs(sides[0].loss - sides[1].loss);
  const ParameterDifference* worst = nullptr;
  const ParameterDifference* first_bad = nullptr;
  for (auto& d : diffs) {
    if (!worst || d.max_abs > worst->max_abs) worst = &d;
    if (!first_bad && d.max_abs > o.atol) first_bad = &d;
  }
  bool equivalent = loss_diff <= o.atol && !first_bad;
  if (!o.keep) fs::remove_all(dir);

  if (o.json) {
    nlohmann::json j{{"equivalent", equivalent},
                     {"atol", o.atol},
                     {"loss", {{"plain", sides[0].loss}, {"scheduled", sides[1].loss}, {"difference", loss_diff}}},
                     {"parameters_compared", diffs.size()},
                     {"largest_difference", {{"parameter", worst ? worst->name : ""}, {"max_abs", worst ? worst->max_abs : 0.0}}},
                     {"first_differing_parameter", first_bad ? nlohmann::json(first_bad->name) : nlohmann::json(nullptr)},
                     {"compared", "loss and parameters after one optimizer step"}};
    if (o.keep) j["kept"] = dir.string();
    std::cout << j.dump(1) << "\n";
  } else {
    std::printf("loom verify: %s on %s, %d rank%s, one step from seed %llu (tolerance %g)\n",
                t.schedule_file.c_str(), t.model.c_str(), o.nproc, o.nproc == 1 ? "" : "s",
                static_cast<unsigned long long>(t.seed), o.atol);
    std::printf("  loss: plain %.9g, scheduled %.9g, |difference| %.3g\n", sides[0].loss, sides[1].loss, loss_diff);
    std::printf("  parameters after the step: %zu compared, largest |difference| %.3g in %s\n", diffs.size(),
                worst ? worst->max_abs : 0.0, worst ? worst->name.c_str() : "-");
    if (equivalent) std::printf("equivalent\n");
    else if (first_bad)
      std::printf("NOT equivalent: the first parameter (module order) beyond the tolerance is %s (|difference| %.3g)\n",
                  first_bad->name.c_str(), first_bad->max_abs);
    else std::printf("NOT equivalent: the losses differ by %.3g\n", loss_diff);
    std::printf("(not compared yet: forward outputs and gradients on their own, the first diverging module, the directive that broke it)\n");
    if (o.keep) std::printf("kept: %s\n", dir.c_str());
  }
  return equivalent ? kOk : kUserError;
}

}  // namespace

void add_verify(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<VerifyOptions>();
  TrainOptions& t = o->train;
  CLI::App* c = app.add_subcommand(
      "verify", "Check that a schedule computes what the plain model computes: one step of each, compared (see docs/verify.md)");
  add_step_options(c, t);
  c->get_option("file")->required();
  c->add_option("--nproc", o->nproc, "ranks for both runs")->check(CLI::PositiveNumber);
  c->add_option("--seed", t.seed, "seed of the weights and the batch (the same for both runs)");
  c->add_option("--atol", o->atol, "largest absolute difference accepted (loss and every parameter)")->check(CLI::NonNegativeNumber);
  c->add_flag("--json", o->json, "print the report as JSON");
  c->add_flag("--keep", o->keep, "keep the two runs' checkpoints, metrics and logs (their directory is printed)");
  c->callback([&run, o] { run = [o] { return verify(*o); }; });
}

}  // namespace loom::cli
