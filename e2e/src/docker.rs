//! A real `dockerd` for the Docker source's tests: Debian's `docker.io`
//! (installed when missing), started with its own data root, exec root,
//! pid file and socket under a temp dir, without iptables or a bridge, and
//! stopped by its PID.
//!
//! Owns: [`Dockerd`] (start, stop, restart on the same dirs, the `docker`
//! client aimed at its socket), the test image (imported from the
//! `busybox-static` binary with `docker import`, no registry), and the
//! cleanup: every container removed, the daemon stopped (SIGTERM, then
//! SIGKILL), the mounts it left under its temp dir detached, and the
//! processes of the containers started here killed by their PIDs if they
//! outlived it. `--live-restore` keeps containers
//! running while the daemon is down, as a production daemon is configured
//! for restarts without downtime.
//!
//! Must never: skip: a daemon that cannot start is an error that says
//! why; wait without a bound; or kill anything it did not start.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::testkit::{TempDir, tail};
use crate::tools::{Ran, on_path, require_tool, run, wait_or_kill};

/// How long the daemon may take to answer once started.
const READY: Duration = Duration::from_secs(30);
/// The bound of one `docker` client command.
const CLIENT: Duration = Duration::from_secs(60);
/// How long a stopping daemon may take before SIGKILL.
const STOP: Duration = Duration::from_secs(20);

/// The test image's name.
pub const IMAGE: &str = "preread-e2e-busybox:1";

/// A `dockerd` of the test's own. See the module documentation.
pub struct Dockerd {
    dir: TempDir,
    dockerd: PathBuf,
    docker: PathBuf,
    child: Option<Child>,
    /// The containers' first processes (PID, start time), killed on drop
    /// if the same process is still alive.
    pids: Vec<(i32, u64)>,
}

impl std::fmt::Debug for Dockerd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dockerd")
            .field("dir", &self.dir.path())
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

impl Dockerd {
    /// Installs `docker.io` and `busybox-static` when missing, starts the
    /// daemon and imports [`IMAGE`]. `Err` says why it could not.
    pub fn start() -> Result<Self, String> {
        let dockerd = require_tool("dockerd", "docker.io");
        // docker.io's client, beside its daemon's package; another on PATH
        // may speak a newer API than this daemon.
        let docker = [Path::new("/usr/bin/docker").to_path_buf()]
            .into_iter()
            .find(|p| p.is_file())
            .or_else(|| on_path("docker"))
            .ok_or("docker.io is installed but no docker client is")?;
        let dir = TempDir::create("docker").map_err(|e| format!("temp dir: {e}"))?;
        let mut daemon = Self {
            dir,
            dockerd,
            docker,
            child: None,
            pids: Vec::new(),
        };
        daemon.spawn()?;
        daemon.import_image()?;
        Ok(daemon)
    }

