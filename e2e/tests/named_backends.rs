//! Acceptance of issue 13's named backends: a `localhost:PORT` backend
//! serves from the first connection; a name that does not resolve is
//! reported at start with a clear message, before the proxy says it is
//! ready, is retried every `resolve_interval` (counted in
//! `backend.resolve.errors`), shows in `backend list` with its error, and
//! does not stop the other clusters: a connection to it is refused at
//! once, the others are served.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback only
//! (`localhost` and an RFC 6761 `.invalid` name, which never resolves);
//! every wait is bounded.

use std::io::Write;
use std::time::Duration;

use e2e::backend::PlainBackend;
use e2e::client;
use e2e::proxy::ConfigBuilder;
use e2e::testkit::{capture, start, stderr_tail};

const T: Duration = Duration::from_secs(5);
const GHOST: &str = "nothing-here.invalid";

#[test]
fn a_localhost_backend_serves_and_an_unresolvable_name_stops_nothing() {
    let local = PlainBackend::start("local-0");
    let named = format!("localhost:{}", local.addr().port());
    let config = ConfigBuilder::new()
        .global("resolve_interval = 1")
        .listener("main", &[])
        .frontend("local", "main", Some("a.example.com"), &[])
        .backend_at("local", "local-0", &named, "")
        .listener("ghostly", &[])
        .frontend("ghost", "ghostly", None, &[])
        .backend_at("ghost", "ghost-0", &format!("{GHOST}:9000"), "")
        .build();
    let proxy = start(&config);

    let stderr = proxy.stderr_text();
    let reported = stderr
        .find(&format!(
            "backend ghost-0 of ghost: cannot resolve {GHOST}:9000"
        ))
        .unwrap_or_else(|| panic!("not reported at start:\n{stderr}"));
    let ready = stderr.find("preread ready").unwrap_or(usize::MAX);
    assert!(
        reported < ready,
        "reported before the proxy is ready:\n{stderr}"
    );
    let line = stderr[reported..].lines().next().unwrap_or_default();
    assert!(
        line.contains("it takes no connection until it resolves")
            && line.contains("the other backends and clusters serve"),
        "{line}"
    );

    // The named backend serves, from the first connection.
    for _ in 0..3 {
        let mut stream = client::connect(proxy.addr("main"), T).unwrap_or_else(|e| panic!("{e}"));
        stream
            .write_all(&capture("curl_h2.bin"))
            .unwrap_or_else(|e| panic!("{e}"));
        let _ = stream.set_read_timeout(Some(T));
        let line = client::read_line(&mut stream)
            .unwrap_or_else(|e| panic!("{e}\nstderr:\n{}", stderr_tail(&proxy)));
        assert_eq!(line, "backend=local-0");
    }
    let listed = proxy
        .wait_backend(
            "local-0",
            |s| s.iter().any(|s| s.up && !s.instance.is_empty()),
            T,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        listed
            .iter()
            .all(|s| s.backend.as_ref().is_some_and(|b| b.address == named)),
        "{listed:?}"
    );

    // The ghost is listed with its error, and retried every second.
    let ghost = proxy
        .wait_backend("ghost-0", |s| s.len() == 1 && !s[0].up, T)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ghost[0].instance.is_empty(), "{ghost:?}");
    assert!(
        ghost[0]
            .last_error
            .contains(&format!("cannot resolve {GHOST}")),
        "{ghost:?}"
    );
    proxy
        .wait_metric("backend.resolve.errors", |n| n >= 3, T)
        .unwrap_or_else(|e| panic!("{e}\nstderr:\n{}", stderr_tail(&proxy)));

    // A connection to it is refused at once, without a connect (the
    // harness's readiness probe was one too).
    let before = proxy.metric("tcp.refused.backend_unavailable");
    let (got, closed) = client::raw_exchange(proxy.addr("ghostly"), b"hello\n", T)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(got.is_empty() && closed);
    proxy
        .wait_metric("tcp.refused.backend_unavailable", |n| n == before + 1, T)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(proxy.metric("backend.connect.errors"), 0);
}
