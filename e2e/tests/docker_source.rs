//! The Docker source against a real `dockerd` (Debian's `docker.io`,
//! installed when missing, with its own data root, stopped by its PID):
//! containers of an image imported from `busybox-static`, on the host's
//! network, each running e2e's TLS backend (`container-backend`, mounted in
//! with the host's `/usr` for its libraries) on a loopback port its labels
//! declare. Every check goes through a real TLS handshake with the
//! backend's own certificate, through the proxy.
//!
//! A `dockerd` that cannot start fails the test with its log; nothing is
//! skipped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use command::proto::request::RequestType;
use command::proto::response_content::ContentType;
use command::proto::{self, SourceEntry};
use e2e::certs::TestCa;
use e2e::client::tls_request;
use e2e::docker::{Dockerd, IMAGE};
use e2e::proxy::{ProxyProcess, free_addr};
use e2e::testkit::{TempDir, eventually, stderr_tail};

/// What the issue allows between a container's change and the route's.
const WITHIN: Duration = Duration::from_secs(2);

struct World {
    // Dropped first: the proxy, then the containers and the daemon.
    proxy: ProxyProcess,
    docker: Dockerd,
    certs: TempDir,
}

fn world() -> World {
    let docker = Dockerd::start()
        .unwrap_or_else(|e| panic!("the Docker source's tests need a dockerd: {e}"));
    let config = format!(
        "[[listeners]]\naddress = \"${{addr:main}}\"\n\n[sources.docker]\nendpoint = \"unix://{}\"\n",
        docker.socket().display()
    );
    let proxy = ProxyProcess::start(&config).unwrap_or_else(|e| panic!("{e}"));
    World {
        proxy,
        docker,
        certs: TempDir::new("docker-certs"),
    }
}

impl World {
    /// Starts container `container`, serving TLS for `sni` on
    /// 127.0.0.1:`port` with `extra` labels, labelled as a backend of
    /// `name` on the proxy's listener.
    fn backend(&mut self, container: &str, name: &str, sni: &str, port: u16) -> String {
        let leaf = TestCa::shared().server_cert(&[sni]);
        let (cert, key) = (format!("{container}.pem"), format!("{container}.key"));
        for (file, text) in [(&cert, &leaf.cert_pem), (&key, &leaf.key_pem)] {
            std::fs::write(self.certs.path().join(file), text)
                .unwrap_or_else(|e| panic!("write {file}: {e}"));
        }
        let bin = env!("CARGO_BIN_EXE_container-backend");
        let mounts = [
            format!("{bin}:/opt/container-backend:ro"),
            "/usr:/usr:ro".to_owned(),
            format!("{}:/certs:ro", self.certs.path().display()),
        ];
        let labels = [
            format!("preread.tcp.{name}.listener={}", self.proxy.addr("main")),
            format!("preread.tcp.{name}.sni={sni}"),
            format!("preread.tcp.{name}.port={port}"),
        ];
        let (listen, cert, key) = (
            format!("127.0.0.1:{port}"),
            format!("/certs/{cert}"),
            format!("/certs/{key}"),
        );
        let mut args: Vec<&str> = vec!["--name", container];
        for mount in &mounts {
            args.extend(["-v", mount]);
        }
        for label in &labels {
            args.extend(["--label", label]);
        }
        args.extend([IMAGE, "/opt/container-backend", "--listen", &listen]);
        args.extend(["--name", container, "--cert", &cert, "--key", &key]);
        self.docker
            .run_container(&args)
            .unwrap_or_else(|e| panic!("start {container}: {e}"))
    }

    /// The backend that answers `sni` through the proxy, or why none does.
    fn route(&self, sni: &str) -> Result<String, String> {
        tls_request(self.proxy.addr("main"), sni, &[], None)
            .map(|outcome| outcome.backend().unwrap_or("?").to_owned())
    }

