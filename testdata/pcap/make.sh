#!/usr/bin/env bash
# Makes the captures of this folder with real tools on loopback (run as
# root: tcpdump and dumpcap need CAP_NET_RAW). Each holds one TCP TLS
# connection (`openssl s_client`) and one QUIC connection through a Retry
# (Debian's ngtcp2 `gtlsclient` against `gtlsserver --validate-addr`):
#
# - lo.pcap: `tcpdump -i lo -w` over IPv4 (pcap, Ethernet link type);
#   TCP with SNI a.example.com and ALPN h2,http/1.1, QUIC with SNI
#   b.example.com (ALPN h3).
# - any.pcapng: `dumpcap -i any -w` over IPv6 (pcapng, Linux cooked link
#   type); TCP with SNI c.example.com, QUIC with SNI d.example.com.
# - split.pcap: `tcpdump -i any -y LINUX_SLL` in a network namespace of
#   its own whose loopback has an MTU of 600: a ClientHello of about 1.4 KB
#   (SNI e.example.com and a long ALPN list) in three TCP segments.
# - snap.pcap: `tcpdump -i lo -s 150`: both connections (SNI f.example.com
#   over TCP) with every packet cut after 150 bytes.
#
# ngtcp2 0.12's gtlsclient sends `localhost` as the SNI of a numeric host,
# whatever --sni says.
#
# The ClientHellos are plaintext; the servers' keys are made here and
# thrown away with the temporary folder. Needs openssl, tcpdump,
# tshark (dumpcap), ethtool, ngtcp2-client and ngtcp2-server.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=example.com -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
mkdir "$work/htdocs"
echo hello >"$work/htdocs/hello.txt"

# One capture: $1 the file, $2 the capture command's prefix, $3 the
# loopback address, $4/$5 the TCP and QUIC names.
capture() {
    local file=$1 tool=$2 host=$3 tcp_name=$4 quic_name=$5
    local tcp_port=$((20000 + RANDOM % 10000)) quic_port=$((30000 + RANDOM % 10000))
    openssl s_server -accept "[$host]:$tcp_port" -key "$work/key.pem" -cert "$work/cert.pem" \
        -naccept 1 -quiet </dev/null >/dev/null 2>&1 &
    pids+=($!)
    gtlsserver -q --validate-addr --htdocs="$work/htdocs" "$host" "$quic_port" \
        "$work/key.pem" "$work/cert.pem" >/dev/null 2>&1 &
    pids+=($!)
    local filter="tcp port $tcp_port or udp port $quic_port"
    case "$tool" in
    tcpdump) tcpdump -i lo -s 0 -U -w "$work/$file" "$filter" 2>/dev/null & ;;
    dumpcap) dumpcap -q -i any -s 0 -f "$filter" -w "$work/$file" 2>/dev/null & ;;
    sll) tcpdump -i any -y LINUX_SLL -s 0 -U -w "$work/$file" "$filter" 2>/dev/null & ;;
    snap) tcpdump -i lo -s 150 -U -w "$work/$file" "$filter" 2>/dev/null & ;;
    esac
    local capturer=$!
    pids+=("$capturer")
    sleep 2
    echo | timeout 10 openssl s_client -connect "[$host]:$tcp_port" -servername "$tcp_name" \
        -alpn "$alpn" >/dev/null 2>&1 || true
    timeout 10 gtlsclient -q --sni="$quic_name" --exit-on-all-streams-close --timeout=5s \
        --download="$work" "$host" "$quic_port" "https://$quic_name/hello.txt" >/dev/null 2>&1 || true
    sleep 1
    kill -INT "$capturer"
    wait "$capturer" 2>/dev/null || true
    cp "$work/$file" "$here/$file"
    chmod 644 "$here/$file"
}

alpn=h2,http/1.1
if [ "${1:-}" = split ]; then
    ip link set lo up mtu 600
    # Else tcpdump sees the segments before the loopback cuts them.
    ethtool -K lo tso off gso off >/dev/null
    long=$(printf 'x%.0s' $(seq 200))
    alpn="h2,http/1.1,$long-1,$long-2,$long-3,$long-4,$long-5"
    capture split.pcap sll 127.0.0.1 e.example.com e.example.com
    exit 0
fi
capture lo.pcap tcpdump 127.0.0.1 a.example.com b.example.com
capture any.pcapng dumpcap ::1 c.example.com d.example.com
capture snap.pcap snap 127.0.0.1 f.example.com f.example.com
unshare -n "$0" split
ls -l "$here"/*.pcap "$here"/*.pcapng
