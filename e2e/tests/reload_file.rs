//! `preread reload` lets the proxy read the config file itself, and falls
//! back to sending the declarations when the proxy cannot see the file the
//! CLI read: here the CLI runs in a mount namespace of its own (`unshare
//! -m`, as a container with its own filesystem would), where another file
//! sits at the same path.
//!
//! Loopback only; the proxy and the backends are stopped on Drop.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{ConfigBuilder, ProxyProcess, preread_bin};
use e2e::tools::require_tool;

const T: Duration = Duration::from_secs(10);

fn served_by(proxy: &ProxyProcess, sni: &str) -> Option<String> {
    tls_request(proxy.addr("main"), sni, &[], None)
        .ok()
        .and_then(|outcome| outcome.field("backend").map(str::to_owned))
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn base(alpha: &TlsBackend) -> ConfigBuilder {
    ConfigBuilder::new()
        .listener("main", &[])
        .frontend("alpha", "main", Some("a.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr())
}

#[test]
fn the_proxy_reads_the_file_and_refuses_a_bad_one_with_every_problem() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let beta = TlsBackend::start(BackendConfig::new("beta-0", &["b.example.com"]));
    let mut proxy = ProxyProcess::start(&base(&alpha).build()).expect("start");

    let with_beta = base(&alpha)
        .frontend("beta", "main", Some("b.example.com"), &[])
        .backend("beta", "beta-0", beta.addr())
        .build();
    proxy.write_config(&with_beta).expect("write config");
    let out = proxy.cli(&["reload"]).expect("reload");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("3 applied, 0 skipped"),
        "{}",
        text(&out)
    );
    assert!(
        !text(&out).contains("declarations instead"),
        "{}",
        text(&out)
    );
    // The proxy itself read it: its log names the file it reloaded.
    proxy
        .wait_stderr("reload of ", T)
        .expect("the proxy logged its reload");
    assert_eq!(
        served_by(&proxy, "b.example.com").as_deref(),
        Some("beta-0")
    );

    // Two problems in one file: both reported, with lines and codes, and
    // nothing applied.
    let broken = format!(
        "{with_beta}\n[clusters.gamma]\nfrontends = [{{ address = \"${{addr:main}}\", sni = \"bad name!\" }}]\n\
         backends = [{{ address = \"nowhere\" }}]\n"
    );
    proxy.write_config(&broken).expect("write config");
    let out = proxy.cli(&["reload"]).expect("reload");
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("E_CONFIG_REFUSED") || said.contains("2 error(s)"),
        "{said}"
    );
    assert!(said.contains("E201") && said.contains("E101"), "{said}");
    assert!(
        said.contains("preread.toml:"),
        "every problem names the file: {said}"
    );
    let status = proxy.cli(&["status"]).expect("status");
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("generation 1"),
        "the refused reload changed something: {}",
        text(&status)
    );
    assert_eq!(
        served_by(&proxy, "b.example.com").as_deref(),
        Some("beta-0")
    );
}

/// Runs `preread --socket SOCKET -c DIR/preread.toml reload` in a new mount
/// namespace where DIR is a fresh tmpfs holding a copy of `config`.
fn reload_from_own_namespace(socket: &Path, dir: &Path, config: &Path) -> std::process::Output {
    let script = format!(
        "mount -t tmpfs tmpfs '{dir}' && cp '{config}' '{dir}/preread.toml' && \
         exec '{bin}' --socket '{socket}' -c '{dir}/preread.toml' reload",
        dir = dir.display(),
        config = config.display(),
        bin = preread_bin().expect("the preread binary").display(),
        socket = socket.display(),
    );
    let out = Command::new(require_tool("unshare", "util-linux"))
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("run unshare");
    let said = text(&out);
    assert!(
        !said.contains("unshare failed") && !said.contains("Operation not permitted"),
        "this test needs a mount namespace (root, or CAP_SYS_ADMIN): {said}"
    );
    out
}

#[test]
fn a_file_the_proxy_cannot_see_is_sent_as_declarations() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["a.example.com"]));
    let beta = TlsBackend::start(BackendConfig::new("beta-0", &["b.example.com"]));
    let mut proxy = ProxyProcess::start(&base(&alpha).build()).expect("start");
    let shared = proxy.dir().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    let wanted = proxy.dir().join("wanted.toml");

    // The CLI's file adds beta; the proxy sees no file at that path.
    let with_beta = base(&alpha)
        .frontend("beta", "main", Some("b.example.com"), &[])
        .backend("beta", "beta-0", beta.addr())
        .build();
    proxy.write_config(&with_beta).expect("write config");
    std::fs::copy(proxy.config_path(), &wanted).expect("copy");
    let out = reload_from_own_namespace(proxy.socket_path(), &shared, &wanted);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("cannot read"), "{said}");
    assert!(
        said.contains("sending the config's declarations instead"),
        "{said}"
    );
    assert!(said.contains("3 applied, 0 skipped"), "{said}");
    assert_eq!(
        served_by(&proxy, "b.example.com").as_deref(),
        Some("beta-0")
    );

    // Now the proxy sees another file at the path (the base config): the
    // size and CRC-32 differ, so it reloads nothing of it, and the CLI's
    // file is applied instead: it changes nothing, where the proxy's own
    // would have removed beta.
    proxy
        .write_config(&base(&alpha).build())
        .expect("write config");
    std::fs::copy(proxy.config_path(), shared.join("preread.toml")).expect("copy");
    let out = reload_from_own_namespace(proxy.socket_path(), &shared, &wanted);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("reads another file"), "{said}");
    assert!(said.contains("0 applied, 0 skipped"), "{said}");
    assert_eq!(
        served_by(&proxy, "b.example.com").as_deref(),
        Some("beta-0"),
        "the proxy reloaded its own file at that path"
    );
}
