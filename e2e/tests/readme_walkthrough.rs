//! The README's walkthrough, run as the README writes it: its commands are
//! read from `README.md` (never copied here), run in order against a copy
//! of `doc/examples/preread.toml` and `demo-backends`, and every output the
//! README shows is compared with what the command printed.
//!
//! The one rewrite: `cargo run … --bin preread --` becomes the built
//! `preread`, and `cargo run -p e2e --bin demo-backends` the built
//! `demo-backends`, so the test does not build a release binary. A command
//! the rewrite misses still names `cargo` and fails the test.
//!
//! How the README writes an output: comment lines right under a command,
//! `# <line>`, one per line printed. `...` stands for any text, and text
//! after two spaces and a `(` is a remark. The ports are the example's own
//! (8443, 9001–9006, 9109): the test needs them free.
//!
//! `demo-backends` runs with standard input at EOF (`/dev/null`), as a
//! second terminal in the background would, and must keep serving through
//! the walkthrough and stop on SIGTERM. `XDG_RUNTIME_DIR` is the test's
//! temp dir for every command, so its demo directory (and the README's
//! `CA=` line) is the test's own.
//!
//! The first start must be quiet (no `WARN` line), as the README promises.
//! A second run puts the example's listener on `[::1]:8443`: the
//! connection commands run with the IPv6 forms the README gives
//! (`--resolve 'NAME:8443:[::1]'`, `('::1',8443)`), and the commands that
//! `demo-backends` prints for that listener are run too. The two runs take
//! the same ports, so they take turns.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use e2e::proxy::preread_bin;
use e2e::testkit::TempDir;
use e2e::tools::{require_tool, run, wait_or_kill};

/// The bound of one walkthrough command.
const COMMAND_T: Duration = Duration::from_secs(30);
/// The bound of a process's start (ready line) and of its stop.
const START_T: Duration = Duration::from_secs(30);

/// The example's fixed ports: one walkthrough at a time.
static PORTS: Mutex<()> = Mutex::new(());

fn ports() -> MutexGuard<'static, ()> {
    PORTS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The built binaries for the README's `cargo run` prefixes.
fn rewrite(command: &str, preread: &Path) -> String {
    let demo = env!("CARGO_BIN_EXE_demo-backends");
    let preread = preread.display().to_string();
    let command = command
        .replace("cargo run -q --release --bin preread --", &preread)
        .replace("cargo run --release --bin preread --", &preread)
        .replace("cargo run -p e2e --bin demo-backends", demo);
    assert!(
        !command.contains("cargo "),
        "the test does not know how to run this README command without cargo: {command}"
    );
    command
}

/// The section of `text` under the heading that starts with `heading`.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("README has no section {heading:?}"));
    let body = &text[start + 1..];
    let end = body[1..].find("\n## ").map_or(body.len(), |i| i + 1);
    &body[..end]
}

/// The fenced blocks of `lang` in `text`, each as its lines, unindented.
fn blocks(text: &str, lang: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in text.lines().map(str::trim) {
        match (&mut current, line) {
            (None, l) if l == format!("```{lang}") => current = Some(Vec::new()),
            (Some(_), "```") => found.extend(current.take()),
            (Some(lines), l) => lines.push(l.to_owned()),
            (None, _) => {}
        }
    }
    found
}

/// A command line without its trailing `# comment`.
fn command_of(line: &str) -> &str {
    line.find("  #").map_or(line, |i| &line[..i]).trim_end()
}

/// One command of a block, with the shell assignments before it and the
/// output lines the README shows under it.
#[derive(Debug)]
struct Step {
    assignments: Vec<String>,
    command: String,
    shown: Vec<String>,
}

fn is_assignment(line: &str) -> bool {
    line.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
    })
}

fn steps(block: &[String]) -> Vec<Step> {
    let mut assignments = Vec::new();
    let mut steps: Vec<Step> = Vec::new();
    for line in block.iter().filter(|l| !l.is_empty()) {
        if let Some(shown) = line.strip_prefix('#') {
            let shown = shown.trim();
            let shown = shown.find("  (").map_or(shown, |i| &shown[..i]).trim_end();
            let step = steps
                .last_mut()
                .unwrap_or_else(|| panic!("an output before any command: {line}"));
            step.shown.push(shown.to_owned());
        } else if is_assignment(line) {
            assignments.push(line.clone());
        } else {
            steps.push(Step {
                assignments: assignments.clone(),
                command: command_of(line).to_owned(),
                shown: Vec::new(),
            });
        }
    }
    steps
}

