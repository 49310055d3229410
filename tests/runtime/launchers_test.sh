#!/usr/bin/env bash
# Loom under the launchers people already use: Debian's torchrun (its agent's store, and the
# c10d rendezvous), Open MPI's mpirun, and Slurm's srun on a one-node Slurm this test starts
# itself; and the start-up mistakes they make possible (a port in use, an unreachable master,
# a world size that does not match), each a user error that says what to do.
set -uo pipefail
source "$(dirname "$0")/../lib/expect.sh" "$@"  # $loom, $tmp, $passed, $failed; into the source tree
cleanup() {
  pkill -P $$ 2>/dev/null
  local daemons=()
  for f in slurmctld.pid slurmd.pid munge/munged.pid; do
    [ -f "$tmp/slurm/$f" ] && daemons+=("$(cat "$tmp/slurm/$f")")
  done
  if [ ${#daemons[@]} -gt 0 ]; then
    kill "${daemons[@]}" 2>/dev/null
    for _ in $(seq 50); do kill -0 "${daemons[@]}" 2>/dev/null || break; sleep 0.1; done  # they write their state on the way out
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
ok() { passed=$((passed + 1)); }
bad() { echo "FAIL $1"; [ -f "$tmp/err" ] && sed 's/^/    /' "$tmp/err" | tail -15; failed=$((failed + 1)); }
train="run --model gpt:tiny --data synthetic --seq 32 --micro-batch 2 --steps 3 --threads 1"
port=$((26000 + RANDOM % 6000))  # below the ephemeral ports gloo's connections take (32768 on), apart from launch_test.sh
python=/usr/bin/python3  # Debian's, with torch (torchrun); another python3 may come first on PATH

# torchrun needs --redirects 1 --tee 1 on Python 3.11 (its log capture otherwise fails).
torchrun_() { "$python" -m torch.distributed.run --redirects 1 --tee 1 --log_dir "$tmp/torchrun_logs" "$@"; }

# 1. torchrun's default (static) rendezvous: its agent serves the store on MASTER_PORT and says
# so (TORCHELASTIC_USE_AGENT_STORE=True); every rank joins it as a client.
torchrun_ --nproc_per_node 2 --master_port $port --no_python "$loom" $train --metrics "$tmp/static.jsonl" \
  > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/static.jsonl")" -eq 3 ] && grep -q "2 ranks" "$tmp/out"; then ok
else bad "torchrun, static rendezvous (rc $rc)"; fi

# 2. torchrun's c10d rendezvous: the agents meet on the endpoint, rank 0 serves Loom's store.
torchrun_ --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$((port + 1)) --no_python "$loom" $train \
  --metrics "$tmp/c10d.jsonl" > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/c10d.jsonl")" -eq 3 ]; then ok
else bad "torchrun, c10d rendezvous (rc $rc)"; fi
# Both ran the same model from the same seed: the same losses.
if cmp -s <(grep -o '"loss":[^,]*' "$tmp/static.jsonl") <(grep -o '"loss":[^,]*' "$tmp/c10d.jsonl"); then ok
else bad "torchrun's two rendezvous train the same losses"; fi

# 3. A world the command line asks for that torchrun did not start.
torchrun_ --nproc_per_node 2 --master_port $((port + 2)) --no_python "$loom" $train --nproc 4 > /dev/null 2> "$tmp/err"
if [ $? -ne 0 ] && grep -q "error: the command line asks for 4 ranks (--nproc x --nnodes), but torchrun started 2" "$tmp/err" &&
   grep -q "hint: under a launcher the launcher sets the world" "$tmp/err"; then ok
else bad "--nproc against torchrun's world"; fi

# 4. Open MPI: mpirun starts the ranks, Loom reads OMPI_COMM_WORLD_*.
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x MASTER_PORT=$((port + 3)) \
  "$loom" $train --metrics "$tmp/mpi.jsonl" > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/mpi.jsonl")" -eq 3 ] && grep -q "2 ranks" "$tmp/out"; then ok
