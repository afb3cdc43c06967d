#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs the Debian packages of
# the operator tools that the end-to-end tests drive, when they are missing,
# then runs `cargo test --workspace --no-fail-fast` (extra arguments are
# passed to it): a failing test binary never hides the ones after it, and
# the run ends with one line per test binary and the totals.
# The tests check for their tools again and fail saying why when one is
# still missing; none is skipped.
set -euo pipefail
cd "$(dirname "$0")"

# tool package: one pair per tool (kept in step with the tests'
# `require_tool` calls by e2e/tests/test_script.rs); a tool given as an
# absolute path is a file the package installs (a Python module).
TOOLS="
openssl openssl
curl curl
systemd-analyze systemd
dockerd docker.io
busybox busybox-static
unshare util-linux
python3 python3
promtool prometheus
etcd etcd-server
etcdctl etcd-client
gtlsclient ngtcp2-client
gtlsserver ngtcp2-server
tcpdump tcpdump
/usr/bin/python3 python3
/usr/lib/python3/dist-packages/prometheus_client/parser.py python3-prometheus-client
"

missing=()
while read -r tool package; do
    [ -n "$tool" ] || continue
    case "$tool" in
    /*) [ -e "$tool" ] || missing+=("$package") ;;
    *) command -v "$tool" >/dev/null 2>&1 || missing+=("$package") ;;
    esac
done <<<"$TOOLS"

if [ "${#missing[@]}" -gt 0 ]; then
    echo "test.sh: installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

log=$(mktemp "${TMPDIR:-/tmp}/preread-test.XXXXXX")
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?

# cargo prints "Running <binary>" (or "Doc-tests <crate>") before each
# binary's tests and "test result: ..." after them.
awk '
    /^ *Running / { name = ($2 == "unittests" ? $3 : $2); next }
    /^ *Doc-tests / { name = "doc-tests " $2; next }
    /^test result: / {
        for (i = 1; i <= NF; i++) {
            if ($(i + 1) ~ /^passed;?$/) p = $i
            if ($(i + 1) ~ /^failed;?$/) f = $i
            if ($(i + 1) ~ /^ignored;?$/) g = $i
        }
        printf "%-6s %5d passed %3d failed  %s\n", (f > 0 ? "FAIL" : "ok"), p, f, name
        passed += p; failed += f; ignored += g
    }
    END {
        printf "\nsummary: %d passed, %d failed, %d skipped\n", passed, failed, ignored
    }
' "$log"
exit "$status"
