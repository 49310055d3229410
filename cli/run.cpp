// loom run: train a model under a schedule on N local ranks (or join a run as one rank
// when started by torchrun, srun or mpirun).
#include <unistd.h>

#include <iostream>

#include "backend/train/launcher.h"
#include "backend/train/rank_env.h"
#include "backend/train/trainer.h"
#include "cli/commands.h"
#include "lang/diagnostics.h"

namespace loom::cli {
namespace {

struct RunOptions {
  TrainOptions train;
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  bool no_verify = false;  // set by loom verify for its own runs
  bool world_given = false;  // --nproc or --nnodes on the command line
};

int run(const RunOptions& o) {
  int requested_world = o.world_given ? o.nproc * o.nnodes : 0;
  if (std::optional<int> rc = train_if_rank(o.train, requested_world)) return *rc;  // started as one rank of a run
  // The launcher: check what can be checked before starting any rank.
  bool verify_first = false;
  try {
    verify_first = validate_run(o.train, o.nproc * o.nnodes, o.nproc).plan.verify_first && !o.no_verify;
    if (verify_first && o.nnodes > 1)
      throw UserError(SourceRange{}, "verify() runs its comparison on one node, but this run spans " + std::to_string(o.nnodes),
                      "run `loom verify` on one node first, then train without verify()");
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), nullptr);
    return kUserError;
  }
  if (verify_first) {
    // verify(): the schedule must compute what the plain model computes before it trains.
    VerifyOptions v;
    v.train = o.train;
    v.nproc = o.nproc;
    std::cout << "loom run: verify() asks for a differential test first\n" << std::flush;
    if (verify_schedule(v) != kOk) {
      std::cerr << "error: the schedule does not compute what the plain model computes (report above); not training\n"
                   "  hint: fix the directive the report names, or run `loom verify` for the details\n";
      return kUserError;
    }
    std::cout << std::flush;
  }
  std::cout << std::flush;  // what the schedule printed comes before the ranks' output
  LaunchSpec spec = relaunch_as_ranks(o.nproc);
  spec.nnodes = o.nnodes;
  spec.node_rank = o.node_rank;
  spec.master_addr = o.master_addr;
  spec.master_port = o.master_port;
  return launch(spec, std::cerr);
}

}  // namespace

void add_run(CLI::App& app, std::function<int()>& run_fn) {
  auto o = std::make_shared<RunOptions>();
  TrainOptions& t = o->train;
  CLI::App* c = app.add_subcommand("run", "Train a model under a schedule on N ranks (see docs/running.md)");
  add_step_options(c, t);
  c->add_option("--replan-at", t.replan_at,
                "re-plan after this step from the run's own measurements (deepcompile.txt's two-level loop, docs/passes.md): "
                "ops timed in steps 2..STEP, collectives on the run's groups, the step lowered again with those times and "
                "followed from the next step on every rank; 0: never. Default: 3 where a pass of the schedule plans from "
                "measured times (prefetch(budget=auto), unshard(auto) under a memory limit; bucket(size=auto)) on a sharded "
                "run without a mesh of at least 6 steps, else never")
      ->default_str("auto");
  c->add_option("--replan-every", t.replan_every,
                "with --replan-at K: re-plan again after steps K + E, K + 2E, ... to the end of the run, each time on the steps "
                "measured since the last re-plan (its first step not: warm-up) and the collectives timed again. Unset: once "
                "per group of passes the schedule plans from measurements (prefetching and bucketing, then unsharding), 3 "
                "steps apart where the run has the steps, each round planning one group more from the measurements and "
                "keeping what the earlier rounds planned");
  c->add_option("--nproc", o->nproc, "ranks to start on this node")->check(at_least(1));
  c->add_option("--nnodes", o->nnodes, "number of nodes (multi-node: run loom run on each)")->check(at_least(1));
  c->add_option("--node-rank", o->node_rank, "this node's index, 0..nnodes-1")->check(at_least(0));
  c->add_option("--master-addr", o->master_addr, "address of node 0, where rank 0 serves the rendezvous store");
  c->add_option("--master-port", o->master_port, "port of the rendezvous store (default: a free port on one node, 29500 across nodes)");
  c->add_option("--steps", t.steps, "optimizer steps");
  c->add_option("--lr", t.lr, "peak learning rate (AdamW)");
  c->add_option("--warmup", t.warmup, "linear warmup steps before the cosine decay");
  c->add_option("--weight-decay", t.weight_decay, "AdamW weight decay");
  c->add_option("--clip", t.clip, "clip the global gradient norm to this (0: off)");
  c->add_option("--seed", t.seed, "seed for the weights and the data order");
  c->add_option("--save", t.save_dir, "write checkpoints to this directory (at the end, and every --save-every steps)");
  c->add_option("--save-every", t.save_every, "also checkpoint every K steps");
  c->add_option("--resume", t.resume, "continue from a checkpoint directory written by --save");
  c->add_option("--metrics", t.metrics, "write one JSON object per step to this file");
  c->add_option("--trace", t.trace, "write the executed timeline (Chrome trace format, open in Perfetto) to this file");
  // Used by loom verify for its own runs: hidden from --help.
  c->add_option("--record", t.record, "write each rank's record of the first step to this directory")->group("");
  c->add_option("--trace-prefix", t.trace_prefix, "apply only the first K directives of the schedule")->group("");
  c->add_flag("--no-verify", o->no_verify, "do not run verify() before training")->group("");
  c->callback([&run_fn, o, c] {
    o->world_given = c->count("--nproc") + c->count("--nnodes") > 0;
    run_fn = [o] { return run(*o); };
  });
}

}  // namespace loom::cli