else bad "mpirun (rc $rc)"; fi
if cmp -s <(grep -o '"loss":[^,]*' "$tmp/static.jsonl") <(grep -o '"loss":[^,]*' "$tmp/mpi.jsonl"); then ok
else bad "mpirun trains torchrun's losses"; fi

# The rank whose own error stopped the run is the one these launchers name, where each names the
# first rank to fail: rank 1's TAGC state is damaged, so it fails in its set-up and rank 0's
# collective breaks. The consequence waits before it exits (and writes torchrun's error file), so
# torchrun's summary gives rank 1 and its message as the root cause and mpirun names rank 1 as the
# first to fail (until 2026-11-28 both named rank 0, which exits as soon as rank 1 does).
printf 'sch.shard_states(params=2, grads=2, optim=2)\nsch["h.*.mlp.c_fc"].compress(ratio=10)\n' > "$tmp/tagc.sched"
tagc_run="run $tmp/tagc.sched --model gpt:tiny --data synthetic --seq 32 --micro-batch 2 --threads 1"
"$loom" $tagc_run --nproc 2 --steps 2 --save "$tmp/ckt" > /dev/null 2>&1
head -c 100 "$tmp/ckt/step-000002/rank_state/rank-1.pt" > "$tmp/rank1.pt" && mv "$tmp/rank1.pt" "$tmp/ckt/step-000002/rank_state/rank-1.pt"
damaged="error: checkpoint file $tmp/ckt/step-000002/rank_state/rank-1.pt is damaged"
torchrun_ --nproc_per_node 2 --master_port $((port + 11)) --no_python "$loom" $tagc_run --steps 3 --resume "$tmp/ckt" \
  > "$tmp/out" 2> "$tmp/err"
rc=$?
root_cause=$(sed -n '/^Root Cause/,/^====/p' "$tmp/err")
if [ $rc -eq 1 ] && grep -q "rank      : 1 (local_rank: 1)" <<< "$root_cause" && grep -qF "traceback : $damaged" <<< "$root_cause"; then ok
else bad "torchrun names the rank whose own error stopped the run (rc $rc): $(grep 'rank      :' <<< "$root_cause")"; fi
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x MASTER_PORT=$((port + 12)) \
  "$loom" $tagc_run --steps 3 --resume "$tmp/ckt" > "$tmp/out" 2> "$tmp/err"
rc=$?
cat "$tmp/out" >> "$tmp/err"  # mpirun says which process failed first on stdout
if [ $rc -eq 1 ] && grep -A3 "The first process to do so was" "$tmp/err" | grep -q "Process name: \[\[[0-9]*,1\],1\]" &&
   grep -qF "$damaged" "$tmp/err"; then ok
else bad "mpirun names the rank whose own error stopped the run (rc $rc)"; fi

# 5. A port already in use: rank 0 cannot serve the store there.
"$python" -c "
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $((port + 4)))); s.listen(); print('listening', flush=True); time.sleep(60)" > "$tmp/holder" &
holder=$!
for _ in $(seq 300); do grep -q listening "$tmp/holder" && break; sleep 0.1; done  # up to 30 s on busy cores
"$loom" $train --nproc 2 --master-port $((port + 4)) --timeout 5 > /dev/null 2> "$tmp/err"
rc=$?
kill $holder 2>/dev/null
if [ $rc -eq 1 ] && grep -q "error: rank 0 could not serve the rendezvous store: port $((port + 4)) is already in use on 127.0.0.1" "$tmp/err" &&
   grep -q "hint: another run, or a launcher that serves its own store, holds it: pick a free port" "$tmp/err" &&
   ! grep -q "internal error\|please report" "$tmp/err"; then ok
else bad "a port in use (rc $rc)"; fi

