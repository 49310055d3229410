#!/usr/bin/python3
"""The peer of benchmarks/train_bench.sh: gpt:tiny trained by PyTorch (Debian python3-torch)
with DistributedDataParallel over gloo. Same architecture, optimizer and batch as Loom's run.
Usage: ddp_peer.py --nproc 2 --steps 20 --micro-batch 4 --seq 128 --out result.json"""
import argparse, json, math, os, resource, statistics, subprocess, sys, time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, heads, layers):
        super().__init__()
        self.c_attn, self.c_proj, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads
        for m in (self.c_attn, self.c_proj):
            nn.init.normal_(m.weight, std=0.02), nn.init.zeros_(m.bias)
        nn.init.normal_(self.c_proj.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, x):
        b, t, d = x.shape
        # Head-major q, k, v, as in models/gpt.cpp.
        qkv = self.c_attn(x).view(b, t, self.heads, 3, d // self.heads).transpose(1, 2)
        q, k, v = qkv.unbind(3)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        return self.c_proj((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, layers):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(d), Attention(d, heads, layers), nn.LayerNorm(d)
        self.c_fc, self.c_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        nn.init.normal_(self.c_fc.weight, std=0.02), nn.init.normal_(self.c_proj.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):  # gpt:tiny: vocab 256, context 256, width 128, 4 layers, 4 heads, tied head
    def __init__(self, vocab=256, ctx=256, d=128, layers=4, heads=4):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        nn.init.normal_(self.wte.weight, std=0.02), nn.init.normal_(self.wpe.weight, std=0.01)
        self.h = nn.ModuleList(Block(d, heads, layers) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.size(1)))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


def worker(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1234)
    model = GPT()
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1000 + rank)
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        batch = torch.randint(256, (args.micro_batch, args.seq + 1), generator=gen)
        logits = ddp(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append((time.perf_counter() - t0) * 1000)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if rank == 0:
        median = statistics.median(times[2:])
        with open(args.out, "w") as f:
            json.dump({"step_ms": median, "tokens_per_s": world * args.micro_batch * args.seq / (median / 1000),
                       "max_rss_bytes": rss, "torch": torch.__version__}, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if "RANK" in os.environ:
        return worker(args)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29700 + os.getpid() % 1000), WORLD_SIZE=str(args.nproc))
    procs = [subprocess.Popen([sys.executable] + sys.argv, env=dict(env, RANK=str(r))) for r in range(args.nproc)]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
