//! The command server over a real Unix socket, driven with fake workers
//! that answer orders per a script: validation, fan-out, rollback when a
//! worker refuses, the route tables the workers share, timeouts, state
//! files, queries, bad frames, stop.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use command::change::Change;
use command::channel::{
    BlockingChannel, DEFAULT_MAX_FRAME_LEN, E_CHANNEL_FRAME, FrameDecoder, encode_frame,
};
use command::codes::ErrorCode;
use command::listener_key::ListenerKey;
use command::proto::{self, request::RequestType, response_content::ContentType};
use command::state::ConfigState;
use command::state_file::{journal_path, load_state, seal};
use mio::{Poll, Token, Waker};
use preread_control::server::{CommandServer, E_WORKER_TIMEOUT, ServerSettings, StopKind};
use preread_worker::answer_code::AnswerCode;
use preread_worker::worker::orders::{Answer, Order, OrderId, Reply, WorkerHandle, WorkerInbox};
use tempfile::TempDir;

/// The code a fake worker refuses a bind with: any code but the one the
/// server would put in its place, so a test sees the worker's own code
/// relayed.
const FAKE_BIND: AnswerCode = AnswerCode::Validation(ErrorCode::InvalidValue);

/// Upper bound on any wait; reaching it fails the test.
const BOUND: Duration = Duration::from_secs(10);

// ---- fake workers ----

/// How a fake worker answers.
#[derive(Debug, Clone)]
enum Script {
    /// Done to every Apply.
    Done,
    /// Refused to adding the listener at this address, Done otherwise.
    RefuseListener(String),
    /// Never answers anything.
    Silent,
    /// Done, after a delay.
    Slow(Duration),
}

/// What a fake worker saw: each order with when it arrived and when it
/// was answered.
#[derive(Debug, Clone)]
struct Seen {
    order: Order,
    received: Instant,
    answered: Option<Instant>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

struct Fake {
    log: Log,
    thread: JoinHandle<()>,
}

fn spawn_fake(
    id: u32,
    script: Script,
    replies: Sender<Reply>,
    main_waker: Arc<Waker>,
) -> (WorkerHandle, Fake) {
    let poll = Poll::new().expect("poll");
    let waker = Arc::new(Waker::new(poll.registry(), Token(0)).expect("waker"));
    let (orders_tx, orders_rx) = mpsc::channel::<(OrderId, Order)>();
    let inbox = WorkerInbox {
        id,
        orders: orders_rx,
        replies,
        main_waker,
    };
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    let thread = thread::spawn(move || {
        let _poll = poll;
        while let Ok((order_id, order)) = inbox.orders.recv() {
            let index = {
                let mut seen = seen.lock().expect("log");
                seen.push(Seen {
                    order: order.clone(),
                    received: Instant::now(),
                    answered: None,
                });
                seen.len() - 1
            };
            let answer = match (&script, &order) {
                (Script::Silent, _) => continue,
                (Script::Slow(delay), _) => {
                    thread::sleep(*delay);
                    Answer::Done
                }
                (Script::RefuseListener(refused), Order::Apply(generation)) => {
                    let binds = generation.requests().iter().any(|request| {
                        matches!(&request.request_type,
                            Some(RequestType::AddTcpListener(l)) if &l.address == refused)
                    });
                    if binds {
                        Answer::Refused {
                            code: FAKE_BIND,
                            message: format!("cannot bind {refused}: address in use"),
                        }
                    } else {
                        Answer::Done
                    }
                }
                (_, Order::Status) => Answer::Status {
                    sessions: 3,
                    listeners: 1,
                },
                (_, Order::Metrics) => Answer::Metrics(proto::WorkerMetrics {
                    worker_id: id,
                    values: [
                        ("tcp.accepted".to_owned(), i64::from(id) + 1),
                        ("bytes_in".to_owned(), 10),
                    ]
                    .into_iter()
                    .collect(),
                    series: Vec::new(),
                }),
                _ => Answer::Done,
            };
            if let Some(entry) = seen.lock().expect("log").get_mut(index) {
                entry.answered = Some(Instant::now());
            }
            inbox.answer(order_id, answer);
            if matches!(order, Order::SoftStop { .. } | Order::HardStop) {
                return;
            }
        }
    });
    (
        WorkerHandle::new(id, orders_tx, waker),
        Fake { log, thread },
    )
}

// ---- the server under test ----

fn temp_dir(name: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("preread-srv-{name}-"))
        .tempdir()
        .expect("temp dir")
}

fn settings(dir: &Path) -> ServerSettings {
    ServerSettings {
        socket_path: dir.join("cmd.sock"),
        saved_state: None,
        automatic_state_save: false,
        order_timeout: BOUND,
        soft_stop_grace: Duration::from_millis(200),
        config_path: None,
        check_unbound: false,
        exe: None,
        argv: Vec::new(),
        client_timeout: BOUND,
    }
}

struct Harness {
    dir: TempDir,
    socket: PathBuf,
    fakes: Vec<Fake>,
    done: Receiver<std::io::Result<(StopKind, ConfigState)>>,
}

impl Harness {
    fn start(name: &str, scripts: &[Script]) -> Self {
        let dir = temp_dir(name);
        let settings = settings(dir.path());
        Self::start_with(dir, settings, ConfigState::default(), scripts)
    }

    fn start_with(
        dir: TempDir,
        settings: ServerSettings,
        state: ConfigState,
        scripts: &[Script],
    ) -> Self {
        let (server, fakes) = server_with(settings, state, scripts);
        Self::serve(dir, server, fakes)
    }

    /// Runs `server` on a thread of its own.
    fn serve(dir: TempDir, server: CommandServer, fakes: Vec<Fake>) -> Self {
        let socket = server.socket_path().to_owned();
        let (tx, done) = mpsc::channel();
        thread::spawn(move || {
            let mut server = server;
            let outcome = server.run().map(|kind| (kind, server.state().clone()));
            drop(server);
            let _ = tx.send(outcome);
        });
        Self {
            dir,
            socket,
            fakes,
            done,
        }
    }

    fn client(&self) -> BlockingChannel {
        BlockingChannel::connect(&self.socket, BOUND).expect("connect")
    }

    fn ask(&self, kind: RequestType) -> proto::Response {
        ask(&mut self.client(), kind)
    }

