//! End-to-end checks of the zero-copy pipe (`splice = true`, Linux
//! `splice(2)`) against the real `preread` process, and of the copy path it
//! replaces (`splice = false`): the inherited ClientHello window goes out
//! before any spliced byte, an EOF waits for the kernel pipe to drain, big
//! transfers arrive intact both ways, and a spliced session gives its pooled
//! buffers back.
//!
//! Loopback only; every wait is bounded; the proxy and the backends are
//! stopped on Drop. Run `cargo build -p proxy-shell` first.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use e2e::backend::{BackendConfig, PlainBackend, TlsBackend, pattern};
use e2e::client::{self, half_close, read_line, read_tls_to_close, read_to_close, tls_client};
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::stderr_tail;

/// Bound of one wait (a metric, a backend record).
const T: Duration = Duration::from_secs(10);
/// Bound of a big transfer's reads.
const BIG_T: Duration = Duration::from_secs(60);
const MIB: usize = 1 << 20;
/// What the plain backend answers first.
const PLAIN_LINE: &[u8] = b"backend=plain-0\n";

fn corpus(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/clienthellos")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// A config of `globals` and one route: listener `main`, `sni` to
/// cluster `cluster`, whose one backend `<cluster>-0` is at `addr`.
fn one_route(globals: &[String], cluster: &str, sni: &str, addr: SocketAddr) -> String {
    globals
        .iter()
        .fold(ConfigBuilder::new(), |config, line| config.global(line))
        .listener("main", &[])
        .frontend(cluster, "main", Some(sni), &[])
        .backend(cluster, &format!("{cluster}-0"), addr)
        .build()
}

/// No session leaked, and no direction fell back from splice (TCP always
/// supports it).
fn assert_clean(proxy: &ProxyProcess) {
    for gauge in ["tcp.sni_preread.active", "tcp.active"] {
        if let Err(err) = proxy.wait_metric(gauge, |v| v == 0, T) {
            panic!("{err}; stderr:\n{}", stderr_tail(proxy));
        }
    }
    assert_eq!(
        proxy.metric("splice.fallbacks"),
        0,
        "splice fell back on TCP"
    );
    assert_eq!(proxy.metric("session.loop_guard"), 0);
}

/// The raw bytes of the `index`-th connection of a backend, once it holds
/// at least `len` bytes (the recording trails the exchange).
fn recorded(connections: impl Fn() -> Vec<Vec<u8>>, index: usize, len: usize) -> Vec<u8> {
    let deadline = Instant::now() + T;
    while Instant::now() < deadline && connections().get(index).is_none_or(|raw| raw.len() < len) {
        std::thread::sleep(Duration::from_millis(10));
    }
    connections().get(index).cloned().unwrap_or_default()
}

/// Checks a plain backend's answer to `sent`: its line, then the echo of
/// whatever followed its first read (a suffix of `sent`), then `bye`.
fn assert_plain_answer(answer: &[u8], sent: &[u8]) {
    assert!(
        answer.starts_with(PLAIN_LINE),
        "answer starts {:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(40)])
    );
    assert!(answer.ends_with(b"bye\n"), "no bye at the end");
    let echo = &answer[PLAIN_LINE.len()..answer.len() - 4];
    assert!(echo.len() < sent.len(), "echoed more than was sent");
    assert!(
        sent.ends_with(echo),
        "the echo is not the tail of what was sent"
    );
}

/// The ClientHello, a payload coalesced in the same write, and the FIN
/// right behind them: every byte reaches the backend in order (the window
/// first, then what is spliced), with and without a PROXY header before it.
#[test]
fn hello_payload_and_immediate_fin_arrive_whole() {
    let plain = PlainBackend::start("plain-0");
    let sent_to = PlainBackend::start("plain-0");
    let config = ConfigBuilder::new()
        .global("splice = true")
        .listener("main", &[])
        .frontend("plain", "main", Some("a.example.com"), &[])
        .backend("plain", "plain-0", plain.addr())
        .cluster("sent", &["proxy_protocol = \"send\""])
        .frontend("sent", "main", Some("www.b.example.com"), &[])
        .backend("sent", "sent-0", sent_to.addr())
        .build();
    let proxy = ProxyProcess::start(&config).expect("proxy ready");
    let addr = proxy.addr("main");

    for (round, payload) in [1usize, 4096, 300_000].into_iter().enumerate() {
        let mut sent = corpus("curl_h2.bin");
        sent.extend_from_slice(&pattern(payload + round));
        let mut tcp = client::connect(addr, T).expect("connect");
        tcp.write_all(&sent).expect("write");
        tcp.shutdown(Shutdown::Write).expect("FIN");
        let (answer, closed) = read_to_close(&mut tcp, T);
        assert!(closed, "the proxy closed after the backend");
        assert_plain_answer(&answer, &sent);
        assert_eq!(
            recorded(|| plain.connections(), round, sent.len()),
            sent,
            "what the backend received (payload {payload})"
        );
    }

    // proxy_protocol = "send": the PROXY v2 header, then the window, then
    // the spliced rest.
    let mut sent = corpus("curl_http11.bin");
    sent.extend_from_slice(&pattern(200_000));
    let mut tcp = client::connect(addr, T).expect("connect");
    tcp.write_all(&sent).expect("write");
    tcp.shutdown(Shutdown::Write).expect("FIN");
    let (answer, closed) = read_to_close(&mut tcp, T);
    assert!(closed);
    assert!(answer.starts_with(PLAIN_LINE) && answer.ends_with(b"bye\n"));
    let raw = recorded(|| sent_to.connections(), 0, sent.len() + 16);
    assert!(
        raw.starts_with(b"\r\n\r\n\x00\r\nQUIT\n"),
        "a PROXY v2 header first"
    );
    let header = 16 + usize::from(u16::from_be_bytes([raw[14], raw[15]]));
    assert_eq!(raw.len(), header + sent.len());
    assert!(
        raw[header..] == sent[..],
        "then the client's bytes, in order"
    );

    assert_clean(&proxy);
}

/// 16 MiB from the backend, then 16 MiB echoed back in 64 KiB rounds, then
/// a half-close answered by `bye`; `pipe_size` is `splice_pipe_size`
/// (unset: the kernel's default pipes), and no pipe grows
/// (`splice_bulk_pipe_size = 0`): the pipes keep the size asked for.
fn sixteen_mebibytes_both_ways(splice: bool, pipe_size: Option<usize>) {
    const LEN: usize = 16 * MIB;
    let big =
        TlsBackend::start(BackendConfig::new("big-0", &["big.example.com"]).big_response(LEN));
    let mut globals = vec![
        format!("splice = {splice}"),
        "splice_bulk_pipe_size = 0".to_owned(),
    ];
    globals.extend(pipe_size.map(|size| format!("splice_pipe_size = {size}")));
    let config = one_route(&globals, "big", "big.example.com", big.addr());
    let proxy = ProxyProcess::start(&config).expect("proxy ready");
    let mut stream = tls_client(proxy.addr("main"), "big.example.com", &[]).expect("handshake");
    let _ = stream.sock.set_read_timeout(Some(BIG_T));
    stream.write_all(b"start\n").expect("write");
    stream.flush().expect("flush");
    let line = read_line(&mut stream).expect("first line");
    assert_eq!(line, "backend=big-0 alpn=- sni=big.example.com");
    let mut down = vec![0u8; LEN];
    stream.read_exact(&mut down).expect("16 MiB down");
    assert!(down == pattern(LEN), "the 16 MiB answer differs");
    let up = pattern(LEN + 17);
    let up = &up[17..];
    let mut echo = vec![0u8; 64 * 1024];
    for (i, chunk) in up.chunks(64 * 1024).enumerate() {
        stream.write_all(chunk).expect("write a chunk");
        stream.flush().expect("flush");
        let back = &mut echo[..chunk.len()];
        stream.read_exact(back).expect("its echo");
        assert!(back == chunk, "the echo of chunk {i} differs");
    }
    half_close(&mut stream).expect("half close");
    let (rest, clean) = read_tls_to_close(&mut stream, T);
    assert_eq!(rest, b"bye\n");
    assert!(clean, "the backend closed with close_notify");
    drop(stream);
    assert_clean(&proxy);
    let out = proxy.metric("bytes_out");
    assert!(out > 2 * LEN as i64, "bytes_out {out} misses bytes");
    assert!(big.errors().is_empty(), "{:?}", big.errors());
}

/// Through 1 MiB pipes (`splice_pipe_size = 1048576`).
#[test]
fn sixteen_mebibytes_both_ways_spliced() {
    sixteen_mebibytes_both_ways(true, Some(MIB));
}

/// Through one-page pipes: every splice moves at most 4 KiB, the pipe
/// fills and drains thousands of times each way.
#[test]
fn sixteen_mebibytes_both_ways_through_small_pipes() {
    sixteen_mebibytes_both_ways(true, Some(4096));
}

#[test]
fn sixteen_mebibytes_both_ways_copied() {
    sixteen_mebibytes_both_ways(false, None);
}

/// The client uploads 8 MiB (echoed back as it goes, read by a second
/// thread), then ends its write side: the backend gets every byte, and the
/// client the whole answer, `bye` included.
#[test]
fn half_close_after_a_large_upload_gets_the_whole_answer() {
    let plain = PlainBackend::start("plain-0");
    let config = one_route(
        &["splice = true".to_owned()],
        "plain",
        "a.example.com",
        plain.addr(),
    );
    let proxy = ProxyProcess::start(&config).expect("proxy ready");
    let mut sent = corpus("curl_h2.bin");
    sent.extend_from_slice(&pattern(8 * MIB));
    let mut tcp = client::connect(proxy.addr("main"), T).expect("connect");
    let writer = upload(&tcp, sent.clone());
    let (answer, closed) = read_to_close(&mut tcp, BIG_T);
    writer.join().expect("writer thread").expect("upload");
    assert!(closed, "the proxy closed after the backend");
    assert_plain_answer(&answer, &sent);
    let raw = recorded(|| plain.connections(), 0, sent.len());
    assert_eq!(raw.len(), sent.len());
    assert!(raw == sent, "the backend received other bytes");
    assert_clean(&proxy);
}

/// Writes `sent` on a clone of `tcp` from another thread, then its FIN,
/// so that the caller can read while the upload backs up.
fn upload(tcp: &TcpStream, sent: Vec<u8>) -> JoinHandle<Result<(), String>> {
    let mut tcp = tcp.try_clone().expect("clone");
    let _ = tcp.set_write_timeout(Some(BIG_T));
    std::thread::spawn(move || {
        for chunk in sent.chunks(256 * 1024) {
            tcp.write_all(chunk).map_err(|e| format!("upload: {e}"))?;
        }
        tcp.shutdown(Shutdown::Write)
            .map_err(|e| format!("FIN: {e}"))
    })
}

/// `size` bytes uploaded after the hello, the client reading the echo
/// only 300 ms into the upload (so the pipes fill: a bulk transfer's
/// backpressure), or, when `grows`, once a pipe has grown, which must
/// happen while the client does not read; checks that the session holds
/// that pipe while it is open, what the backend received and the answer.
fn upload_then_read(
    proxy: &ProxyProcess,
    plain: &PlainBackend,
    index: usize,
    size: usize,
    grows: bool,
) {
    let mut sent = corpus("curl_h2.bin");
    sent.extend_from_slice(&pattern(size + index));
    let mut tcp = client::connect(proxy.addr("main"), T).expect("connect");
    let writer = upload(&tcp, sent.clone());
    if grows {
        // The session cannot end before the client reads its answer, so
        // a pipe grown by now is still the session's.
        if let Err(err) = proxy.wait_metric("splice.pipes_grown", |v| v >= 1, T) {
            panic!("a bulk upload backed up: {err}");
        }
        assert!(proxy.metric("splice.bulk_pipes") >= 1, "a grown pipe held");
    } else {
        std::thread::sleep(Duration::from_millis(300));
    }
    let (answer, closed) = read_to_close(&mut tcp, BIG_T);
    writer.join().expect("writer thread").expect("upload");
    assert!(closed, "the proxy closed after the backend");
    assert_plain_answer(&answer, &sent);
    let raw = recorded(|| plain.connections(), index, sent.len());
    assert!(raw == sent, "the backend received other bytes");
    if let Err(err) = proxy.wait_metric("tcp.active", |v| v == 0, T) {
        panic!("{err}; stderr:\n{}", stderr_tail(proxy));
    }
}

/// With the defaults, a bulk upload grows its kernel pipe
/// (`splice_bulk_pipe_size`, `splice.pipes_grown`) and a short one keeps
/// the kernel's; `splice_bulk_pipe_size = 0` grows none. Every byte
/// arrives either way.
#[test]
fn a_bulk_transfer_grows_its_pipe_and_a_short_one_does_not() {
    let plain = PlainBackend::start("plain-0");
    for (bulk_size, grows) in [(None, true), (Some(0), false)] {
        let mut globals = vec!["splice = true".to_owned()];
        globals.extend(bulk_size.map(|size| format!("splice_bulk_pipe_size = {size}")));
        let config = one_route(&globals, "plain", "a.example.com", plain.addr());
        let proxy = ProxyProcess::start(&config).expect("proxy ready");
        let first = plain.connections().len();
        // 64 KiB copied, then under 4 fills of half a 64 KiB pipe spliced.
        upload_then_read(&proxy, &plain, first, 100_000, false);
        assert_eq!(proxy.metric("splice.pipes_grown"), 0, "a short upload");
        upload_then_read(&proxy, &plain, first + 1, 16 * MIB, grows);
        let grown = proxy.metric("splice.pipes_grown");
        assert_eq!(
            proxy.metric("splice.bulk_pipes"),
            0,
            "every grown pipe went back with its session"
        );
        if grows {
            assert!(
                (1..=2).contains(&grown),
                "{grown} pipes grown by one bulk session"
            );
        } else {
            assert_eq!(grown, 0, "splice_bulk_pipe_size = 0");
        }
        assert_clean(&proxy);
    }
}

/// An established session holds no pooled buffer once its window went out
/// when it splices (`splice_threshold = 0`: from the first byte). When it
/// copies it keeps its place under `max_buffers` (`buffers.in_use`): one
/// claim per direction that needed a buffer at the same time, at most two.
#[test]
fn a_spliced_session_gives_its_buffers_back() {
    let tls = TlsBackend::start(BackendConfig::new("tls-0", &["tls.example.com"]));
    for (splice, held) in [(true, 0..=0), (false, 1..=2)] {
        let globals = [
            format!("splice = {splice}"),
            "splice_threshold = 0".to_owned(),
        ];
        let config = one_route(&globals, "tls", "tls.example.com", tls.addr());
        let proxy = ProxyProcess::start(&config).expect("proxy ready");
        let mut stream = tls_client(proxy.addr("main"), "tls.example.com", &[]).expect("handshake");
        stream.write_all(b"hello\n").expect("write");
        stream.flush().expect("flush");
        let line = read_line(&mut stream).expect("first line");
        assert_eq!(line, "backend=tls-0 alpn=- sni=tls.example.com");
        if let Err(err) = proxy.wait_metric("buffers.in_use", |v| held.contains(&v), T) {
            panic!("splice = {splice}: {err}");
        }
        assert_eq!(proxy.metric("tcp.active"), 1);
        stream.write_all(b"still piped\n").expect("write");
        stream.flush().expect("flush");
        let echoed = read_line(&mut stream).expect("echo");
        assert_eq!(echoed, "still piped");
        half_close(&mut stream).expect("half close");
        let (rest, clean) = read_tls_to_close(&mut stream, T);
        assert_eq!((rest.as_slice(), clean), (&b"bye\n"[..], true));
        drop(stream);
        assert_clean(&proxy);
        if let Err(err) = proxy.wait_metric("buffers.in_use", |v| v == 0, T) {
            panic!("splice = {splice}, after close: {err}");
        }
    }
}

/// With splice on and the default `splice_threshold` (64 KiB), short
/// connections copy: none takes a kernel pipe, and every byte arrives.
#[test]
fn short_connections_with_splice_on_take_no_pipe() {
    let plain = PlainBackend::start("plain-0");
    let config = one_route(
        &["splice = true".to_owned()],
        "plain",
        "a.example.com",
        plain.addr(),
    );
    let proxy = ProxyProcess::start(&config).expect("proxy ready");
    const ROUNDS: usize = 20;
    for round in 0..ROUNDS {
        let mut sent = corpus("curl_h2.bin");
        sent.extend_from_slice(&pattern(64 + round));
        let mut tcp = client::connect(proxy.addr("main"), T).expect("connect");
        tcp.write_all(&sent).expect("write");
        tcp.shutdown(Shutdown::Write).expect("FIN");
        let (answer, closed) = read_to_close(&mut tcp, T);
        assert!(closed, "round {round}: the proxy closed after the backend");
        assert_plain_answer(&answer, &sent);
    }
    if let Err(err) = proxy.wait_metric("tcp.active", |v| v == 0, T) {
        panic!("{err}; stderr:\n{}", stderr_tail(&proxy));
    }
    assert_eq!(proxy.metric("splice.pipes_created"), 0);
    assert_eq!(proxy.metric("splice.fallbacks"), 0);
    assert_clean(&proxy);
}

/// Kernel pipes go back to the worker's pool when a session ends and serve
/// the next one; a pipe still holding bytes (a session cut mid-transfer) is
/// closed instead, so no byte of one session can reach another's peer.
#[test]
fn kernel_pipes_are_reused_and_never_carry_bytes_across_sessions() {
    let plain = PlainBackend::start("plain-0");
    let globals = ["splice = true".to_owned(), "worker_count = 1".to_owned()];
    let config = one_route(&globals, "plain", "a.example.com", plain.addr());
    let proxy = ProxyProcess::start(&config).expect("proxy ready");
    let addr = proxy.addr("main");
    const ROUNDS: usize = 12;
    let mut whole = 0;
    for round in 0..ROUNDS {
        let mut sent = corpus("curl_h2.bin");
        sent.extend_from_slice(&pattern(100_000 + round));
        let mut tcp = client::connect(addr, T).expect("connect");
        tcp.write_all(&sent).expect("write");
        if round % 3 == 2 {
            // Cut mid-transfer: more on the way and the echo unread, so
            // the close is a reset and the session ends with bytes in its
            // pipes.
            let _ = tcp.write_all(&pattern(300_000));
            drop(tcp);
            continue;
        }
        tcp.shutdown(Shutdown::Write).expect("FIN");
        let (answer, closed) = read_to_close(&mut tcp, T);
        assert!(closed, "round {round}: the proxy closed after the backend");
        assert_plain_answer(&answer, &sent);
        let index = round;
        assert_eq!(
            recorded(|| plain.connections(), index, sent.len()),
            sent,
            "round {round}: the backend got exactly this session's bytes"
        );
        whole += 1;
        if let Err(err) = proxy.wait_metric("tcp.active", |v| v == 0, T) {
            panic!("round {round}: {err}; stderr:\n{}", stderr_tail(&proxy));
        }
    }
    assert_eq!(whole, ROUNDS - ROUNDS / 3);
    assert_clean(&proxy);
    let created = proxy.metric("splice.pipes_created");
    assert!(
        (2..=2 * (ROUNDS as i64) / 3 + 2).contains(&created),
        "{created} pipes created for {ROUNDS} sequential sessions: reuse is not working"
    );
}
