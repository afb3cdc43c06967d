//! A real 3-member etcd cluster for the etcd source's tests: Debian's
//! `etcd-server` (installed when missing), each member on loopback ports
//! the OS handed out, with its own data dir under a temp dir, stopped by
//! its PID; `etcdctl` (`etcd-client`) aimed at it.
//!
//! Owns: [`EtcdCluster`] (start, kill and restart a member on its data
//! dir, the leader's index, `etcdctl`; with [`EtcdCluster::start_tls`],
//! clients served over TLS with certificates made by rcgen at run time,
//! client certificates required), and the cleanup: every member it
//! started killed on drop. Must never: skip (a cluster that cannot start
//! is an error saying why), wait without a bound, or kill anything it did
//! not start.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::certs::TestCa;
use crate::proxy::free_addr;
use crate::testkit::{TempDir, tail};
use crate::tools::{Ran, require_tool, run};

/// How long the cluster may take to elect a leader and answer.
const READY: Duration = Duration::from_secs(60);
/// The bound of one `etcdctl` command.
const CLIENT: Duration = Duration::from_secs(30);

/// One member.
struct Member {
    name: String,
    client: String,
    peer: String,
    data: PathBuf,
    child: Option<Child>,
}

/// A 3-member etcd cluster of the test's own. See the module
/// documentation.
pub struct EtcdCluster {
    dir: TempDir,
    etcd: PathBuf,
    etcdctl: PathBuf,
    members: Vec<Member>,
    token: String,
    /// Flags every member gets besides the cluster's.
    extra: Vec<String>,
    /// The client side's TLS files, when the members serve TLS.
    tls: Option<EtcdTls>,
    /// `USER:PASSWORD` for `etcdctl`, once authentication is enabled.
    user: Option<String>,
}

/// The files a client of a TLS cluster uses (PEM, in the cluster's dir).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// The CA that signs the members' certificates.
    pub ca: PathBuf,
    /// A client certificate signed by it, and its key.
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl std::fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("dir", &self.dir.path())
            .field("endpoints", &self.endpoints())
            .finish_non_exhaustive()
    }
}

impl EtcdCluster {
    /// Installs `etcd-server` and `etcd-client` when missing, starts three
    /// members and waits until the cluster answers.
    pub fn start() -> Result<Self, String> {
        Self::start_with(&[])
    }

    /// [`start`](Self::start), each member with the flags `extra` too
    /// (`--max-txn-ops`, for a benchmark's bulk transactions).
    pub fn start_with(extra: &[&str]) -> Result<Self, String> {
        Self::start_as(extra, None)
    }

    /// [`start`](Self::start), the members serving their clients over TLS
    /// only (`https://`), with a certificate signed by `ca` (for
    /// `127.0.0.1`), and asking each client for a certificate signed by
    /// `ca` (`--client-cert-auth`); `etcdctl` presents one.
    pub fn start_tls(ca: &TestCa) -> Result<Self, String> {
        Self::start_as(&[], Some(ca))
    }

