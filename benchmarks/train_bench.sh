#!/usr/bin/env bash
# Benchmark (not a test): gpt:tiny for 20 steps, micro-batch 4 x 128 tokens per rank,
# 1 thread per rank: Loom at world 1 and 2, and the peer (PyTorch DDP over gloo,
# Debian python3-torch) at world 2, in one invocation. Step time is the median of steps
# 3-20; memory is each rank's peak RSS (and Loom's tensor peak from its counting allocator).
# Loom's ranks are exec'd (LOOM_NO_FORK=1), as the peer's are, so that their RSS counts the same
# library pages (a forked rank counts the launcher's only where it touches them).
set -euo pipefail
cd "$(dirname "$0")/.."
loom=${LOOM:-build/loom}  # LOOM: another binary (benchmarks/against_commit.sh)
out=$(mktemp -d)
export LOOM_NO_FORK=1
common="--model gpt:tiny --data synthetic --steps 20 --micro-batch 4 --seq 128 --threads 1"
"$loom" run $common --nproc 1 --metrics "$out/w1.jsonl" > /dev/null
"$loom" run $common --nproc 2 --metrics "$out/w2.jsonl" > /dev/null
/usr/bin/python3 benchmarks/ddp_peer.py --nproc 2 --steps 20 --micro-batch 4 --seq 128 --threads 1 --out "$out/peer.json"
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
d = sys.argv[1]
def loom(name):
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")][2:]
    ms = statistics.median(r["step_ms"] for r in rows)
    return {"step_ms": ms, "tokens_per_s": rows[0]["tokens_per_s"] * rows[0]["step_ms"] / ms,
            "peak_mem_bytes": max(r["peak_mem_bytes"] for r in rows), "max_rss_bytes": max(r["max_rss_bytes"] for r in rows)}
w1, w2, peer = loom("w1"), loom("w2"), json.load(open(f"{d}/peer.json"))
mb = lambda b: f"{b / 2**20:.1f} MiB"
print(f"gpt:tiny, 20 steps, micro-batch 4 x 128 tokens per rank, 1 thread per rank (median of steps 3-20)")
print(f"{'run':<26}{'tokens/s':>10}{'step ms':>10}{'peak RSS':>12}{'tensor peak':>13}")
print(f"{'loom world 1':<26}{w1['tokens_per_s']:>10.0f}{w1['step_ms']:>10.1f}{mb(w1['max_rss_bytes']):>12}{mb(w1['peak_mem_bytes']):>13}")
print(f"{'loom world 2':<26}{w2['tokens_per_s']:>10.0f}{w2['step_ms']:>10.1f}{mb(w2['max_rss_bytes']):>12}{mb(w2['peak_mem_bytes']):>13}")
print(f"{'pytorch ' + peer['torch'] + ' DDP world 2':<26}{peer['tokens_per_s']:>10.0f}{peer['step_ms']:>10.1f}{mb(peer['max_rss_bytes']):>12}{'-':>13}")
print(f"ratio loom/pytorch at world 2: tokens/s {w2['tokens_per_s'] / peer['tokens_per_s']:.2f}x, "
      f"step time {w2['step_ms'] / peer['step_ms']:.2f}x, peak RSS {w2['max_rss_bytes'] / peer['max_rss_bytes']:.2f}x")
print(f"scaling loom world 2 / world 1: tokens/s {w2['tokens_per_s'] / w1['tokens_per_s']:.2f}x")
PY
rm -rf "$out"
