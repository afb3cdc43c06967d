//! End-to-end checks of TCP keepalive against the real `preread` process:
//! with `backend_keepalive`, both sockets of a piped session carry the
//! kernel's keepalive timer, armed for the configured idle time; by
//! default only the client's does; `tcp_keepalive = false` leaves both
//! without it.
//!
//! The timers are read where the kernel shows them, `/proc/net/tcp` (the
//! `tr` field is 2 while a keepalive timer is pending, `tm->when` is in
//! clock ticks of 1/100 s). Loopback only; every wait is bounded; the proxy
//! is stopped on Drop. Run `cargo build -p proxy-shell` first.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use e2e::backend::PlainBackend;
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{eventually, stderr_tail};

/// Bound of one wait.
const T: Duration = Duration::from_secs(10);
/// Clock ticks per second of `/proc/net/tcp`'s `tm->when` (`USER_HZ`).
const TICKS_PER_S: u64 = 100;
/// The `tr` value of a socket whose keepalive timer is pending.
const KEEPALIVE_TIMER: u8 = 2;
/// The `st` value of an established socket.
const ESTABLISHED: &str = "01";
/// The idle time the first test configures: far enough from the default
/// that a timer armed for one cannot pass for the other within the wait
/// `T`, and long enough that no probe fires before the read.
const IDLE_S: u64 = 37;
/// The documented default idle time (doc/configure.md §2.1).
const DEFAULT_IDLE_S: u64 = 60;

/// Whether a keepalive timer read `elapsed` after the session's connect
/// began was armed for `idle_s` at some moment since then. The bound comes
/// from the configured value and the time measured, never from when the
/// read happens to land: on a loaded machine the read may come seconds
/// late, and the timer has then run down by as much. The kernel's timer
/// wheel rounds a long timeout up by at most an eighth, and one tick of
/// clock granularity is allowed either way.
fn armed_for(idle_s: u64, elapsed: Duration, (tr, when): Timer) -> bool {
    let idle = idle_s * TICKS_PER_S;
    let ran_down = elapsed.as_millis() as u64 * TICKS_PER_S / 1000 + 1;
    tr == KEEPALIVE_TIMER && when + ran_down >= idle && when <= idle + idle / 8 + 1
}

/// An IPv4 address as `/proc/net/tcp` writes it: the address as a
/// host-order word of its network bytes, then the port, in hex.
fn proc_addr(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        ),
        SocketAddr::V6(_) => panic!("the test uses 127.0.0.1 only"),
    }
}

/// A socket's pending timer (`tr`) and its expiry in ticks (`tm->when`).
type Timer = (u8, u64);

/// The timers of every established socket matching `wanted(local, remote)`.
fn timers(wanted: impl Fn(&str, &str) -> bool) -> Vec<Timer> {
    let text = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, remote, state) = (*fields.get(1)?, *fields.get(2)?, *fields.get(3)?);
            if state != ESTABLISHED || !wanted(local, remote) {
                return None;
            }
            let (tr, when) = fields.get(5)?.split_once(':')?;
            Some((
                u8::from_str_radix(tr, 16).ok()?,
                u64::from_str_radix(when, 16).ok()?,
            ))
        })
        .collect()
}

/// A catch-all listener to a plain echo backend, with `globals`.
fn start(backend: &PlainBackend, globals: &[&str]) -> ProxyProcess {
    let mut config = ConfigBuilder::new()
        .listener("main", &[])
        .frontend("plain", "main", None, &[])
        .backend("plain", "plain-0", backend.addr());
    for line in globals {
        config = config.global(line);
    }
    ProxyProcess::start(&config.build()).expect("proxy ready")
}

/// Opens a session and waits until it is piped (the backend answered);
/// with the moment its connect began, which bounds when the proxy armed
/// the session's timers.
fn piped_session(proxy: &ProxyProcess) -> (TcpStream, Instant) {
    let began = Instant::now();
    let mut stream = TcpStream::connect(proxy.listener()).expect("connect");
    stream.set_read_timeout(Some(T)).expect("read timeout");
    stream.write_all(b"hello\n").expect("write");
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .expect("the backend's answer");
    assert_eq!(line, "backend=plain-0\n", "{}", stderr_tail(proxy));
    (stream, began)
}

/// The proxy's two sockets of the session: (the client's side, the
/// backend's side).
fn session_timers(
    proxy: &ProxyProcess,
    client: &TcpStream,
    backend: &PlainBackend,
) -> (Vec<Timer>, Vec<Timer>) {
    let front = (
        proc_addr(proxy.listener()),
        proc_addr(client.local_addr().expect("client address")),
    );
    let back = proc_addr(backend.addr());
    let front_side = timers(|local, remote| local == front.0 && remote == front.1);
    // Only the proxy's socket has the backend as its peer: the backend's
    // own socket has it as its local address.
    let back_side = timers(|_, remote| remote == back);
    (front_side, back_side)
}

#[test]
fn both_sockets_of_a_session_probe_after_the_configured_idle_time() {
    let backend = PlainBackend::start("plain-0");
    let proxy = start(
        &backend,
        &[
            &format!("tcp_keepalive_idle = {IDLE_S}"),
            "backend_keepalive = true",
        ],
    );
    let (client, began) = piped_session(&proxy);
    let mut seen = (Vec::new(), Vec::new());
    // A timer shows as retransmit (1) while data is unacknowledged; on
    // loopback that lasts microseconds.
    let armed = eventually(T, || {
        seen = session_timers(&proxy, &client, &backend);
        let (front, back) = &seen;
        [front, back].iter().all(|side| {
            side.len() == 1
                && side
                    .iter()
                    .all(|&timer| armed_for(IDLE_S, began.elapsed(), timer))
        })
    });
    assert!(armed, "client side, backend side: {seen:?}");
}

#[test]
fn the_default_probes_the_client_side_and_false_turns_it_off() {
    let backend = PlainBackend::start("plain-0");
    let on = start(&backend, &[]);
    let (client, began) = piped_session(&on);
    let mut seen = (Vec::new(), Vec::new());
    // The client's side probes; the backend's has no timer once the
    // exchange is acknowledged (`backend_keepalive` is off by default).
    let armed = eventually(T, || {
        seen = session_timers(&on, &client, &backend);
        let (front, back) = &seen;
        front.len() == 1
            && front
                .iter()
                .all(|&timer| armed_for(DEFAULT_IDLE_S, began.elapsed(), timer))
            && back.len() == 1
            && back.iter().all(|&(tr, _)| tr == 0)
    });
    assert!(armed, "default: client side, backend side: {seen:?}");
    drop(client);
    drop(on);

    let backend = PlainBackend::start("plain-0");
    let off = start(&backend, &["tcp_keepalive = false"]);
    let (client, _) = piped_session(&off);
    let mut seen = (Vec::new(), Vec::new());
    // No timer at all once the exchange is acknowledged: an idle
    // established socket without keepalive has none.
    let none = eventually(T, || {
        seen = session_timers(&off, &client, &backend);
        let (front, back) = &seen;
        [front, back]
            .iter()
            .all(|side| side.len() == 1 && side.iter().all(|&(tr, _)| tr == 0))
    });
    assert!(none, "off: client side, backend side: {seen:?}");
}
