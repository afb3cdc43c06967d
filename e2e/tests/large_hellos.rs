//! Large ClientHellos on the default config, through the real `preread`
//! process: a 64 KiB hello over several records routes byte for byte,
//! whole or in many small reads, while the window grows from its first
//! 1.5 KiB; one past 64 KiB is `too_large`. The default `buffer_size` (16 KiB)
//! does not bound the cap.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only;
//! every wait is bounded.

use std::io::Write;
use std::net::Shutdown;
use std::time::{Duration, Instant};

use e2e::backend::PlainBackend;
use e2e::client::{self, read_to_close};
use e2e::proxy::{ConfigBuilder, ProxyProcess};
use e2e::testkit::{capture, reframed, stderr_tail};

/// The general bound of a wait.
const T: Duration = Duration::from_secs(10);
/// The default `sni_preread_max_bytes`.
const CAP: usize = 65_536;

/// A hello for `d.example.com` of exactly `total` bytes, in records of
/// about `record` bytes of handshake data (never more).
fn hello(total: usize, record: usize) -> Vec<u8> {
    let records = total.div_ceil(record + 5);
    let message = total - 5 * records;
    let fragments = vec![message / records; records - 1];
    reframed(&capture("openssl_tls13.bin"), total, &fragments)
}

fn proxy(plain: &PlainBackend) -> ProxyProcess {
    let config = ConfigBuilder::new()
        .listener("main", &[])
        .frontend("d", "main", Some("d.example.com"), &[])
        .backend("d", "d-0", plain.addr())
        .build();
    ProxyProcess::start(&config).expect("proxy ready")
}

/// Sends `bytes` in `chunk`-byte writes (all at once when `None`), then
/// FIN, and reads to the close.
fn send(proxy: &ProxyProcess, bytes: &[u8], chunk: Option<usize>) -> Vec<u8> {
    let mut tcp = client::connect(proxy.addr("main"), T).expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    match chunk {
        None => tcp.write_all(bytes).expect("write"),
        Some(size) => {
            for piece in bytes.chunks(size) {
                tcp.write_all(piece).expect("write a chunk");
                // Each chunk arrives as its own read.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    tcp.shutdown(Shutdown::Write).expect("FIN");
    read_to_close(&mut tcp, T).0
}

/// The bytes the backend's `index`-th connection received, once it holds
/// `len` of them (bounded by [`T`]).
fn received(plain: &PlainBackend, index: usize, len: usize) -> Vec<u8> {
    let deadline = Instant::now() + T;
    loop {
        let got = plain.connections().get(index).cloned().unwrap_or_default();
        if got.len() >= len || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_64_kib_hello_routes_whole_and_in_many_reads() {
    let plain = PlainBackend::start("d-0");
    let proxy = proxy(&plain);
    let big = hello(CAP, 16_384);
    assert_eq!((big.len(), big[5]), (CAP, 1), "a 64 KiB ClientHello");
    for (index, chunk) in [None, Some(1_000)].into_iter().enumerate() {
        let _ = send(&proxy, &big, chunk);
        assert!(
            received(&plain, index, big.len()) == big,
            "chunk {chunk:?}: the backend did not get the hello byte for byte; stderr:\n{}",
            stderr_tail(&proxy)
        );
    }
    assert_eq!(proxy.metric("tcp.sni_preread.routed"), 2);
    assert_eq!(proxy.metric("tcp.sni_preread.rejected.too_large"), 0);
}

#[test]
fn a_hello_past_64_kib_is_too_large() {
    let plain = PlainBackend::start("d-0");
    let proxy = proxy(&plain);
    // 65 KiB: only small records keep the extensions under their 64 KiB
    // length field.
    let over = hello(65 * 1024, 250);
    let just_over = hello(CAP + 1, 4_096);
    for bytes in [&over, &just_over] {
        let _ = send(&proxy, bytes, None);
    }
    proxy
        .wait_metric("tcp.sni_preread.rejected.too_large", |v| v == 2, T)
        .unwrap_or_else(|e| panic!("{e}; stderr:\n{}", stderr_tail(&proxy)));
    assert_eq!(proxy.metric("tcp.sni_preread.routed"), 0);
    assert_eq!(plain.accepted(), 0, "no backend was contacted");
}
