#!/usr/bin/env bash
# The data-path benchmark (doc/performance.md, "Data path" and "The
# kernel's floor"): preread with splice on and off (and without deferred
# accept), HAProxy (without and with its own splice) and nginx, each against
# the direct connection measured in the same run, on loopback; then the
# same proxies with two workers each (rate and syscalls).
#
#   bash bench/run.sh [bench options...]      e.g. --reps 1 --bytes 1073741824
#
# The options go to every run (the second adds `--workers 2 --phases
# rate,syscalls --slow 0`, the third `--pipe-size 1048576 --phases
# throughput` for the bulk with 1 MiB pipes on both splicing proxies). Both rate phases run with `--pin`: the proxy on
# its own CPUs and the load generator on the others where the machine has
# CPUs enough (one worker on two CPUs: proxy on the second, clients and
# backends on the first; two workers on two CPUs: unpinned, and the
# summary says so). Binaries come from $CARGO_TARGET_DIR (default
# target/).
#
# Installs the peers if missing (bench/peers.sh), builds preread and the bench
# tool in release (fat LTO: a few minutes), records the machine, then runs
# `target/release/bench` (e2e/src/bin/bench.rs; its header lists the
# options; its phases are throughput, rate, memory and syscalls, the last
# one `strace -c -f` attached to each proxy for a fixed connection count).
# Writes under target/bench/<UTC time>/ (BENCH_OUT overrides; the
# two-worker run in its workers2/, the 1 MiB-pipe bulk in pipes1m/):
#   machine.txt   CPU, kernel, versions, limits, other busy processes
#   loadavg.txt   /proc/loadavg and the busiest processes every 5 s
#   raw.jsonl     one JSON object per measurement
#   summary.md    the tables (also printed), then the issue's ratios from
#                 the medians of the alternated repetitions, bulk among
#                 them: preread-splice against haproxy-splice (GiB/s, both
#                 transfers together) and its CPU per GiB against haproxy's
#                 copy path
#   logs/, work/  proxies' stderr when not empty; HAProxy/nginx configs;
#                 work/strace-<target>-<rep>.txt, strace's own summaries
# and points target/bench/latest at it. Everything it starts is stopped by
# PID; the bench is bounded (each phase, and `timeout` around the whole).
set -euo pipefail
cd "$(dirname "$0")/.."

# 1,000 established spliced sessions hold 6,000 descriptors in preread, and
# the bench holds 2,000 more; the sandbox's hard limit may be lower than we'd
# like, so take the hard limit and insist on 16,384.
hard=$(ulimit -Hn)
if [[ $hard == unlimited || $hard -gt 65536 ]]; then hard=65536; fi
ulimit -n "$hard"
if (( $(ulimit -n) < 16384 )); then
    echo "run.sh: ulimit -n is $(ulimit -n), need 16384" >&2
    exit 1
fi

bash bench/peers.sh
cargo build --release -p proxy-shell -p e2e --bin preread --bin bench
bin=${CARGO_TARGET_DIR:-target}/release

out=${BENCH_OUT:-target/bench/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
{
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo -) (uncommitted files: $(git status --short 2>/dev/null | wc -l))"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "kernel: $(uname -r)"
    echo "memory: $(grep MemTotal /proc/meminfo | awk '{print $2 " kB"}')"
    echo "haproxy: $(haproxy -v | sed -n 1p)"
    echo "nginx: $(nginx -v 2>&1)"
    echo "rustc: $(rustc -V)"
    echo "strace: $(strace -V | sed -n 1p)"
    echo "ulimit -n: $(ulimit -n)"
    echo "splice in the worker: $(grep -ln 'libc::splice' worker-shell/src/worker/*.rs | tr '\n' ' ')"
    for s in net.ipv4.tcp_tw_reuse net.ipv4.ip_local_port_range net.core.somaxconn; do
        echo "$s: $(sysctl -n $s | tr '\t' ' ')"
    done
    echo "uptime before: $(uptime)"
    echo "busiest processes before:"
    ps -eo pid,pcpu,etime,comm --sort=-pcpu | head -8
} >"$out/machine.txt"
cat "$out/machine.txt"

# Load sampler, bounded (at most 2 h), stopped by its PID.
# Each line: time, /proc/loadavg, the three busiest processes (%CPU over
# their lifetime, as ps reports it) — to tell our load from other tenants'.
( for _ in $(seq 1 1440); do
      echo "$(date +%T) $(cat /proc/loadavg) | $(ps -eo pcpu,comm --sort=-pcpu | sed -n 2,4p | tr -s ' \n' ' ')"
      sleep 5
  done ) >"$out/loadavg.txt" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT

status=0
export PREREAD_BIN
PREREAD_BIN=$(cd "$bin" && pwd)/preread
timeout 5400 "$bin/bench" --out "$out" --pin "$@" || status=$?
# Two workers each: preread `worker_count = 2`, HAProxy `nbthread 2`, nginx
# `worker_processes 2` (under its master).
timeout 3600 "$bin/bench" --out "$out/workers2" --targets preread-copy,preread-splice,haproxy,nginx \
    --pin "$@" --workers 2 --phases rate,syscalls --slow 0 || status=$?

# Bulk with equal 1 MiB pipes on both splicing proxies (preread
# `splice_pipe_size`, HAProxy `tune.pipesize`): the first run leaves both at
# the kernel's default.
timeout 3600 "$bin/bench" --out "$out/pipes1m" --targets preread-splice,haproxy-splice,haproxy \
    "$@" --pipe-size 1048576 --phases throughput || status=$?

echo "uptime after: $(uptime)" | tee -a "$out/machine.txt"
ln -sfn "$out" target/bench/latest
echo "results: $out (target/bench/latest)"
exit "$status"