    fn start_as(extra: &[&str], ca: Option<&TestCa>) -> Result<Self, String> {
        let etcd = require_tool("etcd", "etcd-server");
        let etcdctl = require_tool("etcdctl", "etcd-client");
        let dir = TempDir::create("etcd").map_err(|e| format!("temp dir: {e}"))?;
        let mut extra: Vec<String> = extra.iter().map(|e| (*e).to_owned()).collect();
        let tls = match ca {
            Some(ca) => {
                let (tls, flags) = write_tls(ca, dir.path())?;
                extra.extend(flags);
                Some(tls)
            }
            None => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let members = (0..3)
            .map(|i| Member {
                name: format!("m{i}"),
                client: format!("{scheme}://{}", free_addr()),
                peer: format!("http://{}", free_addr()),
                data: dir.path().join(format!("m{i}.etcd")),
                child: None,
            })
            .collect();
        let token = format!("preread-e2e-{}-{}", std::process::id(), free_addr().port());
        let mut cluster = Self {
            dir,
            etcd,
            etcdctl,
            members,
            token,
            extra,
            tls,
            user: None,
        };
        for i in 0..3 {
            cluster.spawn(i)?;
        }
        cluster.wait_ready(READY)?;
        Ok(cluster)
    }

    /// The members' client URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }

    /// The TOML array of the client URLs.
    pub fn endpoints_toml(&self) -> String {
        let quoted: Vec<String> = self
            .endpoints()
            .iter()
            .map(|e| format!("\"{e}\""))
            .collect();
        format!("[{}]", quoted.join(", "))
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let initial: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer))
            .collect();
        let member = &self.members[i];
        let log = File::create(self.dir.path().join(format!("{}.log", member.name)))
            .map_err(|e| format!("log file: {e}"))?;
        let err = log.try_clone().map_err(|e| format!("log file: {e}"))?;
        let child = Command::new(&self.etcd)
            .args([
                "--name",
                &member.name,
                "--data-dir",
                &member.data.display().to_string(),
                "--listen-client-urls",
                &member.client,
                "--advertise-client-urls",
                &member.client,
                "--listen-peer-urls",
                &member.peer,
                "--initial-advertise-peer-urls",
                &member.peer,
                "--initial-cluster",
                &initial.join(","),
                "--initial-cluster-token",
                &self.token,
                "--initial-cluster-state",
                "new",
                "--heartbeat-interval",
                "100",
                "--election-timeout",
                "1000",
                "--logger",
                "zap",
                "--log-level",
                "warn",
            ])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.etcd.display()))?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// Waits until a put through every running member's endpoint list
    /// succeeds.
    pub fn wait_ready(&self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            let ran = self.etcdctl(&["put", "/e2e/ready", "1"]);
            match ran {
                Ok(out) if out.status.success() => return Ok(()),
                Ok(out) if Instant::now() >= deadline => {
                    return Err(format!(
                        "etcd did not answer: {}\n{}",
                        out.both(),
                        self.logs()
                    ));
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!("etcd did not answer: {e}\n{}", self.logs()));
                }
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// The last lines of every member's log.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| {
                let text = std::fs::read_to_string(self.dir.path().join(format!("{}.log", m.name)))
                    .unwrap_or_default();
                format!("--- {}:\n{}", m.name, tail(&text, 8))
            })
            .collect()
    }

    /// `etcdctl ARGS` against every member.
    pub fn etcdctl(&self, args: &[&str]) -> Result<Ran, String> {
        let endpoints = format!("--endpoints={}", self.endpoints().join(","));
        let tls = self.client_flags();
        let mut all = vec![
            endpoints.as_str(),
            "--dial-timeout=2s",
            "--command-timeout=10s",
        ];
        all.extend(tls.iter().map(String::as_str));
        all.extend_from_slice(args);
        run(&self.etcdctl, &all, self.dir.path(), CLIENT)
    }

    /// `etcdctl txn` of `script` (its compares, success and failure
    /// blocks, as `etcdctl txn` reads them), which must succeed; its
    /// standard output.
    pub fn txn(&self, script: &str) -> Result<String, String> {
        use std::io::Write as _;
        let endpoints = format!("--endpoints={}", self.endpoints().join(","));
        let mut child = Command::new(&self.etcdctl)
            .args([
                endpoints.as_str(),
                "--command-timeout=60s",
                "txn",
                "-w",
                "json",
            ])
            .args(self.client_flags())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("etcdctl txn: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(script.as_bytes())
                .map_err(|e| format!("etcdctl txn: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("etcdctl txn: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "etcdctl txn: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// `etcdctl ARGS`, which must succeed; its standard output.
    pub fn ctl(&self, args: &[&str]) -> String {
        match self.etcdctl(args) {
            Ok(out) if out.status.success() => out.stdout,
            Ok(out) => panic!("etcdctl {args:?}: {}\n{}", out.both(), self.logs()),
            Err(e) => panic!("etcdctl {args:?}: {e}"),
        }
    }

    /// Puts `value` at `key`; the revision of the put.
    pub fn put(&self, key: &str, value: &str) -> i64 {
        header_revision(&self.ctl(&["put", "-w", "json", key, "--", value]))
    }

    /// Deletes `key`; the revision of the deletion (the store's, when
    /// there was no such key).
    pub fn del(&self, key: &str) -> i64 {
        header_revision(&self.ctl(&["del", "-w", "json", key]))
    }

    /// The store's current revision.
    pub fn revision(&self) -> i64 {
        header_revision(&self.ctl(&["get", "/e2e/ready", "-w", "json"]))
    }

    /// The index of the member that leads, asked of each member.
    pub fn leader(&self) -> Option<usize> {
        for (i, member) in self.members.iter().enumerate() {
            if member.child.is_none() {
                continue;
            }
            let endpoint = format!("--endpoints={}", member.client);
            let tls = self.client_flags();
            let mut args = vec![endpoint.as_str()];
            args.extend(tls.iter().map(String::as_str));
            args.extend(["endpoint", "status", "-w", "json"]);
            let out = run(&self.etcdctl, &args, self.dir.path(), CLIENT).ok()?;
            let number = |field: &str| -> Option<u64> {
                let at = out.stdout.find(field)? + field.len();
                out.stdout[at..]
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            };
            if number("\"member_id\":")? == number("\"leader\":")? {
                return Some(i);
            }
        }
        None
    }

    /// Kills member `i` (SIGKILL, by PID) and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data dir.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        self.spawn(i)
    }

    /// The client side's TLS files, when the members serve TLS.
    pub fn tls(&self) -> Option<&EtcdTls> {
        self.tls.as_ref()
    }

    /// `etcdctl`'s flags for the members' TLS and the user (none
    /// without them).
    fn client_flags(&self) -> Vec<String> {
        let mut flags = self.tls.as_ref().map_or_else(Vec::new, |tls| {
            vec![
                format!("--cacert={}", tls.ca.display()),
                format!("--cert={}", tls.cert.display()),
                format!("--key={}", tls.key.display()),
            ]
        });
        flags.extend(self.user.iter().map(|user| format!("--user={user}")));
        flags
    }

    /// Adds `root` with `password`, and enables etcd's authentication:
    /// every later `etcdctl` signs in as `root`.
    pub fn enable_auth(&mut self, password: &str) {
        self.ctl(&["user", "add", &format!("root:{password}")]);
        self.ctl(&["auth", "enable"]);
        self.user = Some(format!("root:{password}"));
    }

    /// The temp dir the cluster lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Writes the CA, the members' certificate and a client certificate (all
/// signed by `ca`) into `dir`: the client's files, and the members' TLS
/// flags.
fn write_tls(ca: &TestCa, dir: &Path) -> Result<(EtcdTls, Vec<String>), String> {
    let write = |name: &str, text: &str| -> Result<PathBuf, String> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    };
    let server = ca.server_client_cert(&["localhost"]);
    let client = ca.client_cert("preread");
    let tls = EtcdTls {
        ca: write("ca.pem", ca.cert_pem())?,
        cert: write("client.pem", &client.cert_pem)?,
        key: write("client-key.pem", &client.key_pem)?,
    };
    let flags = vec![
        format!(
            "--cert-file={}",
            write("server.pem", &server.cert_pem)?.display()
        ),
        format!(
            "--key-file={}",
            write("server-key.pem", &server.key_pem)?.display()
        ),
        format!("--trusted-ca-file={}", tls.ca.display()),
        "--client-cert-auth".to_owned(),
    ];
    Ok((tls, flags))
}

/// The `"revision"` of the header of `etcdctl -w json` output.
fn header_revision(out: &str) -> i64 {
    let at = out.find("\"revision\":").map(|i| i + "\"revision\":".len());
    at.and_then(|i| {
        out[i..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
    })
    .unwrap_or_else(|| panic!("no revision in {out}"))
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