/// Whether `line` is `shown`, where `...` in `shown` is any text.
fn matches(shown: &str, line: &str) -> bool {
    let parts: Vec<&str> = shown.split("...").collect();
    let (first, rest) = parts.split_first().expect("split yields one part at least");
    let Some(mut tail) = line.strip_prefix(first) else {
        return false;
    };
    for (i, part) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        if last {
            return tail.ends_with(part);
        }
        match tail.find(part) {
            Some(at) => tail = &tail[at + part.len()..],
            None => return false,
        }
    }
    tail.is_empty()
}

/// Runs one step in `dir` through bash, and checks its status and output.
fn run_step(step: &Step, dir: &Path, preread: &Path) -> String {
    let mut script = format!(
        "set -euo pipefail\nexport XDG_RUNTIME_DIR='{}'\n",
        dir.display()
    );
    for line in &step.assignments {
        script.push_str(&rewrite(line, preread));
        script.push('\n');
    }
    let command = rewrite(&step.command, preread);
    script.push_str(&command);
    let ran = run(Path::new("bash"), &["-c", &script], dir, COMMAND_T)
        .unwrap_or_else(|e| panic!("{}: {e}", step.command));
    assert!(
        ran.status.success(),
        "README command `{}` failed ({}):\n{}",
        step.command,
        ran.status,
        ran.both()
    );
    let printed: Vec<&str> = ran
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !step.shown.is_empty() {
        let agree = printed.len() == step.shown.len()
            && step.shown.iter().zip(&printed).all(|(s, p)| matches(s, p));
        assert!(
            agree,
            "README command `{}` shows\n{}\nbut printed\n{}",
            step.command,
            step.shown.join("\n"),
            printed.join("\n")
        );
    }
    ran.stdout
}

