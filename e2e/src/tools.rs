//! Operator tools the tests run as they are (`openssl`, `curl`): found on
//! `PATH`, installed from Debian when missing, run with bounded time.
//!
//! Owns: [`require_tool`] (a test that needs a tool installs it or fails,
//! never skips) and [`run`] (a child with stdin `/dev/null`, its output in
//! files, killed by its PID past a timeout). Must never: leave a child
//! running, or wait without a bound.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::testkit::{TempDir, tail};

/// The bound of an `apt-get` step that installs a missing tool.
const APT_T: Duration = Duration::from_secs(180);

/// Where `program` is: itself when it is an absolute path (a file a
/// package installs, such as a Python module), else its place on `PATH`.
pub fn on_path(program: &str) -> Option<PathBuf> {
    if Path::new(program).is_absolute() {
        return Some(PathBuf::from(program)).filter(|path| path.is_file());
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

/// The path of `program`, installed from the Debian package `package` with
/// `apt-get` when it is missing.
///
/// # Panics
/// When it is missing and cannot be installed: the test fails, it is
/// never skipped.
pub fn require_tool(program: &str, package: &str) -> PathBuf {
    static APT: Mutex<()> = Mutex::new(());
    let _one_at_a_time = APT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(path) = on_path(program) {
        return path;
    }
    let dir = TempDir::new("apt");
    let mut report = String::new();
    for args in [
        &["update"][..],
        &["install", "-y", "--no-install-recommends", package][..],
    ] {
        match run(Path::new("apt-get"), args, dir.path(), APT_T) {
            Ok(out) => {
                report.push_str(&format!(
                    "apt-get {args:?}: {}\n{}",
                    out.status,
                    tail(&out.stderr, 5)
                ));
            }
            Err(err) => report.push_str(&format!("apt-get {args:?}: {err}\n")),
        }
    }
    on_path(program).unwrap_or_else(|| {
        panic!(
            "`{program}` is not on PATH and `apt-get install {package}` did not provide it; \
             install {package} to run these tests:\n{report}"
        )
    })
}

/// What a finished child printed.
#[derive(Debug)]
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn both(&self) -> String {
        format!(
            "--- stdout ---\n{}--- stderr ---\n{}",
            self.stdout, self.stderr
        )
    }
}

/// Waits for `child` at most `timeout`; past it, kills it (SIGKILL to its
/// PID) and reaps it: `None`.
pub fn wait_or_kill(child: &mut Child, timeout: Duration) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `program ARGS` with stdin `/dev/null` and its output in files of
/// `dir` (no pipe to fill up), killed past `timeout`.
pub fn run(program: &Path, args: &[&str], dir: &Path, timeout: Duration) -> Result<Ran, String> {
    static NEXT: Mutex<usize> = Mutex::new(0);
    let n = {
        let mut next = NEXT.lock().unwrap_or_else(PoisonError::into_inner);
        *next += 1;
        *next
    };
    let out_path = dir.join(format!("run-{n}.out"));
    let err_path = dir.join(format!("run-{n}.err"));
    let create = |path: &Path| File::create(path).map_err(|e| format!("{}: {e}", path.display()));
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(create(&out_path)?)
        .stderr(create(&err_path)?)
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", program.display()))?;
    let status = wait_or_kill(&mut child, timeout)
        .map_err(|e| format!("wait for {}: {e}", program.display()))?
        .ok_or_else(|| {
            format!(
                "{} {args:?} did not finish within {timeout:?} (killed pid {})",
                program.display(),
                child.id()
            )
        })?;
    let read = |path: &Path| {
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    };
    Ok(Ran {
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
    })
}
