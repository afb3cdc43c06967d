#!/usr/bin/env bash
# Installs the peer proxies of the data-path benchmark (Debian's haproxy and
# nginx, with nginx's stream module) and strace when missing, and prints
# their versions.
# The packages' own services are not used: bench/run.sh starts each peer in
# the foreground with its own config on loopback ports, and stops it by PID.
#
#   bash bench/peers.sh
set -euo pipefail

need=()
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
# nginx-light has no stream module; the Debian `nginx` package (bookworm:
# nginx-core) loads ngx_stream_module, which has ssl_preread.
if ! command -v nginx >/dev/null 2>&1; then
    need+=(nginx)
fi
# libnginx-mod-stream: the dynamic stream module (ssl_preread is built in).
if ! ls /usr/lib/nginx/modules/ngx_stream_module.so >/dev/null 2>&1; then
    need+=(libnginx-mod-stream)
fi

# strace: the syscalls-per-connection phase attaches it to each proxy.
command -v strace >/dev/null 2>&1 || need+=(strace)

if ((${#need[@]})); then
    echo "peers: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # policy-rc.d 101: the packages' postinst must not start their services
    # (bench/run.sh runs its own instances on loopback ports).
    had_policy=0
    [[ -e /usr/sbin/policy-rc.d ]] && had_policy=1
    if ((!had_policy)); then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
    fi
    apt-get install -y -q --no-install-recommends "${need[@]}"
    if ((!had_policy)); then rm -f /usr/sbin/policy-rc.d; fi
fi

haproxy -v | sed -n 1p
nginx -v 2>&1
ls /usr/lib/nginx/modules/ngx_stream_module.so
strace -V | sed -n 1p