    /// The daemon's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("docker.sock")
    }

    /// The daemon's PID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("dockerd.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let root = self.dir.path();
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("dockerd.log: {e}"))?;
        let err = log.try_clone().map_err(|e| format!("dockerd.log: {e}"))?;
        let arg = |name: &str| root.join(name).display().to_string();
        let child = Command::new(&self.dockerd)
            .args(["--iptables=false", "--bridge=none", "--live-restore"])
            .args(["--data-root", &arg("data"), "--exec-root", &arg("exec")])
            .args(["--pidfile", &arg("dockerd.pid")])
            .args(["-H", &format!("unix://{}", self.socket().display())])
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.dockerd.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + READY;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(format!(
                    "dockerd exited at start ({status}):\n{}",
                    self.log_tail()
                ));
            }
            if self.socket().exists() && self.client(&["version"]).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "dockerd did not answer within {READY:?}:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self) -> String {
        tail(
            &std::fs::read_to_string(self.log_path()).unwrap_or_default(),
            30,
        )
    }

    /// Runs `docker ARGS` against this daemon; its stdout when it succeeds.
    pub fn client(&self, args: &[&str]) -> Result<String, String> {
        let host = format!("unix://{}", self.socket().display());
        let mut all = vec!["-H", host.as_str()];
        all.extend_from_slice(args);
        let ran: Ran = run(&self.docker, &all, self.dir.path(), CLIENT)?;
        if ran.status.success() {
            Ok(ran.stdout)
        } else {
            Err(format!("docker {args:?}: {}\n{}", ran.status, ran.both()))
        }
    }

    /// Imports [`IMAGE`]: busybox-static's binary as `/bin/busybox` and
    /// `/bin/sh`, and `/lib`, `/lib64` pointing into `/usr`, so a binary of
    /// the host runs in it once the host's `/usr` is mounted read-only.
    fn import_image(&self) -> Result<(), String> {
        let busybox = require_tool("busybox", "busybox-static");
        let rootfs = self.dir.path().join("rootfs");
        let io = |what: &str, e: std::io::Error| format!("image {what}: {e}");
        std::fs::create_dir_all(rootfs.join("bin")).map_err(|e| io("bin", e))?;
        std::fs::create_dir_all(rootfs.join("usr")).map_err(|e| io("usr", e))?;
        std::fs::copy(&busybox, rootfs.join("bin/busybox")).map_err(|e| io("busybox", e))?;
        for (link, target) in [
            ("bin/sh", "busybox"),
            ("lib", "usr/lib"),
            ("lib64", "usr/lib64"),
        ] {
            std::os::unix::fs::symlink(target, rootfs.join(link)).map_err(|e| io(link, e))?;
        }
        let tar = self.dir.path().join("rootfs.tar");
        let (tar_s, rootfs_s) = (tar.display().to_string(), rootfs.display().to_string());
        let packed = run(
            Path::new("tar"),
            &["-C", &rootfs_s, "-cf", &tar_s, "."],
            self.dir.path(),
            CLIENT,
        )?;
        if !packed.status.success() {
            return Err(format!("tar the image: {}", packed.both()));
        }
        self.client(&["import", &tar_s, IMAGE]).map(|_| ())
    }

    /// `docker run -d --network host ARGS`; the container's id. Its first
    /// process's PID is kept, to be killed if it outlives the daemon.
    pub fn run_container(&mut self, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["run", "-d", "--network", "host"];
        all.extend_from_slice(args);
        let id = self.client(&all)?.trim().to_owned();
        let pid = self.client(&["inspect", "-f", "{{.State.Pid}}", &id])?;
        if let Ok(pid) = pid.trim().parse::<i32>()
            && let Some(started) = start_time(pid)
        {
            self.pids.push((pid, started));
        }
        Ok(id)
    }

    /// Stops the daemon by its PID (SIGTERM, SIGKILL 20 s later); with
    /// `--live-restore` its containers keep running.
    pub fn stop(&mut self) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = i32::try_from(child.id()).map_err(|e| format!("pid: {e}"))?;
        // SAFETY: kill(2) on the PID of a child this harness spawned and
        // has not reaped yet, so the PID is still ours.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        match wait_or_kill(&mut child, STOP) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(format!(
                "dockerd (pid {pid}) did not stop within {STOP:?}: killed"
            )),
            Err(e) => Err(format!("wait for dockerd (pid {pid}): {e}")),
        }
    }

    /// Starts the daemon again on the same dirs (and socket).
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop()?;
        self.spawn()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if self.child.is_some()
            && let Ok(ids) = self.client(&["ps", "-aq"])
        {
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f"];
                args.extend(ids);
                if let Err(e) = self.client(&args) {
                    eprintln!("e2e: docker rm: {e}");
                }
            }
        }
        if let Err(e) = self.stop() {
            eprintln!("e2e: {e}");
        }
        // The daemon leaves some of its mounts behind (its default network
        // namespace, at times its data root), and a mounted temp dir cannot
        // be removed: unmount what is under this daemon's own dir.
        for mount in mounts_under(self.dir.path()) {
            if let Ok(path) = std::ffi::CString::new(mount.as_os_str().as_encoded_bytes()) {
                // SAFETY: umount2(2) with a valid C string and MNT_DETACH;
                // the mount lies under this harness's own temp dir.
                unsafe {
                    libc::umount2(path.as_ptr(), libc::MNT_DETACH);
                }
            }
        }
        for &(pid, started) in &self.pids {
            // The same process (same start time), not a later one that got
            // its PID.
            if start_time(pid) == Some(started) {
                // SAFETY: kill(2) on a PID checked above to be the process
                // a container of this harness started.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// The mount points below `dir`, deepest first (`/proc/self/mountinfo`,
/// whose fifth field is the mount point).
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|point| point.starts_with(dir))
        .collect();
    mounts.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    mounts.dedup();
    mounts
}

/// The start time of process `pid` (field 22 of `/proc/PID/stat`, in clock
/// ticks since boot), while it exists.
fn start_time(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}
