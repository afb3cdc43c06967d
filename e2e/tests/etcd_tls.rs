//! The etcd source over TLS, against a real 3-member etcd cluster on
//! loopback serving its clients on `https://` only and asking each for a
//! certificate (`--client-cert-auth`), with certificates rcgen makes at
//! run time: a replica given the CA and a client certificate reads the
//! route keys and routes them; a replica given another CA serves nothing
//! of etcd and `preread sources` says the members' certificate is not
//! trusted; with etcd's authentication enabled, a replica given the user
//! and password reads the keys, and one given a wrong password says the
//! sign-in failed; `config check` names a TLS file it cannot read (E505)
//! and an `http://` endpoint given TLS files (E003).
//!
//! Every wait is for a condition, with a generous deadline.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use e2e::certs::TestCa;
use e2e::etcd::{EtcdCluster, EtcdTls};
use e2e::proxy::{ProxyProcess, free_port_on, preread_bin};
use e2e::tools::run;

/// How long a replica may take to read the store on a loaded machine.
const FOLLOW: Duration = Duration::from_secs(30);

const PREFIX: &str = "/tls/";

/// Waits until `probe` holds; panics with its last word past [`FOLLOW`].
fn wait(what: &str, mut probe: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + FOLLOW;
    loop {
        match probe() {
            Ok(()) => return,
            Err(last) if Instant::now() >= deadline => {
                panic!("{what}: not within {FOLLOW:?}: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn config(cluster: &EtcdCluster, addr: SocketAddr, tls: &EtcdTls, ca: &str) -> String {
    format!(
        "worker_count = 1\n[[listeners]]\naddress = \"{addr}\"\n\n[sources.etcd]\n\
         endpoints = {}\nprefix = \"{PREFIX}\"\nreplica_id = \"tls\"\nca_file = \"{ca}\"\n\
         cert_file = \"{}\"\nkey_file = \"{}\"\n",
        cluster.endpoints_toml(),
        tls.cert.display(),
        tls.key.display()
    )
}

/// A route key of cluster `name` on `*:port`.
fn route(name: &str, port: u16) -> String {
    format!(
        "[clusters.{name}]\nfrontends = [{{ address = \"*:{port}\", sni = \"{name}.example.com\" }}]\n\
         backends = [{{ address = \"127.0.0.1:9\", backend_id = \"{name}-0\" }}]\n"
    )
}

#[test]
fn a_replica_reads_routes_over_tls_and_names_an_untrusted_member() {
    let ca = TestCa::new("preread e2e etcd CA");
    let mut cluster = EtcdCluster::start_tls(&ca).expect("a TLS etcd cluster");
    let tls = cluster.tls().expect("TLS files").clone();
    let endpoints = cluster.endpoints();
    assert!(
        endpoints.iter().all(|e| e.starts_with("https://")),
        "{endpoints:?}"
    );
    let replicas: Vec<IpAddr> = (2..=5).map(|n| IpAddr::from([127, 0, 0, n])).collect();
    let port = free_port_on(&replicas);
    let revision = cluster.put(&format!("{PREFIX}routes/a"), &route("a", port));

    let addr: SocketAddr = format!("127.0.0.2:{port}").parse().expect("address");
    let ca_path = tls.ca.display().to_string();
    let replica = ProxyProcess::start(&config(&cluster, addr, &tls, &ca_path)).expect("start");
    wait("the route key read over TLS", || {
        let source = replica.source("etcd")?;
        if source.routes == 1 && source.revision >= revision {
            Ok(())
        } else {
            Err(format!("{source:?}"))
        }
    });
    let frontends = replica.cli(&["frontend", "list"]).expect("frontend list");
    let listed = String::from_utf8_lossy(&frontends.stdout);
    assert!(listed.contains("a.example.com"), "{listed}");

    // Another CA: the members' certificate is not trusted, nothing of
    // etcd is served, and `preread sources` says why.
    let other = TestCa::new("another CA");
    let other_path = cluster.dir().join("other-ca.pem");
    other.write_pem(&other_path).expect("write the other CA");
    let addr: SocketAddr = format!("127.0.0.3:{port}").parse().expect("address");
    let distrustful = ProxyProcess::start(&config(
        &cluster,
        addr,
        &tls,
        &other_path.display().to_string(),
    ))
    .expect("start");
    wait("the untrusted members named", || {
        let source = distrustful.source("etcd")?;
        if source.errors > 0 && source.error.contains("UnknownIssuer") {
            Ok(())
        } else {
            Err(format!("{source:?}"))
        }
    });
    let source = distrustful.source("etcd").expect("the etcd source");
    assert_eq!((source.routes, source.revision), (0, 0), "{source:?}");
    assert!(
        endpoints.iter().any(|e| source.error.contains(e)),
        "the member is named: {source:?}"
    );
    drop((replica, distrustful));

    // etcd's users: the right password reads the keys, a wrong one is
    // named as a failed sign-in.
    cluster.enable_auth("root-pass");
    let revision = cluster.put(&format!("{PREFIX}routes/b"), &route("b", port));
    let signed = |n: u8, password: &str| {
        let addr: SocketAddr = format!("127.0.0.{n}:{port}").parse().expect("address");
        let text = format!(
            "{}username = \"root\"\npassword = \"{password}\"\n",
            config(&cluster, addr, &tls, &ca_path)
        );
        ProxyProcess::start(&text).expect("start")
    };
    let user = signed(4, "root-pass");
    wait("the route keys read as root", || {
        let source = user.source("etcd")?;
        if source.routes == 2 && source.revision >= revision {
            Ok(())
        } else {
            Err(format!("{source:?}"))
        }
    });
    let intruder = signed(5, "wrong");
    wait("the failed sign-in named", || {
        let source = intruder.source("etcd")?;
        if source.errors > 0 && source.error.contains("sign-in failed") {
            Ok(())
        } else {
            Err(format!("{source:?}"))
        }
    });
    assert_eq!(intruder.source("etcd").map(|s| s.routes), Ok(0));
}

#[test]
fn config_check_names_unreadable_tls_files_and_mismatched_schemes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = preread_bin().expect("the preread binary");
    for (text, code) in [
        (
            "[sources.etcd]\nendpoints = [\"https://127.0.0.1:2379\"]\nca_file = \"missing.pem\"\n",
            "E505",
        ),
        (
            "[sources.etcd]\nendpoints = [\"http://127.0.0.1:2379\"]\nca_file = \"ca.pem\"\n",
            "E003",
        ),
    ] {
        let path = dir.path().join("preread.toml");
        std::fs::write(&path, text).expect("write the config");
        let config = path.display().to_string();
        let out = run(
            &bin,
            &["-c", &config, "config", "check"],
            dir.path(),
            Duration::from_secs(30),
        )
        .expect("config check runs");
        assert!(!out.status.success(), "{text}: {}", out.both());
        assert!(out.stdout.contains(code), "{text}: {}", out.both());
    }
}