/// A long-running README command, started with stdin at EOF and its
/// output in files; ready once `ready` appears in the file `in_stdout` says.
struct Running {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Running {
    fn start(command: &str, dir: &Path, name: &str, ready: &str, in_stdout: bool) -> Self {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        let create = |path: &Path| File::create(path).expect("output file");
        let child = Command::new("bash")
            .args(["-c", &format!("exec {command}")])
            .current_dir(dir)
            .env("XDG_RUNTIME_DIR", dir)
            .stdin(Stdio::null())
            .stdout(create(&stdout))
            .stderr(create(&stderr))
            .spawn()
            .unwrap_or_else(|e| panic!("start {command}: {e}"));
        let mut running = Self {
            child,
            stdout,
            stderr,
        };
        let watched = if in_stdout {
            running.stdout.clone()
        } else {
            running.stderr.clone()
        };
        let deadline = Instant::now() + START_T;
        loop {
            let text = std::fs::read_to_string(&watched).unwrap_or_default();
            if text.contains(ready) {
                return running;
            }
            let exited = running.child.try_wait().expect("try_wait");
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "`{command}` not ready ({exited:?}):\n{}",
                running.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn output(&self) -> String {
        let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
        format!(
            "--- stdout ---\n{}--- stderr ---\n{}",
            read(&self.stdout),
            read(&self.stderr)
        )
    }

    fn still_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Waits for the exit, bounded; a process past the bound is killed and
    /// the test fails.
    fn exits_cleanly(&mut self, what: &str) {
        let status = wait_or_kill(&mut self.child, START_T).expect("wait");
        assert!(
            status.is_some_and(|s| s.success()),
            "{what}: {status:?}\n{}",
            self.output()
        );
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.still_running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn require_tools() {
    for (tool, package) in [("curl", "curl"), ("python3", "python3")] {
        require_tool(tool, package);
    }
}

/// The README, its walkthrough section and the built `preread`.
struct Readme {
    text: String,
    preread: PathBuf,
}

impl Readme {
    fn read() -> Self {
        require_tools();
        Self {
            text: std::fs::read_to_string(repo().join("README.md")).expect("README.md"),
            preread: preread_bin().unwrap_or_else(|e| panic!("{e}")),
        }
    }

    fn walkthrough(&self) -> &str {
        section(&self.text, "## Walkthrough")
    }

    /// The walkthrough's four sh blocks: backends, connections, runtime,
    /// inspect.
    fn blocks(&self) -> [Vec<String>; 4] {
        blocks(self.walkthrough(), "sh")
            .try_into()
            .unwrap_or_else(|b: Vec<_>| {
                panic!(
                    "the walkthrough has four sh blocks: backends, connections, runtime, inspect; \
                 found {}",
                    b.len()
                )
            })
    }

    /// A copy of the example config under `dir` (its relative paths, the
    /// command socket, resolve next to it), through `edit`; the captures
    /// are read in place.
    fn lay_out(&self, dir: &Path, edit: impl Fn(&str) -> String) {
        let examples = dir.join("doc/examples");
        std::fs::create_dir_all(&examples).expect("doc/examples");
        let example = std::fs::read_to_string(repo().join("doc/examples/preread.toml"))
            .expect("the example config");
        std::fs::write(examples.join("preread.toml"), edit(&example)).expect("write the copy");
        std::os::unix::fs::symlink(repo().join("testdata"), dir.join("testdata"))
            .expect("link testdata");
    }

    /// Step 1, "the first command above" (the README's first block): the
    /// proxy, which must start without a warning.
    fn start_proxy(&self, dir: &Path) -> Running {
        let first = blocks(&self.text, "sh")
            .into_iter()
            .next()
            .expect("a first sh block");
        let start = first
            .iter()
            .find(|line| line.contains(" start "))
            .expect("the first block starts the proxy");
        let proxy = Running::start(
            &rewrite(command_of(start), &self.preread),
            dir,
            "proxy",
            "preread ready",
            false,
        );
        let log = std::fs::read_to_string(&proxy.stderr).unwrap_or_default();
        assert!(
            !log.contains(" WARN "),
            "the first start on the example config warns:\n{log}"
        );
        proxy
    }

    /// Step 2: `demo-backends`, as the backends block writes it.
    fn start_demo(&self, dir: &Path) -> Running {
        let [backends, ..] = self.blocks();
        let [backends] = &backends[..] else {
            panic!("the backends block is one command: {backends:?}");
        };
        Running::start(
            &rewrite(command_of(backends), &self.preread),
            dir,
            "demo-backends",
            "Running until",
            true,
        )
    }
}

/// Stops `demo` with SIGTERM; it must exit cleanly.
fn stop_demo(demo: &mut Running) {
    let pid = libc::pid_t::try_from(demo.child.id()).expect("pid");
    // SAFETY: kill(2) on the PID of a child this test started and has not
    // reaped; it touches no memory.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    demo.exits_cleanly("demo-backends after SIGTERM");
}

#[test]
fn the_readme_walkthrough_prints_what_the_readme_shows() {
    let _ports = ports();
    let readme = Readme::read();
    let preread = &readme.preread;
    let dir = TempDir::new("readme");
    readme.lay_out(dir.path(), str::to_owned);
    let mut proxy = readme.start_proxy(dir.path());
    let [_, connect, runtime, inspect] = readme.blocks();
    let mut demo = readme.start_demo(dir.path());

    let connect = steps(&connect);
    assert!(connect.iter().all(|s| !s.shown.is_empty()), "{connect:?}");
    for step in &connect {
        run_step(step, dir.path(), preread);
    }
    assert!(
        demo.still_running(),
        "demo-backends stopped with its standard input at EOF:\n{}",
        demo.output()
    );

    let inspect = steps(&inspect);
    let [inspect] = &inspect[..] else {
        panic!("one inspect command: {inspect:?}");
    };
    let printed = run_step(inspect, dir.path(), preread);
    let printed: serde_json::Value =
        serde_json::from_str(printed.trim()).unwrap_or_else(|e| panic!("{e}: {printed}"));
    let inspect_section = section(&readme.text, "## `preread inspect`");
    let shown = blocks(inspect_section, "json").concat().concat();
    let shown: serde_json::Value =
        serde_json::from_str(&shown).unwrap_or_else(|e| panic!("README's JSON: {e}: {shown}"));
    for (key, value) in shown.as_object().expect("an object") {
        assert_eq!(
            printed.get(key),
            Some(value),
            "inspect's `{key}` differs from the README's: {printed}"
        );
    }
    // The README names every field of the decision (the JSON keys sort).
    let listed = inspect_section
        .split_once("also has the `decision`")
        .and_then(|(_, rest)| rest.split_once(':'))
        .and_then(|(_, rest)| rest.split_once(".\n"))
        .map(|(list, _)| list)
        .expect("the README lists the decision's fields");
    let listed: Vec<&str> = listed
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| *word != "null")
        .collect();
    // As sets: the JSON map's key order depends on serde_json's features.
    let mut decision: Vec<&str> = printed["decision"]
        .as_object()
        .expect("a decision with -c")
        .keys()
        .map(String::as_str)
        .collect();
    decision.sort_unstable();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, decision, "README lists {listed:?}");

    // Last: the runtime commands, which end with the proxy's shutdown.
    let runtime = steps(&runtime);
    assert!(
        runtime
            .last()
            .is_some_and(|s| s.command.ends_with(" shutdown")),
        "{runtime:?}"
    );
    for step in &runtime {
        run_step(step, dir.path(), preread);
    }
    proxy.exits_cleanly("the proxy after `shutdown`");
    stop_demo(&mut demo);
}

/// A connection command of the README for the example's listener moved to
/// `[::1]:8443`, in the forms the README gives for IPv6.
fn over_ipv6(command: &str) -> String {
    let words: Vec<String> = command
        .split(' ')
        .map(|word| match word.strip_suffix(":8443:127.0.0.1") {
            Some(name) => format!("'{name}:8443:[::1]'"),
            None => word.to_owned(),
        })
        .collect();
    let command = words
        .join(" ")
        .replace("('127.0.0.1',8443)", "('::1',8443)");
    assert!(
        !command.contains("127.0.0.1"),
        "the test does not know this command's IPv6 form: {command}"
    );
    command
}

#[test]
fn the_walkthrough_works_on_an_ipv6_listener_with_plain_curl() {
    let _ports = ports();
    let readme = Readme::read();
    let preread = &readme.preread;
    let dir = TempDir::new("readme-ipv6");
    readme.lay_out(dir.path(), |config| {
        let moved = config.replace("\"127.0.0.1:8443\"", "\"[::1]:8443\"");
        assert_ne!(moved, config, "the example listens on 127.0.0.1:8443");
        moved
    });
    let mut proxy = readme.start_proxy(dir.path());
    let [_, connect, ..] = readme.blocks();
    let mut demo = readme.start_demo(dir.path());

    let connect = steps(&connect);
    // Plain curl, no --http1.1, reaches the HTTP/2 backend.
    assert!(
        connect.iter().any(|s| s.command.starts_with("curl ")
            && !s.command.contains("--http1.1")
            && s.shown.iter().any(|l| l.contains("alpn=h2"))),
        "the README checks the h2 backend with plain curl: {connect:?}"
    );
    for step in &connect {
        let step = Step {
            assignments: step.assignments.clone(),
            command: over_ipv6(&step.command),
            shown: step
                .shown
                .iter()
                .map(|l| l.replace("proxy=127.0.0.1:", "proxy=[::1]:"))
                .collect(),
        };
        run_step(&step, dir.path(), preread);
    }

    // The commands demo-backends suggests, for this listener.
    let printed = std::fs::read_to_string(&demo.stdout).expect("demo-backends' output");
    let hint = printed
        .lines()
        .skip_while(|l| !l.starts_with("Try, with the proxy running on [::1]:8443"))
        .find_map(|l| l.trim().strip_prefix("curl "))
        .unwrap_or_else(|| panic!("no curl hint for [::1]:8443:\n{printed}"));
    assert!(hint.contains(":8443:[::1]'"), "{hint}");
    let name = hint
        .split_once("https://")
        .and_then(|(_, rest)| rest.split_once(':'))
        .map(|(name, _)| name)
        .expect("the hint's URL");
    let ran = run(
        Path::new("bash"),
        &["-c", &format!("curl {hint}")],
        dir.path(),
        COMMAND_T,
    )
    .expect("run the hint");
    assert!(ran.status.success(), "curl {hint}: {}", ran.both());
    assert!(
        ran.stdout.starts_with("backend=") && ran.stdout.contains(&format!(" sni={name}")),
        "curl {hint}: {}",
        ran.stdout
    );

    let shutdown = format!(
        "{} -c doc/examples/preread.toml shutdown",
        preread.display()
    );
    let ran = run(Path::new("bash"), &["-c", &shutdown], dir.path(), COMMAND_T).expect("shutdown");
    assert!(ran.status.success(), "{}", ran.both());
    proxy.exits_cleanly("the proxy after `shutdown`");
    stop_demo(&mut demo);
}

#[test]
fn ipv6_forms_are_the_readmes() {
    assert_eq!(
        over_ipv6(
            "curl --cacert $CA --resolve www.example.com:8443:127.0.0.1 https://www.example.com:8443/"
        ),
        "curl --cacert $CA --resolve 'www.example.com:8443:[::1]' https://www.example.com:8443/"
    );
    assert_eq!(
        over_ipv6("python3 -c \"socket.create_connection(('127.0.0.1',8443))\""),
        "python3 -c \"socket.create_connection(('::1',8443))\""
    );
}

#[test]
fn outputs_match_with_ellipses() {
    assert!(matches("backend=www-... alpn=-", "backend=www-1 alpn=-"));
    assert!(matches("a ... b=...", "a x y b=1"));
    assert!(matches("exact", "exact"));
    assert!(!matches("exact", "exact and more"));
    assert!(!matches("backend=www-... alpn=-", "backend=api-0 alpn=-"));
    assert!(!matches("a...b...c", "a b"));
}