    fn docker_source(&self) -> SourceEntry {
        self.proxy
            .source("docker")
            .unwrap_or_else(|e| panic!("{e}; stderr:\n{}", stderr_tail(&self.proxy)))
    }

    /// The backend ids of `cluster`, as the proxy holds them.
    fn backends(&self, cluster: &str) -> Vec<String> {
        let response = self
            .proxy
            .apply(RequestType::ListClusters(proto::ListClusters::default()))
            .unwrap_or_else(|e| panic!("{e}"));
        let Some(ContentType::Clusters(list)) = response.content.and_then(|c| c.content_type)
        else {
            panic!("not a cluster list");
        };
        list.clusters
            .into_iter()
            .filter(|c| c.cluster.as_ref().is_some_and(|c| c.cluster_id == cluster))
            .flat_map(|c| c.backends.into_iter().map(|b| b.backend_id))
            .collect()
    }

    fn routes_to(&self, sni: &str, container: &str, within: Duration) -> Duration {
        let start = Instant::now();
        let routed = eventually(within, || self.route(sni).as_deref() == Ok(container));
        assert!(
            routed,
            "{sni} does not reach {container} within {within:?} (last: {:?}); stderr:\n{}",
            self.route(sni),
            stderr_tail(&self.proxy)
        );
        start.elapsed()
    }
}

#[test]
fn a_labelled_container_routes_within_2s_and_a_second_of_its_name_takes_turns() {
    let mut w = world();
    let (p1, p2) = (free_addr().port(), free_addr().port());
    w.backend("web-1", "web", "web.example.com", p1);
    let first = w.routes_to("web.example.com", "web-1", WITHIN);
    eprintln!("start: web-1 routed {first:?} after docker run returned");

    w.backend("web-2", "web", "web.example.com", p2);
    let second = w.routes_to("web.example.com", "web-2", WITHIN);
    eprintln!("start: web-2 routed {second:?} after docker run returned");
    assert_eq!(w.backends("web").len(), 2);
    let turns: Vec<String> = (0..6)
        .map(|_| w.route("web.example.com").unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert!(
        turns.windows(2).all(|pair| pair[0] != pair[1]),
        "round robin takes turns: {turns:?}"
    );
    let source = w.docker_source();
    assert_eq!((source.routes, source.fragments), (1, 1), "{source:?}");
    assert!(source.excluded.is_empty(), "{source:?}");
}

#[test]
fn a_stopped_container_leaves_its_cluster_and_the_last_one_takes_the_route() {
    let mut w = world();
    let (p1, p2) = (free_addr().port(), free_addr().port());
    w.backend("api-1", "api", "api.example.com", p1);
    w.backend("api-2", "api", "api.example.com", p2);
    w.routes_to("api.example.com", "api-2", WITHIN);
    w.routes_to("api.example.com", "api-1", WITHIN);

    w.docker
        .client(&["stop", "-t", "5", "api-2"])
        .unwrap_or_else(|e| panic!("{e}"));
    let stopped = Instant::now();
    assert!(
        eventually(WITHIN, || w.backends("api").len() == 1),
        "api-2's backend is still there after {WITHIN:?}: {:?}",
        w.backends("api")
    );
    eprintln!(
        "stop: api-2's backend gone {:?} after docker stop",
        stopped.elapsed()
    );
    for _ in 0..4 {
        assert_eq!(w.route("api.example.com").as_deref(), Ok("api-1"));
    }

    w.docker
        .client(&["stop", "-t", "5", "api-1"])
        .unwrap_or_else(|e| panic!("{e}"));
    let stopped = Instant::now();
    assert!(
        eventually(WITHIN, || w.backends("api").is_empty()
            && w.route("api.example.com").is_err()),
        "the route of api is still there after {WITHIN:?}: {:?}",
        w.route("api.example.com")
    );
    eprintln!(
        "stop: the route gone {:?} after the last docker stop",
        stopped.elapsed()
    );
    let source = w.docker_source();
    assert_eq!((source.routes, source.fragments), (0, 0), "{source:?}");
}

#[test]
fn two_names_claiming_one_sni_exclude_the_newcomer_until_the_clash_goes() {
    let mut w = world();
    let (p1, p2) = (free_addr().port(), free_addr().port());
    w.backend("alpha-1", "alpha", "clash.example.com", p1);
    w.routes_to("clash.example.com", "alpha-1", WITHIN);

    w.backend("beta-1", "beta", "clash.example.com", p2);
    let excluded = eventually(WITHIN, || {
        w.docker_source()
            .excluded
            .iter()
            .any(|e| e.name == "beta" && e.error_code == "E204")
    });
    assert!(
        excluded,
        "beta is not excluded with E204: {:?}",
        w.docker_source()
    );
    for _ in 0..3 {
        assert_eq!(w.route("clash.example.com").as_deref(), Ok("alpha-1"));
    }
    let shown = w.proxy.cli(&["sources"]).unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("excluded docker beta: E204: ")
                && l.contains("clash.example.com")),
        "preread sources:\n{text}"
    );

    // The clash goes with alpha; nothing else changes, and beta applies.
    w.docker
        .client(&["rm", "-f", "alpha-1"])
        .unwrap_or_else(|e| panic!("{e}"));
    let took = w.routes_to("clash.example.com", "beta-1", WITHIN);
    eprintln!("clash: beta-1 routed {took:?} after alpha-1 was removed");
    let source = w.docker_source();
    assert!(source.excluded.is_empty(), "{source:?}");
    assert_eq!(w.backends("alpha").len(), 0);
}

