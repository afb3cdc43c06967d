#!/usr/bin/env bash
# The control-plane scale benchmark (doc/performance.md, "Control plane at
# scale"): start, reload, runtime adds and memory at 1,000, 10,000 and
# 100,000 routes.
#
#   bash bench/scale.sh [scale options...]    e.g. --routes 1000,100000 --adds 200
#
# Builds preread and the scale tool in release (fat LTO: a few minutes),
# then runs `target/release/scale` (e2e/src/bin/scale.rs; its header lists
# the options and the steps). Writes target/bench/scale/scale.md and
# scale.jsonl (SCALE_OUT overrides the directory). Every proxy it starts is
# stopped by its PID, and the whole run is bounded by `timeout`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p proxy-shell -p e2e --bin preread --bin scale
out=${SCALE_OUT:-target/bench/scale}
timeout 3600 target/release/scale --out "$out" "$@"
