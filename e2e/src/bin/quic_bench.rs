//! The QUIC relay benchmark (doc/performance.md, "QUIC relay"): datagrams
//! per second and the proxy's CPU per datagram on established flows,
//! through preread's QUIC listener and nginx's `stream` UDP proxy
//! (`listen … udp`, which cannot route by name: the floor for a UDP
//! relay), in one run, on loopback; and what the socket calls cost on
//! their own (`--phase syscalls`), to choose the relay's I/O.
//!
//! Usage: `quic_bench [--targets direct,preread,nginx] [--flows 64]
//! [--secs 5] [--size 1200] [--window 256] [--workers 1]
//! [--phase relay|syscalls]`
//!
//! `relay`: an echo backend (one thread, `recvmmsg`/`sendmmsg`), and
//! `--flows` client sockets, each one flow: it sends a QUIC client Initial
//! (curl's ClientHello, SNI `a.example.com`, routed by preread) and waits
//! for its echo, then short-header datagrams of `--size` bytes. For each
//! target, started fresh and stopped by its PID:
//!
//! - saturation: a closed loop with `--window` datagrams in flight over
//!   all flows for `--secs`: round trips per second, and the proxy's CPU
//!   (user + sys of `/proc/PID/stat`) per datagram it relayed (each round
//!   trip is two: one each way);
//! - half: an open loop at 50% of that rate for `--secs`: the same, and
//!   the datagrams lost (sent, not echoed within a second after), and
//!   where the kernel dropped datagrams meanwhile (each socket's `drops`
//!   in `/proc/net/udp`): the client sockets, the proxy's listener, the
//!   proxy's sockets towards the backend, the backend's socket.
//!
//! `syscalls`: one thread's CPU per datagram (`RUSAGE_THREAD`) of `send`
//! on a connected socket, `send_to` on an unconnected one, `sendmmsg` in
//! batches of 32; `recv_from` one at a time and `recvmmsg` in batches of
//! 32 on a socket another thread fills.
//!
//! Every loop is bounded in time; only loopback is used. Prints a
//! markdown table.

#[path = "../bench/procfs.rs"]
#[allow(dead_code)]
mod procfs;
#[path = "../quic_bench/mod.rs"]
mod quic_bench;

use std::time::Duration;

use quic_bench::{Options, Target, relay, syscalls};

fn main() {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("quic_bench: {e}");
            std::process::exit(2);
        }
    };
    println!("uptime: {}", quic_bench::uptime());
    if options.phase == "syscalls" {
        syscalls::run(Duration::from_secs(options.secs), options.size);
        return;
    }
    println!(
        "| target | flows | saturation (round trips/s) | CPU µs/datagram at saturation | 50% rate (round trips/s) | CPU µs/datagram at 50% | lost at 50% | kernel drops at 50%: clients / proxy listener / proxy to backend / backend |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for target in &options.targets {
        match relay::measure(*target, &options) {
            Ok(row) => println!("{row}"),
            Err(e) => println!("| {} | error: {e} |", Target::name(*target)),
        }
    }
    println!("uptime: {}", quic_bench::uptime());
}