#[test]
fn a_dockerd_restart_resyncs_and_routed_traffic_goes_on_meanwhile() {
    let mut w = world();
    let port = free_addr().port();
    w.backend("db-1", "db", "db.example.com", port);
    w.routes_to("db.example.com", "db-1", WITHIN);

    // Traffic through the proxy for the whole restart, bounded in time.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let addr = w.proxy.addr("main");
    let traffic = {
        let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut errors = Vec::new();
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                match tls_request(addr, "db.example.com", &[], None) {
                    Ok(outcome) if outcome.backend() == Some("db-1") => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        errors.push(format!("{other:?}"));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            errors
        })
    };

    let errors_before = w.docker_source().errors;
    w.docker.stop().unwrap_or_else(|e| panic!("{e}"));
    let down_at = Instant::now();
    assert!(
        eventually(Duration::from_secs(5), || !w
            .docker_source()
            .error
            .is_empty()),
        "the proxy did not notice dockerd stopping: {:?}",
        w.docker_source()
    );
    let served_before_down = ok.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(1));
    let down = w.docker_source();
    assert!(down.errors > errors_before, "{down:?}");
    assert_eq!(down.routes, 1, "the last good fragment stays: {down:?}");

    let restarted_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    w.docker.restart().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("docker restart: dockerd was down {:?}", down_at.elapsed());
    let resynced = eventually(Duration::from_secs(10), || {
        let source = w.docker_source();
        source.error.is_empty() && source.last_sync_unix_ms >= restarted_ms
    });
    assert!(
        resynced,
        "no resync after the restart: {:?}",
        w.docker_source()
    );
    stop.store(true, Ordering::Relaxed);
    let errors = traffic
        .join()
        .unwrap_or_else(|_| panic!("the traffic thread panicked"));
    let served = ok.load(Ordering::Relaxed);
    assert!(
        errors.is_empty(),
        "{} request(s) failed during the restart: {errors:?}",
        failed.load(Ordering::Relaxed)
    );
    assert!(
        served > served_before_down,
        "no request was served while dockerd was down ({served_before_down} before, {served} in all)"
    );
    eprintln!("docker restart: {served} request(s) served, none failed");
    assert_eq!(w.route("db.example.com").as_deref(), Ok("db-1"));
    let source = w.docker_source();
    assert_eq!((source.routes, source.fragments), (1, 1), "{source:?}");
}
