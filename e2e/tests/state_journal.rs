//! `automatic_state_save` as a journal, against the real proxy: frontends
//! added at runtime through the command socket (single adds and batches),
//! the proxy killed with SIGKILL at random points, restarted from its state
//! file and journal; every acknowledged change is there, nothing else but
//! the change in flight at the kill (whole or not at all), and the names
//! route. An upgrade hands the saved files over to its successor.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use command::channel::BlockingChannel;
use command::proto::response_content::ContentType;
use command::proto::{self, Request, ResponseStatus, request::RequestType};
use e2e::backend::{BackendConfig, TlsBackend};
use e2e::client::tls_request;
use e2e::proxy::{COMMAND_TIMEOUT, ConfigBuilder, ProxyProcess, READY_TIMEOUT, StartOptions};

/// Kills in one run, at least; more (up to [`MAX_KILLS`]) until
/// [`MIN_COMPACTIONS`] compactions ran, so that kills land around them.
const KILLS: usize = 30;
const MAX_KILLS: usize = 80;
const MIN_COMPACTIONS: usize = 2;
/// The whole run's bound: a wedged proxy is caught by each restart's own
/// timeout, so this only has to stop a run that goes on forever. Thirty
/// lives took 26 s on an idle 2-core machine and 108 s beside
/// `stress-ng --cpu 4` and two builds.
const RUN_BOUND: Duration = Duration::from_secs(300);
/// A life is killed this long at most after its client's chosen
/// acknowledgement: inside the next change, its append, or a compaction.
const KILL_DELAY_MS: u64 = 20;
/// How long a life waits for its client's chosen acknowledgement.
const LIFE_BOUND: Duration = Duration::from_secs(10);
/// Changes one life sends at most (then it waits for its kill).
const CHANGES_PER_LIFE: usize = 30;
/// Frontends of a batch change.
const BATCH: usize = 10;
/// Every this many kills, the kill is made to cut an append short.
const TEAR_EVERY: usize = 5;

/// A small xorshift generator: the kill points, reproducible from the seed
/// the test prints.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn add(addr: SocketAddr, sni: &str) -> Request {
    Request {
        request_type: Some(RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: "alpha".to_owned(),
            address: addr.to_string(),
            sni: Some(sni.to_owned()),
            alpn: Vec::new(),
            tags: Default::default(),
            protocol: None,
        })),
    }
}

/// What one life's client saw.
#[derive(Debug, Default)]
struct Life {
    /// Names of the changes answered OK, in order.
    acknowledged: Vec<String>,
    /// The names of the change sent but not answered when the proxy died.
    in_flight: Vec<String>,
    /// An answer that was not a plain success.
    unexpected: Option<String>,
    /// Changes answered (a batch is one).
    answered: usize,
}

/// Changes the life's client has had answered so far.
fn changes_answered(seen: &Mutex<Life>) -> usize {
    seen.lock().unwrap_or_else(PoisonError::into_inner).answered
}

/// Sends changes on one command connection until it breaks (the kill) or
/// [`CHANGES_PER_LIFE`] are done, recording each as it is answered.
fn client(
    proxy_socket: std::path::PathBuf,
    addr: SocketAddr,
    life: usize,
    batches: u64,
    seen: Arc<Mutex<Life>>,
) {
    let Ok(mut channel) = BlockingChannel::connect(&proxy_socket, COMMAND_TIMEOUT) else {
        return;
    };
    let mut random = Random(batches | 1);
    for change in 0..CHANGES_PER_LIFE {
        let batch = random.below(4) == 0;
        let names: Vec<String> = (0..if batch { BATCH } else { 1 })
            .map(|k| format!("l{life}-c{change}-{k}.kill.example.com"))
            .collect();
        let request = if batch {
            Request {
                request_type: Some(RequestType::ApplyChanges(proto::ChangeBatch {
                    requests: names.iter().map(|n| add(addr, n)).collect(),
                    declarations: false,
                    more: false,
                })),
            }
        } else {
            add(addr, &names[0])
        };
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .in_flight
            .clone_from(&names);
        let Ok(answer) = channel.request(&request, |_| {}) else {
            return;
        };
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.in_flight.clear();
        if answer.status != ResponseStatus::Ok as i32 || answer.message.contains("not saved") {
            seen.unexpected = Some(format!("{names:?}: {answer:?}"));
            return;
        }
        seen.acknowledged.extend(names);
        seen.answered += 1;
    }
}

