#!/bin/bash
# RSS of preread across a flood of N route files added, then removed.
# usage: bench/route_flood.sh BINARY [N]   (loopback only; the proxy is stopped by its pid)
set -u
BIN=$(realpath "$1"); N=${2:-1000}
D=$(mktemp -d /tmp/flood.XXXX); mkdir -p $D/conf.d
PORT=$((20000 + RANDOM % 20000))
cat > $D/preread.toml <<T
command_socket = "preread.sock"
[[listeners]]
address = "127.0.0.1:$PORT"
[sources.directory]
path = "conf.d"
T
cd $D
$BIN start -c $D/preread.toml > $D/log 2>&1 &
PID=$!
rss() { awk '/VmRSS/{print $2}' /proc/$PID/status; }
routes() { $BIN -c $D/preread.toml frontend list 2>/dev/null | grep -c example; }
for i in $(seq 1 50); do [ -S $D/preread.sock ] && break; sleep 0.1; done
sleep 0.5
echo "boot: rss $(rss) kB"
for i in $(seq 1 $N); do
  printf '[clusters.c%d]\nfrontends = [{ address = "127.0.0.1:%d", sni = "n%d.example.com" }]\nbackends = [{ address = "127.0.0.1:9", backend_id = "c%d-0" }]\n' $i $PORT $i $i > conf.d/c$i.toml
done
for i in $(seq 1 120); do r=$(routes); [ "$r" -ge "$N" ] && break; sleep 0.5; done
echo "after $N files: routes $(routes), rss $(rss) kB"
rm -f conf.d/*.toml
for i in $(seq 1 120); do r=$(routes); [ "$r" -eq 0 ] && break; sleep 0.5; done
sleep 1
echo "after removal: routes $(routes), rss $(rss) kB, warn lines $(grep -c WARN $D/log)"
kill $PID; wait $PID 2>/dev/null
grep WARN $D/log | head -3; rm -rf $D
