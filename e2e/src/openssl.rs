//! `openssl s_server` on loopback, as tests start it: a real TLS server
//! that is not rustls, with the certificates and flags a test gives.
//!
//! Owns: [`OpensslServer`]: writing its files into a temp folder, starting
//! it on a free loopback port (three tries), waiting (bounded) for its
//! `ACCEPT` line, and killing it by its PID on Drop. Must never: leave the
//! child running, or wait without a bound.

use std::fs::File;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::proxy::free_addr;
use crate::testkit::{TempDir, tail};
use crate::tools::wait_or_kill;

/// The bound of its start, and of its exit on Drop.
const T: Duration = Duration::from_secs(5);

/// A running `openssl s_server`.
pub struct OpensslServer {
    child: Child,
    /// Held open so the server never sees an EOF on its stdin.
    _stdin: ChildStdin,
    addr: SocketAddr,
    dir: TempDir,
}

impl std::fmt::Debug for OpensslServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpensslServer")
            .field("pid", &self.child.id())
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl OpensslServer {
    /// Writes `files` (name, text) into a temp folder and runs `openssl`
    /// `s_server -accept ADDR` with `args` there.
    ///
    /// # Panics
    /// When a file cannot be written, or the server does not start in
    /// three attempts.
    pub fn start(openssl: &Path, files: &[(&str, &str)], args: &[&str]) -> Self {
        let dir = TempDir::new("s_server");
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        }
        let mut last = String::new();
        for _ in 0..3 {
            let addr = free_addr();
            match attempt(openssl, dir.path(), addr, args) {
                Ok((child, stdin)) => {
                    return Self {
                        child,
                        _stdin: stdin,
                        addr,
                        dir,
                    };
                }
                Err(err) => last = err,
            }
        }
        panic!("openssl s_server did not start in 3 attempts; last:\n{last}");
    }

    /// Where it accepts.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Spawns the server and waits (at most [`T`]) for its `ACCEPT` line.
fn attempt(
    openssl: &Path,
    dir: &Path,
    addr: SocketAddr,
    args: &[&str],
) -> Result<(Child, ChildStdin), String> {
    let out_path = dir.join("s_server.out");
    let err_path = dir.join("s_server.err");
    let create = |path: &Path| File::create(path).map_err(|e| format!("{}: {e}", path.display()));
    let accept = addr.to_string();
    let mut child = Command::new(openssl)
        .args(["s_server", "-accept", &accept])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(create(&out_path)?)
        .stderr(create(&err_path)?)
        .spawn()
        .map_err(|e| format!("spawn {} s_server: {e}", openssl.display()))?;
    let stdin = child.stdin.take().ok_or("no stdin pipe")?;
    let read = |path: &Path| {
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    };
    let deadline = Instant::now() + T;
    loop {
        if read(&out_path).lines().any(|line| line.trim() == "ACCEPT") {
            return Ok((child, stdin));
        }
        let exited = child.try_wait().map_err(|e| format!("wait: {e}"))?;
        if exited.is_some() || Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "s_server on {addr}: {}; stdout:\n{}\nstderr:\n{}",
                exited.map_or_else(|| format!("no ACCEPT within {T:?}"), |s| s.to_string()),
                read(&out_path),
                read(&err_path)
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for OpensslServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        if !matches!(wait_or_kill(&mut self.child, T), Ok(Some(_))) {
            eprintln!("e2e: s_server pid {} did not exit", self.child.id());
        }
        if std::thread::panicking() {
            let text =
                std::fs::read_to_string(self.dir.path().join("s_server.err")).unwrap_or_default();
            eprintln!("e2e: s_server stderr:\n{}", tail(&text, 20));
        }
    }
}