/// Leaves at the end of the journal what a kill in the middle of an append
/// would: a record whose head line is whole and whose request line is
/// not. SIGKILL seldom cuts a write of a few hundred bytes, so the test
/// makes sure it meets one.
fn tear(journal: &std::path::Path, addr: SocketAddr, life: usize) {
    let line = serde_json::to_string(&add(addr, &format!("torn-{life}.kill.example.com")))
        .expect("a request serializes");
    // Cut short, the record is dropped before its number or checksum
    // are looked at.
    let record = format!(
        "{{\"journal_record\":{{\"seq\":{},\"requests\":1,\"bytes\":{},\"crc32\":\"00000000\"}}}}\n{line}\n",
        u64::MAX,
        line.len() + 1,
    );
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(journal)
        .expect("the journal");
    std::io::Write::write_all(
        &mut file,
        &record.as_bytes()[..record.len() - line.len() / 2],
    )
    .expect("append the torn record");
}

fn listed(proxy: &ProxyProcess) -> BTreeSet<String> {
    let response = proxy
        .apply(RequestType::ListFrontends(proto::ListFrontends::default()))
        .expect("list frontends");
    match response.content.and_then(|c| c.content_type) {
        Some(ContentType::Frontends(list)) => {
            list.frontends.into_iter().filter_map(|f| f.sni).collect()
        }
        other => panic!("list frontends answered {other:?}"),
    }
}

#[test]
fn kill_9_at_random_points_loses_no_acknowledged_change() {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("state_journal: seed {seed}");
    let mut random = Random(seed);
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["*.kill.example.com"]));
    let config = ConfigBuilder::new()
        .global("saved_state = \"${dir}/state.json\"")
        .global("automatic_state_save = true")
        .listener("main", &[])
        .frontend("alpha", "main", Some("first.kill.example.com"), &[])
        .backend("alpha", "alpha-0", alpha.addr())
        .build();
    // The start of each compaction is logged at debug level.
    let options =
        StartOptions::default().env("RUST_LOG", "info,preread_control::server::saving=debug");
    let mut proxy = ProxyProcess::start_with(&config, &options).expect("start");
    let addr = proxy.addr("main");
    let socket = proxy.socket_path().to_owned();
    let began = Instant::now();
    let mut expected: BTreeSet<String> = ["first.kill.example.com".to_owned()].into();
    let mut in_flight_kept = 0;
    let mut torn = 0;
    let journal = proxy.dir().join("state.json.journal");
    let mut changes = 0;
    let compactions = |proxy: &ProxyProcess| {
        proxy
            .stderr_text()
            .matches("compacting the state journal")
            .count()
    };
    let mut lives = 0;
    for life in 0..MAX_KILLS {
        if life >= KILLS && compactions(&proxy) >= MIN_COMPACTIONS {
            break;
        }
        lives += 1;
        assert!(
            began.elapsed() < RUN_BOUND,
            "{life} kills in {RUN_BOUND:?}: the run is too slow"
        );
        let seen = Arc::new(Mutex::new(Life::default()));
        let writer = {
            let (socket, seen, batches) = (socket.clone(), Arc::clone(&seen), random.next());
            thread::spawn(move || client(socket, addr, life, batches, seen))
        };
        // The kill point is counted in the client's progress, then a few
        // milliseconds of wall time: a slow machine gets fewer changes
        // into a wall-clock life, and then the run would not reach its
        // compactions. Counted, it does on any machine.
        let target = random.below(CHANGES_PER_LIFE as u64) as usize;
        let deadline = Instant::now() + LIFE_BOUND;
        while !writer.is_finished() && changes_answered(&seen) < target && Instant::now() < deadline
        {
            thread::sleep(Duration::from_millis(1));
        }
        thread::sleep(Duration::from_millis(random.below(KILL_DELAY_MS)));
        proxy.kill().expect("kill -9");
        writer.join().expect("the client thread");
        let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(PoisonError::into_inner));
        assert_eq!(seen.unexpected, None, "life {life}");
        changes += seen.acknowledged.len();
        expected.extend(seen.acknowledged);
        if life % TEAR_EVERY == TEAR_EVERY - 1 {
            tear(&journal, addr, life);
            torn += 1;
        }

        proxy
            .restart(READY_TIMEOUT)
            .expect("restart from the saved state");
        let found = listed(&proxy);
        let missing: Vec<_> = expected.difference(&found).collect();
        assert!(
            missing.is_empty(),
            "life {life} (seed {seed}): acknowledged but lost: {missing:?}"
        );
        let extra: BTreeSet<String> = found.difference(&expected).cloned().collect();
        let in_flight: BTreeSet<String> = seen.in_flight.into_iter().collect();
        assert!(
            extra.is_empty() || extra == in_flight,
            "life {life} (seed {seed}): present but never acknowledged: {extra:?} (in flight: \
             {in_flight:?})"
        );
        if !extra.is_empty() {
            in_flight_kept += 1;
            expected.extend(extra);
        }
    }
    let stderr = proxy.stderr_text();
    let compactions = compactions(&proxy);
    let completed = stderr.matches("state journal compacted").count();
    eprintln!(
        "state_journal: {lives} kills in {:?}, {changes} name(s) acknowledged, {} in all, {} \
         change(s) in flight kept, {compactions} compaction(s) started, {} of them killed \
         before they ended, {} torn tail(s) dropped",
        began.elapsed(),
        expected.len(),
        in_flight_kept,
        compactions - completed,
        stderr.matches("never acknowledged").count()
    );
    assert!(
        stderr.matches("never acknowledged").count() >= torn,
        "every torn append was dropped with a warning"
    );
    assert!(
        compactions >= MIN_COMPACTIONS,
        "{compactions} compaction(s) in {lives} lives: the run did not cover them"
    );
    assert_eq!(
        stderr.matches("journal record(s) after it").count(),
        lives,
        "every restart replays the journal"
    );
    // The names route, the first and the last acknowledged.
    let last = expected.iter().next_back().cloned().unwrap_or_default();
    for sni in ["first.kill.example.com", last.as_str()] {
        let outcome = tls_request(addr, sni, &[], None).unwrap_or_else(|e| panic!("{sni}: {e}"));
        assert_eq!(outcome.backend(), Some("alpha-0"), "{sni}: {outcome:?}");
    }
}

