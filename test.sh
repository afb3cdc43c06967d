#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs the Debian packages of
# the operator tools that the end-to-end tests drive, when they are missing,
# then runs `cargo test --workspace` (extra arguments are passed to it).
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

exec cargo test --workspace "$@"
