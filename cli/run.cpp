// loom run: train a model under a schedule on N local ranks (or join a run as one rank
// when started by torchrun, srun or mpirun).
#include <unistd.h>

#include <iostream>

#include "backend/launcher.h"
#include "backend/rank_env.h"
#include "backend/trainer.h"
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
};

int run(const RunOptions& o) {
  std::optional<RankEnv> env;
  try {
    env = rank_env_from_process();
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), nullptr);
    return kUsageError;
  }
  if (env) return train(o.train, *env);  // started as one rank of a run
  // The launcher: check what can be checked before starting any rank.
  try {
    validate_run(o.train, o.nproc * o.nnodes, o.nproc);
  } catch (const UserError& e) {
    std::cerr << render(e.diagnostic(), nullptr);
    return kUserError;
  }
  LaunchSpec spec;
  spec.argv = {"/proc/self/exe"};
  for (auto& a : original_arguments()) spec.argv.push_back(a);
  spec.nproc = o.nproc;
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
  t.stdlib = LOOM_STDLIB_DIR;
  CLI::App* c = app.add_subcommand("run", "Train a model under a schedule on N ranks (see docs/running.md)");
  c->add_option("file", t.schedule_file, "the .sched file (optional: none means plain data parallelism)");
  c->add_option("--model", t.model, "reference model (see `loom models`)")->required();
  c->add_option("--nproc", o->nproc, "ranks to start on this node")->check(CLI::PositiveNumber);
  c->add_option("--nnodes", o->nnodes, "number of nodes (multi-node: run loom run on each)")->check(CLI::PositiveNumber);
  c->add_option("--node-rank", o->node_rank, "this node's index, 0..nnodes-1")->check(CLI::NonNegativeNumber);
  c->add_option("--master-addr", o->master_addr, "address of node 0, where rank 0 serves the rendezvous store");
  c->add_option("--master-port", o->master_port, "port of the rendezvous store (default: a free port on one node, 29500 across nodes)");
  c->add_option("--data", t.data, "token file from `loom data prepare`, or 'synthetic'");
  c->add_option("--micro-batch", t.micro_batch, "sequences per rank per micro-batch");
  c->add_option("--seq", t.seq, "tokens per sequence");
  c->add_option("--steps", t.steps, "optimizer steps");
  c->add_option("--accum", t.accum, "micro-batches per optimizer step (gradient accumulation)");
  c->add_option("--lr", t.lr, "peak learning rate (AdamW)");
  c->add_option("--warmup", t.warmup, "linear warmup steps before the cosine decay");
  c->add_option("--weight-decay", t.weight_decay, "AdamW weight decay");
  c->add_option("--clip", t.clip, "clip the global gradient norm to this (0: off)");
  c->add_option("--seed", t.seed, "seed for weights, data order and dropout");
  c->add_option("--threads", t.threads, "intra-op threads per rank (default: cores / ranks)");
  c->add_option("--device", t.device, "cpu, cuda (bf16 autocast, fp32 master weights, NCCL; one GPU per rank) or auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  c->add_option("--precision", t.precision, "GPU compute precision: bf16 (autocast over fp32 master weights) or fp32")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  c->add_option("--save", t.save_dir, "write checkpoints to this directory (at the end, and every --save-every steps)");
  c->add_option("--save-every", t.save_every, "also checkpoint every K steps");
  c->add_option("--resume", t.resume, "continue from a checkpoint directory written by --save");
  c->add_option("--metrics", t.metrics, "write one JSON object per step to this file");
  c->add_option("--trace", t.trace, "write the executed timeline (Chrome trace format, open in Perfetto) to this file");
  c->add_option("--timeout", t.timeout_s, "seconds a rank waits for the rendezvous or a collective before failing");
  c->add_option("--set", t.sets, "fix a tune() knob: --set micro_batch=4 (repeatable)");
  c->add_option("--stdlib", t.stdlib, "directory of the standard schedules");
  c->callback([&run_fn, o] { run_fn = [o] { return run(*o); }; });
}

}  // namespace loom::cli