#[test]
fn an_upgrade_hands_the_saved_state_over_to_the_successor() {
    let alpha = TlsBackend::start(BackendConfig::new("alpha-0", &["*.kill.example.com"]));
    let config = ConfigBuilder::new()
        .global("saved_state = \"${dir}/state.json\"")
        .global("automatic_state_save = true")
        .global("soft_stop_grace = 1")
        .listener("main", &[])
        .cluster("alpha", &[])
        .backend("alpha", "alpha-0", alpha.addr())
        .build();
    let mut proxy = ProxyProcess::start(&config).expect("start");
    let addr = proxy.addr("main");
    let send = |proxy: &ProxyProcess, sni: &str| {
        let answer = proxy
            .command(&add(addr, sni))
            .expect("the command socket answers");
        assert_eq!(answer.status, ResponseStatus::Ok as i32, "{answer:?}");
    };
    send(&proxy, "before.kill.example.com");
    let out = proxy
        .upgrade(&[], Duration::from_secs(30))
        .expect("upgrade");
    assert!(out.status.success(), "{out:?}");
    let successor = proxy.serving_pid().expect("the successor's pid");
    send(&proxy, "after.kill.example.com");
    // The successor dies; the old process has drained and exited.
    let pid = i32::try_from(successor).expect("a pid");
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is the
    // successor's, which `status` just reported and which runs (it answered).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + READY_TIMEOUT;
    while ProxyProcess::is_running(successor) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !ProxyProcess::is_running(successor),
        "the successor is gone"
    );
    proxy
        .wait_exit(READY_TIMEOUT)
        .expect("the old process exits");
    proxy
        .restart(READY_TIMEOUT)
        .expect("restart from the saved state");
    let found = listed(&proxy);
    assert_eq!(
        found,
        ["after.kill.example.com", "before.kill.example.com"]
            .map(str::to_owned)
            .into(),
    );
    let booted = proxy
        .wait_stderr("booting from the state file", Duration::ZERO)
        .expect("booted from the saved state");
    assert!(booted.contains("and 1 journal record(s)"), "{booted}");
    let outcome = tls_request(addr, "after.kill.example.com", &[], None).expect("routed");
    assert_eq!(outcome.backend(), Some("alpha-0"), "{outcome:?}");
}