# 6. An unreachable master (TEST-NET-1, reserved: nothing answers there).
RANK=1 WORLD_SIZE=2 MASTER_ADDR=192.0.2.1 MASTER_PORT=$((port + 5)) "$loom" $train --timeout 3 > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "error: rank 1 could not reach the rendezvous store at 192.0.2.1:$((port + 5)) within 3 s" "$tmp/err" &&
   grep -q "hint: start every node with the same command" "$tmp/err" && ! grep -q "please report" "$tmp/err"; then ok
else bad "an unreachable master (rc $rc)"; fi
# torchrun's agent store that is not there (the variables set by hand, no agent).
TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=0 RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=$((port + 6)) "$loom" $train --timeout 3 > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc -eq 1 ] && grep -q "error: rank 0 could not reach torchrun's store at 127.0.0.1:$((port + 6)) within 3 s" "$tmp/err" &&
   grep -q "hint: torchrun's agent serves it" "$tmp/err"; then ok
else bad "torchrun's store missing (rc $rc)"; fi

# 7. Ranks started with different world sizes: both stop at once, saying so.
for r in 0 1; do
  RANK=$r WORLD_SIZE=$((r + 2)) LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 7)) \
    "$loom" $train --timeout 20 > /dev/null 2> "$tmp/err$r" &
done
start=$SECONDS
wait %1; rc0=$?
wait %2; rc1=$?
cat "$tmp/err0" "$tmp/err1" > "$tmp/err"
if [ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] && [ $((SECONDS - start)) -lt 15 ] &&
   grep -q "error: the ranks disagree on the world size: rank [01] was started in a world of [23] ranks, another rank in a world of [23]" "$tmp/err" &&
   grep -q "hint: start every rank with the same world size" "$tmp/err"; then ok
else bad "ranks that disagree on the world (rc $rc0 $rc1, $((SECONDS - start)) s)"; fi

# 8. Slurm: a one-node cluster of our own (munged, slurmctld and slurmd as root, on ports of
# this test), then `srun -n 2` starts the ranks; Loom reads SLURM_PROCID, SLURM_NTASKS,
# SLURM_STEP_TASKS_PER_NODE and the node list, and picks the port from SLURM_JOB_ID.
slurm_up() {
  local d="$tmp/slurm" node
  node=$(hostname -s)
  mkdir -p "$d/state" "$d/spool" "$d/munge" && chmod 755 "$d/munge"
  mungekey -c -f -k "$d/munge/munge.key" || return 1
  munged --force -S "$d/munge/sock" --key-file "$d/munge/munge.key" --log-file "$d/munged.log" \
    --pid-file "$d/munge/munged.pid" --seed-file "$d/munge/seed" || return 1
  cat > "$d/slurm.conf" <<CONF
ClusterName=loomtest
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$((port + 8))
SlurmdPort=$((port + 9))
AuthType=auth/munge
AuthInfo=socket=$d/munge/sock
CredType=cred/munge
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=loom Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF="$d/slurm.conf"
  slurmctld -f "$SLURM_CONF" && slurmd -f "$SLURM_CONF" || return 1
  for _ in $(seq 100); do sinfo -h -o %t 2>/dev/null | grep -q idle && return 0; sleep 0.2; done
  return 1
}
if slurm_up > "$tmp/err" 2>&1; then
  # MASTER_PORT: apart from the ports launch_test.sh draws, where job 1 would put it (20001)
  MASTER_PORT=$((port + 10)) timeout 120 srun -n 2 "$loom" $train --metrics "$tmp/slurm.jsonl" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc -eq 0 ] && [ "$(wc -l < "$tmp/slurm.jsonl")" -eq 3 ] && grep -q "2 ranks" "$tmp/out" &&
     cmp -s <(grep -o '"loss":[^,]*' "$tmp/static.jsonl") <(grep -o '"loss":[^,]*' "$tmp/slurm.jsonl"); then ok
  else bad "srun (rc $rc)"; fi
else
  cat "$tmp/slurm/"*.log >> "$tmp/err" 2>/dev/null
  bad "a one-node Slurm did not start (munged, slurmctld, slurmd from slurm-wlm)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