    fn log(&self, worker: usize) -> Vec<Order> {
        self.fakes
            .get(worker)
            .map(|f| {
                f.log
                    .lock()
                    .expect("log")
                    .iter()
                    .map(|s| s.order.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until worker `worker` saw `n` orders.
    fn wait_orders(&self, worker: usize, n: usize) -> Vec<Order> {
        let deadline = Instant::now() + BOUND;
        loop {
            let log = self.log(worker);
            if log.len() >= n {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "worker {worker} saw only {log:?}"
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Soft-stops the server and returns its final state.
    fn stop(self) -> ConfigState {
        let response = self.ask(RequestType::SoftStop(proto::SoftStop {}));
        assert_ok(&response);
        let (kind, state) = self
            .done
            .recv_timeout(BOUND)
            .expect("server loop returned in time")
            .expect("server ran");
        assert_eq!(kind, StopKind::Soft);
        assert!(!self.socket.exists(), "socket file removed on exit");
        for fake in self.fakes {
            let deadline = Instant::now() + BOUND;
            while !fake.thread.is_finished() {
                assert!(Instant::now() < deadline, "fake worker did not stop");
                thread::sleep(Duration::from_millis(5));
            }
        }
        state
    }
}

fn server_with(
    settings: ServerSettings,
    state: ConfigState,
    scripts: &[Script],
) -> (CommandServer, Vec<Fake>) {
    let (replies_tx, replies_rx) = mpsc::channel();
    let mut server = CommandServer::bind(settings, state, replies_rx).expect("bind");
    let mut fakes = Vec::new();
    for (id, script) in scripts.iter().enumerate() {
        let id = u32::try_from(id).expect("id");
        let (handle, fake) = spawn_fake(id, script.clone(), replies_tx.clone(), server.waker());
        server.add_worker(handle);
        fakes.push(fake);
    }
    (server, fakes)
}

// ---- requests ----

fn ask(channel: &mut BlockingChannel, kind: RequestType) -> proto::Response {
    channel
        .request(
            &proto::Request {
                request_type: Some(kind),
            },
            |_| {},
        )
        .expect("answer")
}

fn cluster(id: &str) -> RequestType {
    RequestType::AddCluster(proto::Cluster {
        cluster_id: id.to_owned(),
        ..Default::default()
    })
}

fn listener(address: &str) -> RequestType {
    RequestType::AddTcpListener(proto::TcpListenerConfig {
        address: address.to_owned(),
        ..Default::default()
    })
}

fn frontend(cluster: &str, address: &str, sni: &str) -> RequestType {
    RequestType::AddTcpFrontend(proto::TcpFrontend {
        cluster_id: cluster.to_owned(),
        address: address.to_owned(),
        sni: Some(sni.to_owned()),
        ..Default::default()
    })
}

fn backend(cluster: &str, id: &str, address: &str) -> RequestType {
    RequestType::AddBackend(proto::Backend {
        cluster_id: cluster.to_owned(),
        backend_id: id.to_owned(),
        address: address.to_owned(),
        ..Default::default()
    })
}

const ADDR: &str = "127.0.0.1:8443";

fn setup() -> Vec<RequestType> {
    vec![
        cluster("alpha"),
        listener(ADDR),
        frontend("alpha", ADDR, "a.example.com"),
        backend("alpha", "alpha-0", "127.0.0.1:9001"),
    ]
}

fn assert_ok(response: &proto::Response) {
    assert_eq!(
        response.status,
        proto::ResponseStatus::Ok as i32,
        "{response:?}"
    );
}

fn assert_failure(response: &proto::Response, code: &str) {
    assert_eq!(
        response.status,
        proto::ResponseStatus::Failure as i32,
        "{response:?}"
    );
    assert_eq!(response.error_code, code, "{response:?}");
}

fn content(response: proto::Response) -> ContentType {
    response
        .content
        .and_then(|c| c.content_type)
        .expect("content")
}

fn cluster_ids(h: &Harness) -> Vec<String> {
    let ContentType::Clusters(list) =
        content(h.ask(RequestType::ListClusters(proto::ListClusters::default())))
    else {
        panic!("not clusters");
    };
    list.clusters
        .into_iter()
        .filter_map(|c| c.cluster.map(|c| c.cluster_id))
        .collect()
}

fn listings(h: &Harness) -> (ContentType, ContentType, ContentType) {
    (
        content(h.ask(RequestType::ListListeners(proto::ListListeners {}))),
        content(h.ask(RequestType::ListClusters(proto::ListClusters::default()))),
        content(h.ask(RequestType::ListFrontends(proto::ListFrontends::default()))),
    )
}

/// Requests as the typed change model writes them back (every default
/// resolved): what a generation carries.
fn canonical(requests: &[RequestType]) -> Vec<RequestType> {
    requests
        .iter()
        .map(|kind| {
            let request = proto::Request {
                request_type: Some(kind.clone()),
            };
            let change = Change::from_request(&request).expect("a change");
            change.to_request().request_type.expect("a request")
        })
        .collect()
}

/// The changes of every generation a worker was given, in order.
fn applies(log: &[Order]) -> Vec<RequestType> {
    log.iter()
        .flat_map(|o| match o {
            Order::Apply(generation) => generation.requests(),
            _ => Vec::new(),
        })
        .filter_map(|r| r.request_type)
        .collect()
}

/// How many generations a worker was given.
fn generations(log: &[Order]) -> usize {
    log.iter().filter(|o| matches!(o, Order::Apply(_))).count()
}

fn state_of(requests: &[RequestType]) -> ConfigState {
    let mut state = ConfigState::default();
    for kind in requests {
        let request = proto::Request {
            request_type: Some(kind.clone()),
        };
        let _applied = state.dispatch(&request).expect("valid");
    }
    state
}

// ---- tests ----

#[test]
fn changes_are_applied_on_every_worker_and_listed() {
    let h = Harness::start("apply", &[Script::Done, Script::Done]);
    let mut client = h.client();
    for kind in setup() {
        assert_ok(&ask(&mut client, kind));
    }
    for worker in 0..2 {
        assert_eq!(
            applies(&h.log(worker)),
            canonical(&setup()),
            "worker {worker}"
        );
    }
    let (listeners, clusters, frontends) = listings(&h);
    let ContentType::Listeners(listeners) = listeners else {
        panic!("not listeners");
    };
    let entry = listeners.listeners.first().expect("one listener");
    assert!(entry.active);
    assert_eq!(
        entry.config.as_ref().map(|c| c.address.as_str()),
        Some(ADDR)
    );
    let ContentType::Clusters(clusters) = clusters else {
        panic!("not clusters");
    };
    let alpha = clusters.clusters.first().expect("one cluster");
    assert_eq!(alpha.backends.len(), 1);
    assert_eq!(alpha.backends[0].backend_id, "alpha-0");
    let ContentType::Frontends(frontends) = frontends else {
        panic!("not frontends");
    };
    assert_eq!(frontends.frontends.len(), 1);
    assert_eq!(h.stop(), state_of(&setup()));
}

#[test]
fn an_invalid_request_is_refused_with_its_code_and_changes_nothing() {
    let h = Harness::start("invalid", &[Script::Done]);
    let mut client = h.client();
    for kind in setup() {
        assert_ok(&ask(&mut client, kind));
    }
    let before = listings(&h);
    let response = ask(&mut client, frontend("alpha", ADDR, "a.*.example.com"));
    assert_failure(&response, "E201");
    assert!(!response.message.is_empty());
    assert_eq!(listings(&h), before);
    assert_eq!(applies(&h.log(0)).len(), setup().len(), "nothing sent");
    // The connection still serves.
    assert_ok(&ask(&mut client, cluster("beta")));
    h.stop();
}

#[test]
fn a_cap_above_the_buffer_size_is_accepted() {
    // The preread window grows past a pooled buffer up to its cap, so
    // buffer_size no longer bounds sni_preread_max_bytes.
    let h = Harness::start("cap", &[Script::Done]);
    let mut client = h.client();
    for kind in setup() {
        assert_ok(&ask(&mut client, kind));
    }
    let big = |address: &str| proto::TcpListenerConfig {
        address: address.into(),
        sni_preread_max_bytes: Some(1 << 20),
        ..Default::default()
    };
    assert_ok(&ask(
        &mut client,
        RequestType::AddTcpListener(big("127.0.0.1:9001")),
    ));
    assert_ok(&ask(&mut client, RequestType::UpdateTcpListener(big(ADDR))));
    assert_eq!(applies(&h.log(0)).len(), setup().len() + 2);
    h.stop();
}

#[test]
fn an_identical_re_add_is_ok_and_sends_nothing() {
    let h = Harness::start("unchanged", &[Script::Done, Script::Done]);
    let mut client = h.client();
    for kind in setup() {
        assert_ok(&ask(&mut client, kind));
    }
    for kind in setup() {
        let response = ask(&mut client, kind);
        assert_ok(&response);
        assert!(response.message.contains("unchanged"), "{response:?}");
    }
    for worker in 0..2 {
        assert_eq!(applies(&h.log(worker)).len(), setup().len());
    }
    h.stop();
}

#[test]
fn a_worker_refusal_is_rolled_back_on_the_others() {
    let h = Harness::start(
        "refusal",
        &[Script::Done, Script::RefuseListener(ADDR.to_owned())],
    );
    let mut client = h.client();
    assert_ok(&ask(&mut client, cluster("alpha")));
    let response = ask(&mut client, listener(ADDR));
    assert_failure(&response, FAKE_BIND.as_str());
    assert!(response.message.contains("address in use"), "{response:?}");
    // Worker 0 applied it, then got the inverse; worker 1 got no inverse.
    let log = applies(&h.wait_orders(0, 3));
    assert!(matches!(&log[1], RequestType::AddTcpListener(l) if l.address == ADDR));
    assert!(
        matches!(&log[2], RequestType::RemoveListener(l) if l.address == ADDR),
        "{log:?}"
    );
    let ContentType::Listeners(listeners) =
        content(h.ask(RequestType::ListListeners(proto::ListListeners {})))
    else {
        panic!("not listeners");
    };
    assert!(listeners.listeners.is_empty());
    // Other changes still apply.
    assert_ok(&ask(&mut client, listener("127.0.0.1:8444")));
    assert_eq!(applies(&h.log(1)).len(), 3, "worker 1: no inverse");
    let state = h.stop();
    assert_eq!(
        state,
        state_of(&[cluster("alpha"), listener("127.0.0.1:8444")])
    );
}

/// The generations a worker was given, in order.
fn generations_of(log: &[Order]) -> Vec<Arc<command::generation::Generation>> {
    log.iter()
        .filter_map(|o| match o {
            Order::Apply(generation) => Some(Arc::clone(generation)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_workers_are_given_the_state_s_own_route_tables() -> Result<(), String> {
    let h = Harness::start(
        "shared-routes",
        &[
            Script::Done,
            Script::RefuseListener("127.0.0.1:8444".into()),
        ],
    );
    let mut client = h.client();
    for kind in setup() {
        assert_ok(&ask(&mut client, kind));
    }
    let address: std::net::SocketAddr = ADDR.parse().map_err(|e| format!("{e}"))?;
    let (zero, one) = (generations_of(&h.log(0)), generations_of(&h.log(1)));
    // The frontend's generation carries the listener's table, one for all.
    let routed = &zero[2];
    assert!(
        Arc::ptr_eq(routed, &one[2]),
        "one generation for every worker"
    );
    let [(at, table)] = routed.routes.as_slice() else {
        return Err(format!("not one table: {:?}", routed.routes));
    };
    assert_eq!((*at, table.len()), (ListenerKey::tcp(address), 1));
    assert!(routed.routes_before.iter().all(|(_, t)| t.is_empty()));
    // Only frontends bring tables.
    for other in [&zero[0], &zero[1], &zero[3]] {
        assert!(other.routes.is_empty(), "{other:?}");
    }
    // Refused by worker 1, undone on worker 0 with the table it had.
    let response = ask(
        &mut client,
        batch(vec![
            frontend("alpha", ADDR, "b.example.com"),
            listener("127.0.0.1:8444"),
        ]),
    );
    assert_eq!(batch_report(response).applied_total, 0);
    let zero = generations_of(&h.wait_orders(0, 6));
    let (refused, inverse) = (&zero[4], &zero[5]);
    assert_eq!(refused.routes.first().map(|(_, t)| t.len()), Some(2));
    let [(_, before)] = inverse.routes.as_slice() else {
        return Err(format!("not one table: {:?}", inverse.routes));
    };
    assert!(before.same_storage(table), "the very table worker 0 had");
    let state = h.stop();
    let kept = state
        .route_table(&ListenerKey::tcp(address))
        .ok_or("no listener")?;
    assert!(
        kept.same_storage(table),
        "the state shares the workers' table"
    );
    Ok(())
}

fn batch(kinds: Vec<RequestType>) -> RequestType {
    RequestType::ApplyChanges(proto::ChangeBatch {
        requests: kinds
            .into_iter()
            .map(|kind| proto::Request {
                request_type: Some(kind),
            })
            .collect(),
        ..Default::default()
    })
}

fn batch_report(response: proto::Response) -> proto::BatchReport {
    match content(response) {
        ContentType::Batch(report) => report,
        other => panic!("not a batch report: {other:?}"),
    }
}

#[test]
fn a_batch_is_one_generation_and_lists_what_it_skipped() {
    let h = Harness::start("batch", &[Script::Done, Script::Done]);
    let mut client = h.client();
    let response = ask(
        &mut client,
        batch(vec![
            cluster("alpha"),
            listener(ADDR),
            frontend("nowhere", ADDR, "x.example.com"),
            frontend("alpha", ADDR, "a.example.com"),
            cluster("alpha"),
        ]),
    );
    assert_ok(&response);
    let report = batch_report(response);
    assert_eq!(report.applied.len(), 3, "{report:?}");
    assert_eq!(report.unchanged, 1);
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].error_code, "E302", "{report:?}");
    for worker in 0..2 {
        let log = h.log(worker);
        assert_eq!(generations(&log), 1, "worker {worker}: one generation");
        assert_eq!(applies(&log).len(), 3);
    }
    assert_eq!(
        h.stop(),
        state_of(&[
            cluster("alpha"),
            listener(ADDR),
            frontend("alpha", ADDR, "a.example.com")
        ])
    );
}

fn part(kinds: Vec<RequestType>, declarations: bool, more: bool) -> RequestType {
    let RequestType::ApplyChanges(mut batch) = batch(kinds) else {
        unreachable!()
    };
    batch.declarations = declarations;
    batch.more = more;
    RequestType::ApplyChanges(batch)
}

#[test]
fn declarations_in_parts_apply_their_diff_as_one_generation() {
    let h = Harness::start("declarations", &[Script::Done, Script::Done]);
    let mut client = h.client();
    for kind in setup() {
        assert_ok(&ask(&mut client, kind));
    }
    let before = generations(&h.log(0));
    // The wanted state: the setup, without its backend, plus a cluster; in
    // three parts.
    let mut wanted: Vec<RequestType> = setup()
        .into_iter()
        .filter(|k| !matches!(k, RequestType::AddBackend(_)))
        .collect();
    wanted.push(cluster("beta"));
    let (first, rest) = wanted.split_at(2);
    let (second, third) = rest.split_at(1);
    let answer = ask(&mut client, part(first.to_vec(), true, true));
    assert_ok(&answer);
    assert!(answer.message.contains("2 request(s) so far"), "{answer:?}");
    assert_ok(&ask(&mut client, part(second.to_vec(), true, true)));
    let report = batch_report(ask(&mut client, part(third.to_vec(), true, false)));
    assert_eq!(report.applied_total, 2, "{report:?}");
    assert!(matches!(
        report.applied[0].request_type,
        Some(RequestType::RemoveBackend(_))
    ));
    assert_eq!(generations(&h.log(0)), before + 1, "one generation");

    // Parts that disagree: refused, and the next batch starts afresh.
    assert_ok(&ask(&mut client, part(vec![cluster("x")], true, true)));
    let refused = ask(&mut client, part(vec![cluster("y")], false, false));
    assert_failure(&refused, AnswerCode::BadBatch.as_str());
    let report = batch_report(ask(&mut client, part(wanted.clone(), true, false)));
    assert_eq!(report.applied_total, 0, "{report:?}");
    assert_eq!(h.stop(), state_of(&wanted));
}

#[test]
fn a_refused_batch_is_rolled_back_as_one_generation() {
    let h = Harness::start(
        "batch-refused",
        &[Script::Done, Script::RefuseListener(ADDR.to_owned())],
    );
    let mut client = h.client();
    let response = ask(
        &mut client,
        batch(vec![
            cluster("alpha"),
            listener(ADDR),
            frontend("alpha", ADDR, "a.example.com"),
        ]),
    );
    assert_ok(&response);
    let report = batch_report(response);
    assert!(report.applied.is_empty(), "{report:?}");
    let codes: Vec<&str> = report
        .skipped
        .iter()
        .map(|s| s.error_code.as_str())
        .collect();
    assert_eq!(codes, [FAKE_BIND.as_str(); 3]);
    // Worker 0 applied it, then got its inverse as one generation, last
    // change first; worker 1 refused it and got nothing more.
    let log = h.wait_orders(0, 2);
    assert_eq!(generations(&log), 2);
    let undone: Vec<RequestType> = applies(&log).into_iter().skip(3).collect();
    assert!(
        matches!(
            undone.as_slice(),
            [
                RequestType::RemoveTcpFrontend(_),
                RequestType::RemoveListener(_),
                RequestType::RemoveCluster(_)
            ]
        ),
        "{undone:?}"
    );
    assert_eq!(generations(&h.log(1)), 1);
    assert_eq!(h.stop(), ConfigState::default());
}

#[test]
fn a_worker_that_never_answers_times_out() {
    let dir = temp_dir("timeout");
    let settings = ServerSettings {
        order_timeout: Duration::from_millis(300),
        ..settings(dir.path())
    };
    let h = Harness::start_with(
        dir,
        settings,
        ConfigState::default(),
        &[Script::Done, Script::Silent],
    );
    let started = Instant::now();
    let response = h.ask(cluster("alpha"));
    assert_failure(&response, E_WORKER_TIMEOUT);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(cluster_ids(&h).is_empty(), "not committed");
    // The answering worker undid it.
    let log = applies(&h.wait_orders(0, 2));
    assert!(matches!(&log[1], RequestType::RemoveCluster(c) if c.cluster_id == "alpha"));
    // A query times out too.
    assert_failure(
        &h.ask(RequestType::Status(proto::Status {})),
        E_WORKER_TIMEOUT,
    );
    // The stop does not wait forever for the silent worker.
    assert_eq!(h.stop(), ConfigState::default());
}

#[test]
fn automatic_state_save_writes_a_loadable_file_after_each_change() {
    let dir = temp_dir("autosave");
    let file = dir.path().join("state.json");
    let settings = ServerSettings {
        saved_state: Some(file.clone()),
        automatic_state_save: true,
        ..settings(dir.path())
    };
    let h = Harness::start_with(dir, settings, ConfigState::default(), &[Script::Done]);
    let journal = journal_path(&file);
    let mut client = h.client();
    let mut done = Vec::new();
    let mut snapshot = None;
    let mut journal_len = 0;
    for kind in setup() {
        assert_ok(&ask(&mut client, kind.clone()));
        done.push(kind);
        assert_eq!(load_state(&file).expect("loadable"), state_of(&done));
        // The first change saves the state whole (it did not come from the
        // file); the later ones are appended to the journal, the snapshot
        // untouched.
        let now = std::fs::read(&file).expect("the snapshot");
        let len = std::fs::metadata(&journal).expect("the journal").len();
        if let Some(before) = &snapshot {
            assert_eq!(&now, before, "the snapshot was rewritten");
            assert!(len > journal_len, "nothing appended");
        }
        snapshot = Some(now);
        journal_len = len;
    }
    // A refused change leaves the files as they were.
    assert_failure(
        &ask(&mut client, frontend("nope", ADDR, "b.example.com")),
        "E302",
    );
    assert_eq!(load_state(&file).expect("loadable"), state_of(&done));
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), journal_len);
    // `state save` to the saved state's path writes the snapshot whole,
    // and the journal starts over after it.
    assert_ok(&ask(
        &mut client,
        RequestType::SaveState(proto::SaveState {
            path: String::new(),
        }),
    ));
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap(),
        "{\"preread_journal\":1}\n"
    );
    assert_eq!(load_state(&file).expect("loadable"), state_of(&done));
    assert_ok(&ask(&mut client, cluster("beta")));
    done.push(cluster("beta"));
    assert_eq!(load_state(&file).expect("loadable"), state_of(&done));
    h.stop();
}

#[test]
fn save_and_load_state_round_trip() {
    let h = Harness::start("saveload", &[Script::Done, Script::Done]);
    let saved = h.dir.path().join("saved.json");
    let mut client = h.client();
    for kind in setup() {
        assert_ok(&ask(&mut client, kind));
    }
    let full = listings(&h);
    let response = ask(
        &mut client,
        RequestType::SaveState(proto::SaveState {
            path: saved.display().to_string(),
        }),
    );
    assert_ok(&response);
    assert_eq!(load_state(&saved).expect("saved"), state_of(&setup()));

    // Remove the backend and the frontend, then load the file back.
    assert_ok(&ask(
        &mut client,
        RequestType::RemoveBackend(proto::BackendRef {
            cluster_id: "alpha".into(),
            backend_id: "alpha-0".into(),
            address: "127.0.0.1:9001".into(),
        }),
    ));
    let RequestType::AddTcpFrontend(f) = frontend("alpha", ADDR, "a.example.com") else {
        unreachable!()
    };
    assert_ok(&ask(&mut client, RequestType::RemoveTcpFrontend(f)));
    assert_ne!(listings(&h), full);
    let sent_before = applies(&h.log(0)).len();
    let generations_before = generations(&h.log(1));
    let response = ask(
        &mut client,
        RequestType::LoadState(proto::LoadState {
            path: saved.display().to_string(),
        }),
    );
    assert_ok(&response);
    assert!(response.message.contains("2 applied"), "{response:?}");
    assert_eq!(listings(&h), full);
    assert_eq!(applies(&h.log(1)).len(), sent_before + 2);
    assert_eq!(
        generations(&h.log(1)),
        generations_before + 1,
        "the load is one generation"
    );

    // A line added: the trailer no longer matches. Sealed anew, the line
    // itself is refused. FAILURE either way, nothing changed.
    let corrupt = h.dir.path().join("corrupt.json");
    let text = std::fs::read_to_string(&saved).expect("saved");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(2, "{\"add_cluster\": 42}");
    let added = lines.join("\n") + "\n";
    let body = lines[..lines.len() - 1].join("\n") + "\n";
    for (text, code, line) in [(added, "E013", "line 7"), (seal(&body), "E010", "line 3")] {
        std::fs::write(&corrupt, text).expect("write");
        let response = ask(
            &mut client,
            RequestType::LoadState(proto::LoadState {
                path: corrupt.display().to_string(),
            }),
        );
        assert_failure(&response, code);
        assert!(response.message.contains(line), "{response:?}");
        assert_eq!(listings(&h), full);
        assert_eq!(applies(&h.log(1)).len(), sent_before + 2, "nothing sent");
    }

    // A missing file.
    let response = ask(
        &mut client,
        RequestType::LoadState(proto::LoadState {
            path: h.dir.path().join("missing.json").display().to_string(),
        }),
    );
    assert_failure(&response, "E012");
    assert_eq!(h.stop(), state_of(&setup()));
}

#[test]
fn metrics_are_summed_over_the_workers() {
    let h = Harness::start("metrics", &[Script::Done, Script::Done]);
    let ContentType::Metrics(report) =
        content(h.ask(RequestType::QueryMetrics(proto::QueryMetrics::default())))
    else {
        panic!("not metrics");
    };
    let ids: Vec<u32> = report.workers.iter().map(|w| w.worker_id).collect();
    assert_eq!(ids, vec![0, 1]);
    // The process-wide health and resolution counters join the total; the
    // stand-in workers' state has no backend, so no `backend.<id>.up`.
    let expected: BTreeMap<String, i64> = [
        ("backend.down".to_owned(), 0),
        ("backend.recovered".to_owned(), 0),
        ("backend.resolve.errors".to_owned(), 0),
        ("bytes_in".to_owned(), 20),
        ("config.generation".to_owned(), 0),
        ("tcp.accepted".to_owned(), 3),
    ]
    .into_iter()
    .collect();
    assert_eq!(report.total, expected);
    h.stop();
}

#[test]
fn status_reports_workers_listeners_and_sessions() {
    let h = Harness::start("status", &[Script::Done, Script::Done]);
    let mut client = h.client();
    for kind in setup() {
        assert_ok(&ask(&mut client, kind));
    }
    let ContentType::Status(status) =
        content(ask(&mut client, RequestType::Status(proto::Status {})))
    else {
        panic!("not status");
    };
    assert_eq!(status.workers, 2);
    assert_eq!(status.listeners, 1);
    assert_eq!(status.sessions, 6);
    h.stop();
}

fn read_response(stream: &mut UnixStream) -> proto::Response {
    let mut decoder = FrameDecoder::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(response) = decoder.next_frame::<proto::Response>().expect("frame") {
            return response;
        }
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "closed before a whole answer");
        decoder.push(&buf[..n]);
    }
}

#[test]
fn a_garbage_frame_gets_a_failure_and_a_close_and_the_server_goes_on() {
    let h = Harness::start("garbage", &[Script::Done]);
    let mut raw = UnixStream::connect(&h.socket).expect("connect");
    raw.set_read_timeout(Some(BOUND)).expect("timeout");
    raw.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff])
        .expect("write");
    let response = read_response(&mut raw);
    assert_failure(&response, E_CHANNEL_FRAME);
    let mut rest = Vec::new();
    raw.read_to_end(&mut rest).expect("closed cleanly");
    assert!(rest.is_empty());

    // An over-cap header, with bytes after it.
    let mut raw = UnixStream::connect(&h.socket).expect("connect");
    raw.set_read_timeout(Some(BOUND)).expect("timeout");
    let mut bytes = u32::MAX.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[7u8; 1000]);
    raw.write_all(&bytes).expect("write");
    assert_failure(&read_response(&mut raw), E_CHANNEL_FRAME);

    assert_ok(&h.ask(cluster("alpha")));
    h.stop();
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let h = Harness::start("pipeline", &[Script::Slow(Duration::from_millis(20))]);
    let mut raw = UnixStream::connect(&h.socket).expect("connect");
    raw.set_read_timeout(Some(BOUND)).expect("timeout");
    let requests = [
        cluster("alpha"),
        RequestType::ListClusters(proto::ListClusters::default()),
        cluster("alpha"),
        frontend("alpha", ADDR, "x.example.com"),
    ];
    let mut bytes = Vec::new();
    for kind in &requests {
        let request = proto::Request {
            request_type: Some(kind.clone()),
        };
        bytes.extend(encode_frame(&request, DEFAULT_MAX_FRAME_LEN).expect("encode"));
    }
    raw.write_all(&bytes).expect("write");
    let mut decoder = FrameDecoder::new();
    let mut answers = Vec::new();
    let mut buf = [0u8; 4096];
    while answers.len() < requests.len() {
        match decoder.next_frame::<proto::Response>().expect("frame") {
            Some(response) => answers.push(response),
            None => {
                let n = raw.read(&mut buf).expect("read");
                assert!(n > 0, "closed early");
                decoder.push(&buf[..n]);
            }
        }
    }
    assert_ok(&answers[0]);
    assert!(answers[0].message.contains("applied"), "{:?}", answers[0]);
    let ContentType::Clusters(list) = content(answers[1].clone()) else {
        panic!("not clusters");
    };
    assert_eq!(list.clusters.len(), 1, "listed after the add");
    assert!(answers[2].message.contains("unchanged"));
    assert_failure(&answers[3], "E106");
    h.stop();
}

#[test]
fn state_changes_of_several_clients_are_serialized() {
    let h = Harness::start(
        "serial",
        &[Script::Done, Script::Slow(Duration::from_millis(150))],
    );
    let socket = h.socket.clone();
    let others: Vec<JoinHandle<proto::Response>> = ["a", "b", "c"]
        .into_iter()
        .map(|id| {
            let socket = socket.clone();
            thread::spawn(move || {
                let mut client = BlockingChannel::connect(&socket, BOUND).expect("connect");
                ask(&mut client, cluster(id))
            })
        })
        .collect();
    for thread in others {
        assert_ok(&thread.join().expect("client"));
    }
    let fast = h.fakes[0].log.lock().expect("log").clone();
    let slow = h.fakes[1].log.lock().expect("log").clone();
    assert_eq!(fast.len(), 3);
    // Worker 0 got each change only after worker 1 answered the previous.
    for i in 1..3 {
        let answered = slow[i - 1].answered.expect("answered");
        assert!(fast[i].received >= answered, "change {i} sent too early");
    }
    assert_eq!(cluster_ids(&h), vec!["a", "b", "c"]);
    h.stop();
}

#[test]
fn the_socket_is_private_and_not_taken_twice() {
    let h = Harness::start("socket", &[Script::Done]);
    let mode = std::fs::metadata(&h.socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let (_tx, rx) = mpsc::channel();
    let again = ServerSettings {
        socket_path: h.socket.clone(),
        ..settings(h.dir.path())
    };
    let err = CommandServer::bind(again, ConfigState::default(), rx).expect_err("in use");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(
        h.socket.exists(),
        "the running server's socket is left alone"
    );
    h.stop();
}

#[test]
fn a_stale_socket_file_is_replaced() {
    let dir = temp_dir("stale");
    let path = dir.path().join("cmd.sock");
    // A process that died: its listener is shut down, which refuses a
    // connect even while a child another test starts holds a copy of it.
    let stale = std::os::unix::net::UnixListener::bind(&path).expect("stale");
    socket2::SockRef::from(&stale)
        .shutdown(std::net::Shutdown::Both)
        .expect("shutdown");
    drop(stale);
    assert!(path.exists());
    let settings = settings(dir.path());
    let h = Harness::start_with(dir, settings, ConfigState::default(), &[]);
    assert_ok(&h.ask(cluster("alpha")));
    h.stop();
}

#[test]
fn soft_stop_answers_ok_stops_the_workers_and_returns() {
    let h = Harness::start("stop", &[Script::Done, Script::Done]);
    let response = h.ask(RequestType::SoftStop(proto::SoftStop {}));
    assert_ok(&response);
    let (kind, _) = h.done.recv_timeout(BOUND).expect("returned").expect("ran");
    assert_eq!(kind, StopKind::Soft);
    for worker in 0..2 {
        let log = h.wait_orders(worker, 1);
        assert!(
            matches!(log.last(), Some(Order::SoftStop { grace_ms: 200 })),
            "{log:?}"
        );
    }
    assert!(!h.socket.exists());
}

#[test]
fn boot_replays_the_state_and_a_refusal_fails_it() {
    let dir = temp_dir("boot");
    let state = state_of(&setup());
    let (mut server, fakes) = server_with(
        settings(dir.path()),
        state.clone(),
        &[Script::Done, Script::Done],
    );
    assert_eq!(server.boot().expect("boot"), setup().len());
    let wanted: Vec<RequestType> = state
        .generate_requests()
        .into_iter()
        .filter_map(|r| r.request_type)
        .collect();
    for fake in &fakes {
        let log: Vec<Order> = fake
            .log
            .lock()
            .expect("log")
            .iter()
            .map(|s| s.order.clone())
            .collect();
        assert_eq!(applies(&log), wanted);
        assert_eq!(generations(&log), 1, "the boot is one generation");
    }
    assert!(server.stop_workers(StopKind::Hard));
    drop(server);

    let (mut server, _fakes) = server_with(
        settings(dir.path()),
        state,
        &[Script::Done, Script::RefuseListener(ADDR.to_owned())],
    );
    let error = server.boot().expect_err("refused");
    assert_eq!(error.worker, 1);
    assert_eq!(error.code, FAKE_BIND);
    assert!(server.stop_workers(StopKind::Hard));
    drop(server);
}

#[test]
fn another_user_is_refused() {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: switching to another user needs root");
        return;
    }
    let h = Harness::start("peer", &[Script::Done]);
    // Open the file mode so that only the peer check stands in the way.
    std::fs::set_permissions(&h.socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_preread"))
        .args(["status", "--timeout", "5000", "--socket"])
        .arg(&h.socket)
        .env_remove("PREREAD_CONFIG")
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run preread as nobody");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("E_PERMISSION"), "{stderr}");
    // Root still commands it.
    assert_ok(&h.ask(RequestType::Status(proto::Status {})));
    h.stop();
}

// ---- bounds on command clients ----

fn with_client_timeout(name: &str, timeout: Duration, scripts: &[Script]) -> Harness {
    let dir = temp_dir(name);
    let settings = ServerSettings {
        client_timeout: timeout,
        ..settings(dir.path())
    };
    Harness::start_with(dir, settings, ConfigState::default(), scripts)
}

fn status_frame() -> Vec<u8> {
    let request = proto::Request {
        request_type: Some(RequestType::Status(proto::Status {})),
    };
    encode_frame(&request, DEFAULT_MAX_FRAME_LEN).expect("encode")
}

/// Every answer until the server closes (within [`BOUND`]). A close with
/// requests left unread is a reset, which may drop answers in flight.
fn answers_to_close(stream: &mut UnixStream) -> Vec<proto::Response> {
    stream.set_nonblocking(false).expect("blocking");
    stream.set_read_timeout(Some(BOUND)).expect("timeout");
    let mut decoder = FrameDecoder::new();
    let mut answers = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        while let Some(response) = decoder.next_frame::<proto::Response>().expect("frame") {
            answers.push(response);
        }
        match stream.read(&mut buf) {
            Ok(0) => return answers,
            Ok(n) => decoder.push(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return answers,
            Err(e) => panic!("no close within {BOUND:?}: {e}"),
        }
    }
}

/// Writes `frames` copies of `frame` without blocking until the socket
/// takes nothing for 200 ms; returns how many whole frames went out.
fn flood(stream: &mut UnixStream, frame: &[u8], frames: usize) -> usize {
    stream.set_nonblocking(true).expect("non-blocking");
    let batch = frame.repeat(4096);
    let total = frame.len() * frames;
    let (mut written, mut progress) = (0usize, Instant::now());
    let started = Instant::now();
    while written < total && progress.elapsed() < Duration::from_millis(200) {
        assert!(started.elapsed() < BOUND, "the flood never stalled");
        let offset = written % batch.len();
        let end = batch.len().min(offset + total - written);
        match stream.write(&batch[offset..end]) {
            Ok(n) => {
                written += n;
                progress = Instant::now();
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    written / frame.len()
}

#[test]
fn a_client_that_does_not_read_is_no_longer_read_then_closed() {
    use preread_control::server::MAX_QUEUED_ANSWER_BYTES;
    let timeout = Duration::from_millis(800);
    let h = with_client_timeout("noread", timeout, &[Script::Done]);
    let mut flooder = UnixStream::connect(&h.socket).expect("connect");
    let sent = flood(&mut flooder, &status_frame(), 400_000);
    assert!(
        sent < 400_000,
        "every request went in: nothing held it back"
    );
    // The server takes some, answers them, and stops once its answers are
    // over the cap: the rest waits unread.
    let deadline = Instant::now() + BOUND;
    let mut taken = h.log(0).len();
    loop {
        thread::sleep(Duration::from_millis(300));
        let now = h.log(0).len();
        if now == taken {
            break;
        }
        assert!(Instant::now() < deadline, "requests still taken: {now}");
        taken = now;
    }
    assert!(taken > 0 && taken < sent, "taken {taken} of {sent}");
    // Others are served meanwhile.
    let other = h.ask(RequestType::Status(proto::Status {}));
    assert_ok(&other);
    // Past the client timeout it is closed: what it reads is what was in
    // flight, then the end.
    thread::sleep(timeout + Duration::from_millis(300));
    let answers = answers_to_close(&mut flooder);
    assert!(answers.len() <= taken, "{} answers", answers.len());
    assert!(
        answers
            .iter()
            .all(|a| a.status == proto::ResponseStatus::Ok as i32)
    );
    // What it was sent is bounded by the cap, plus the socket buffers.
    let size = encode_frame(&other, DEFAULT_MAX_FRAME_LEN)
        .expect("encode")
        .len();
    assert!(
        taken * size < MAX_QUEUED_ANSWER_BYTES + (1 << 20),
        "{taken} answers of {size} bytes"
    );
    h.stop();
}

#[test]
fn a_client_that_reads_is_served_past_the_cap() {
    let h = Harness::start("reads", &[Script::Done]);
    let mut writer = UnixStream::connect(&h.socket).expect("connect");
    let mut reader = writer.try_clone().expect("clone");
    let count = 20_000;
    let frames = status_frame().repeat(count);
    let writing = thread::spawn(move || writer.write_all(&frames).map(|()| writer));
    reader.set_read_timeout(Some(BOUND)).expect("timeout");
    let mut decoder = FrameDecoder::new();
    let (mut answered, mut buf) = (0, vec![0u8; 64 * 1024]);
    while answered < count {
        match decoder.next_frame::<proto::Response>().expect("frame") {
            Some(response) => {
                assert_ok(&response);
                answered += 1;
            }
            None => {
                let n = reader.read(&mut buf).expect("answers keep coming");
                assert!(n > 0, "closed after {answered} answers");
                decoder.push(&buf[..n]);
            }
        }
    }
    drop(writing.join().expect("writer").expect("all written"));
    h.stop();
}

#[test]
fn partial_and_missing_requests_are_closed_after_the_client_timeout_busy_clients_are_not() {
    let timeout = Duration::from_millis(300);
    let slow = Duration::from_millis(900);
    let h = with_client_timeout("idle", timeout, &[Script::Slow(slow)]);
    let started = Instant::now();
    let frame = status_frame();
    let mut clients: Vec<UnixStream> = [&frame[..frame.len() - 1], &frame[..2], &[]]
        .iter()
        .map(|part| {
            let mut stream = UnixStream::connect(&h.socket).expect("connect");
            stream.write_all(part).expect("write");
            stream
        })
        .collect();
    let socket = h.socket.clone();
    let busy = thread::spawn(move || {
        let mut channel = BlockingChannel::connect(&socket, BOUND).expect("connect");
        ask(&mut channel, cluster("alpha"))
    });
    for client in &mut clients {
        let answers = answers_to_close(client);
        let elapsed = started.elapsed();
        assert!(elapsed >= timeout, "closed early: {elapsed:?}");
        assert!(elapsed < timeout + slow, "closed late: {elapsed:?}");
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_failure(&answers[0], command::channel::E_CHANNEL_IO);
    }
    // Waiting on a worker longer than the client timeout is not idleness.
    assert_ok(&busy.join().expect("busy client"));
    assert!(started.elapsed() >= slow);
    h.stop();
}

#[test]
fn clients_over_the_cap_are_refused_with_e_busy() {
    use preread_control::server::MAX_COMMAND_CLIENTS;
    let h = Harness::start("cap", &[Script::Done]);
    let mut held: Vec<UnixStream> = (0..MAX_COMMAND_CLIENTS)
        .map(|_| UnixStream::connect(&h.socket).expect("connect"))
        .collect();
    // Accepted in order: the last one served means every one is in.
    let last = held.last_mut().expect("clients");
    last.set_read_timeout(Some(BOUND)).expect("timeout");
    last.write_all(&status_frame()).expect("write");
    assert_ok(&read_response(last));

    let mut over = UnixStream::connect(&h.socket).expect("connect");
    assert_eq!(answers_to_close(&mut over).len(), 1);
    let mut over = UnixStream::connect(&h.socket).expect("connect");
    let answers = answers_to_close(&mut over);
    assert_failure(&answers[0], AnswerCode::Busy.as_str());
    assert!(answers[0].message.contains("256 clients"), "{answers:?}");

    // Once one leaves, a new client is served.
    drop(held.pop());
    let deadline = Instant::now() + BOUND;
    loop {
        let response = h.ask(RequestType::Status(proto::Status {}));
        if response.status == proto::ResponseStatus::Ok as i32 {
            break;
        }
        assert_failure(&response, AnswerCode::Busy.as_str());
        assert!(Instant::now() < deadline, "never served again");
        thread::sleep(Duration::from_millis(10));
    }
    drop(held);
    h.stop();
}

// ---- route sources ----

/// The frontends' SNI names of the running state.
fn snis(h: &Harness) -> Result<Vec<String>, String> {
    match content(h.ask(RequestType::ListFrontends(proto::ListFrontends::default()))) {
        ContentType::Frontends(list) => {
            Ok(list.frontends.into_iter().filter_map(|f| f.sni).collect())
        }
        other => Err(format!("not frontends: {other:?}")),
    }
}

/// The directory source's entry of `list_sources`.
fn directory_source(h: &Harness) -> Result<proto::SourceEntry, String> {
    match content(h.ask(RequestType::ListSources(proto::ListSources {}))) {
        ContentType::Sources(list) => list
            .sources
            .into_iter()
            .find(|s| s.kind == "directory")
            .ok_or_else(|| "no directory source".to_owned()),
        other => Err(format!("not sources: {other:?}")),
    }
}

/// Polls `probe` until it holds, within [`BOUND`].
fn within_bound(mut probe: impl FnMut() -> Result<bool, String>) -> Result<(), String> {
    let deadline = Instant::now() + BOUND;
    while !probe()? {
        if Instant::now() >= deadline {
            return Err(format!("not within {BOUND:?}"));
        }
        thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

#[test]
fn a_directory_source_merges_with_the_file_and_survives_a_reload() -> Result<(), String> {
    let dir = temp_dir("sources");
    let watched = dir.path().join("conf.d");
    std::fs::create_dir(&watched).map_err(|e| format!("conf.d: {e}"))?;
    let mut file = ConfigState::default();
    for kind in [
        cluster("file"),
        listener(ADDR),
        frontend("file", ADDR, "file.example.com"),
    ] {
        file.dispatch(&proto::Request {
            request_type: Some(kind),
        })
        .map(drop)
        .map_err(|e| e.to_string())?;
    }
    let (mut server, fakes) = server_with(
        settings(dir.path()),
        file.clone(),
        &[Script::Done, Script::Done],
    );
    let sources = command::config::SourceSettings {
        docker: None,
        directory: Some(watched.clone()),
        etcd: None,
    };
    server
        .start_sources(1, Some(file), &sources)
        .map_err(|e| format!("sources: {e}"))?;
    let h = Harness::serve(dir, server, fakes);
    let write = |name: &str, sni: &str| {
        let cluster = name.trim_end_matches(".toml");
        let text = format!(
            "[clusters.{cluster}]\nfrontends = [{{ address = \"*:8443\", sni = \"{sni}\" }}]\n"
        );
        std::fs::write(watched.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    write("a.toml", "a.example.com")?;
    within_bound(|| Ok(snis(&h)? == ["a.example.com", "file.example.com"]))
        .map_err(|e| format!("a.toml never applied: {e}"))?;

    // A reload of a file that now declares another route: the fragment stays.
    let declarations = [
        cluster("file"),
        listener(ADDR),
        frontend("file", ADDR, "new.example.com"),
    ]
    .into_iter()
    .map(|kind| proto::Request {
        request_type: Some(kind),
    })
    .collect();
    let response = h.ask(RequestType::ApplyChanges(proto::ChangeBatch {
        requests: declarations,
        declarations: true,
        more: false,
    }));
    assert_ok(&response);
    assert_eq!(snis(&h)?, ["a.example.com", "new.example.com"]);

    // A fragment that clashes with the reloaded file is excluded whole.
    write("b.toml", "new.example.com")?;
    within_bound(|| Ok(!directory_source(&h)?.excluded.is_empty()))
        .map_err(|e| format!("b.toml never excluded: {e}"))?;
    let directory = directory_source(&h)?;
    assert_eq!(directory.excluded[0].name, "b.toml");
    assert_eq!(directory.excluded[0].error_code, "E204");
    assert_eq!((directory.routes, directory.fragments), (1, 1));
    assert_eq!(snis(&h)?, ["a.example.com", "new.example.com"]);
    let state = h.stop();
    assert!(
        state.clusters().all(|c| c.cluster_id != "b"),
        "nothing of b is recorded"
    );
    Ok(())
}

// ---- reloads that read only the changed tables ----

/// A config of one listener and a cluster per `(id, sni)`.
fn config_text(tables: &[(&str, &str)]) -> String {
    let mut text = format!("[[listeners]]\naddress = \"{ADDR}\"\n\n");
    for (id, sni) in tables {
        text.push_str(&format!(
            "[clusters.{id}]\nfrontends = [{{ address = \"{ADDR}\", sni = \"{sni}\" }}]\n\n"
        ));
    }
    text
}

/// Writes `text` to `path` and asks the server to reload it.
fn reload_text(h: &Harness, path: &Path, text: &str) -> Result<proto::Response, String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(h.ask(RequestType::ReloadFile(proto::ReloadFile {
        path: path.display().to_string(),
        size: text.len() as u64,
        crc32: crc32fast::hash(text.as_bytes()),
    })))
}

/// A server booted from the config at `dir/preread.toml`, which holds
/// `text`, with that text's outline.
fn booted_from(
    dir: TempDir,
    text: &str,
    running_is_file: bool,
) -> Result<(CommandServer, Vec<Fake>, TempDir, PathBuf), String> {
    let path = dir.path().join("preread.toml");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    let (loaded, outline) = command::config::load_config_file_outlined(&path)
        .map_err(|problems| format!("{problems:?}"))?;
    if outline.is_none() {
        return Err(format!("no outline of {text}"));
    }
    let (mut server, fakes) = server_with(
        settings(dir.path()),
        loaded.state,
        &[Script::Done, Script::Done],
    );
    server.know_config_text(outline, running_is_file);
    Ok((server, fakes, dir, path))
}

#[test]
fn reloads_from_the_last_outline_follow_the_running_state() -> Result<(), String> {
    let text = config_text(&[("a", "a.example.com"), ("b", "b.example.com")]);
    let (server, fakes, dir, path) = booted_from(temp_dir("reread"), &text, true)?;
    let h = Harness::serve(dir, server, fakes);

    let renamed = config_text(&[("a", "a.example.com"), ("b", "b2.example.com")]);
    let response = reload_text(&h, &path, &renamed)?;
    assert_ok(&response);
    assert_eq!(response.message, "2 applied, 0 unchanged, 0 skipped");
    assert_eq!(snis(&h)?, ["a.example.com", "b2.example.com"]);

    // A runtime add: the running state is no longer the file's, so the next
    // reload, whose table `a` did not change, still takes the add out.
    assert_ok(&h.ask(frontend("a", ADDR, "added.example.com")));
    let again = config_text(&[("a", "a.example.com"), ("b", "b3.example.com")]);
    assert_ok(&reload_text(&h, &path, &again)?);
    assert_eq!(snis(&h)?, ["a.example.com", "b3.example.com"]);

    // A refused file changes nothing and leaves the outline of the last one.
    let clash = config_text(&[("a", "a.example.com"), ("b", "a.example.com")]);
    let refused = reload_text(&h, &path, &clash)?;
    assert_failure(&refused, AnswerCode::ConfigRefused.as_str());
    assert!(refused.message.contains("E204"), "{}", refused.message);
    assert_eq!(snis(&h)?, ["a.example.com", "b3.example.com"]);
    let dropped = config_text(&[("b", "b3.example.com")]);
    let response = reload_text(&h, &path, &dropped)?;
    assert_ok(&response);
    assert_eq!(response.message, "2 applied, 0 unchanged, 0 skipped");
    assert_eq!(snis(&h)?, ["b3.example.com"]);
    let same = reload_text(&h, &path, &dropped)?;
    assert_eq!(same.message, "0 applied, 0 unchanged, 0 skipped");
    let state = h.stop();
    assert_eq!(state.clusters().len(), 1);
    Ok(())
}

#[test]
fn reloads_from_the_last_outline_merge_with_the_route_sources() -> Result<(), String> {
    let dir = temp_dir("reread-sources");
    let watched = dir.path().join("conf.d");
    std::fs::create_dir(&watched).map_err(|e| format!("conf.d: {e}"))?;
    std::fs::write(
        watched.join("frag.toml"),
        "[clusters.frag]\nfrontends = [{ address = \"*:8443\", sni = \"f.example.com\" }]\n",
    )
    .map_err(|e| format!("frag.toml: {e}"))?;
    let text = config_text(&[("a", "a.example.com")]);
    // The sources merge with the file: the running state is not the file's.
    let (mut server, fakes, dir, path) = booted_from(dir, &text, false)?;
    let file = command::config::load_config(&text).map_err(|p| format!("{p:?}"))?;
    let sources = command::config::SourceSettings {
        docker: None,
        directory: Some(watched),
        etcd: None,
    };
    server
        .start_sources(1, Some(file.state), &sources)
        .map_err(|e| format!("sources: {e}"))?;
    let h = Harness::serve(dir, server, fakes);
    within_bound(|| Ok(snis(&h)? == ["a.example.com", "f.example.com"]))
        .map_err(|e| format!("frag.toml never applied: {e}"))?;

    let renamed = config_text(&[("a", "a2.example.com"), ("b", "b.example.com")]);
    assert_ok(&reload_text(&h, &path, &renamed)?);
    assert_eq!(
        snis(&h)?,
        ["a2.example.com", "b.example.com", "f.example.com"]
    );
    let directory = directory_source(&h)?;
    assert_eq!((directory.routes, directory.excluded_total), (1, 0));
    let ContentType::Sources(list) =
        content(h.ask(RequestType::ListSources(proto::ListSources {})))
    else {
        return Err("not sources".to_owned());
    };
    let file_routes = list
        .sources
        .iter()
        .find(|s| s.kind == "file")
        .map(|s| s.routes);
    assert_eq!(
        file_routes,
        Some(2),
        "the file's own routes, not the fragment's"
    );
    // A table that takes the fragment's name: the fragment is excluded.
    let taken = config_text(&[("a", "a2.example.com"), ("b", "f.example.com")]);
    assert_ok(&reload_text(&h, &path, &taken)?);
    assert_eq!(snis(&h)?, ["a2.example.com", "f.example.com"]);
    assert_eq!(directory_source(&h)?.excluded_total, 1);
    // Declarations sent over the socket replace the file's: the same file
    // reloaded next is read against them, not against its last outline.
    let declarations = [
        cluster("d"),
        listener(ADDR),
        frontend("d", ADDR, "d.example.com"),
    ]
    .into_iter()
    .map(|kind| proto::Request {
        request_type: Some(kind),
    })
    .collect();
    assert_ok(&h.ask(RequestType::ApplyChanges(proto::ChangeBatch {
        requests: declarations,
        declarations: true,
        more: false,
    })));
    assert_eq!(snis(&h)?, ["d.example.com", "f.example.com"]);
    assert_ok(&reload_text(&h, &path, &taken)?);
    assert_eq!(snis(&h)?, ["a2.example.com", "f.example.com"]);
    let state = h.stop();
    assert!(
        state
            .clusters()
            .all(|c| c.cluster_id != "frag" && c.cluster_id != "d")
    );
    Ok(())
}
