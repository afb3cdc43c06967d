#!/usr/bin/env bash
# The etcd fleet benchmark (doc/performance.md, "A fleet fed by etcd"):
# first sync of 10,000 route keys, VmRSS against the same routes from a
# file, one-key changes seen by three replicas (p50/p99), and the memory
# of a bulk update of every key.
#
#   bash bench/etcd_fleet.sh [--routes 10000] [--changes 100]
#
# Builds preread and the tool in release, then runs
# `target/release/etcd_bench` (e2e/src/bin/etcd_bench.rs; its header lists
# the steps). It starts a 3-member etcd of its own on loopback (Debian's
# etcd-server, installed when missing) and stops everything by PID; the
# whole run is bounded by `timeout`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p proxy-shell -p e2e --bin preread --bin etcd_bench
target=${CARGO_TARGET_DIR:-target}
timeout 1800 "$target/release/etcd_bench" "$@"
