//! The coordinator driven directly: fake time, fake workers' answers,
//! fake clients. Each test checks one rule of the crate's contract.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use command::answer_code::AnswerCode;
use command::proto::{self, request::RequestType};
use command::state::ConfigState;
use coordinator::{
    AddressCheck, Answer, ClientId, Coordinator, Effect, Input, JobId, Order, OrderId, Query,
    Request, Settings, StopKind, UpgradeRequest, WorkerId,
};

const TIMEOUT: Duration = Duration::from_secs(10);

struct Free;

impl AddressCheck for Free {
    fn ensure_unbound(&mut self, _: core::net::SocketAddr) -> io::Result<()> {
        Ok(())
    }
}

/// A coordinator with `workers` workers, and its fake clock.
struct Rig {
    coordinator: Coordinator,
    now: Instant,
}

impl Rig {
    fn new(workers: WorkerId) -> Self {
        let now = Instant::now();
        let settings = Settings {
            order_timeout: TIMEOUT,
            soft_stop_grace: Duration::from_secs(5),
            config_path: None,
            pid: 4242,
        };
        let mut coordinator =
            Coordinator::new(settings, ConfigState::default(), Box::new(Free), now);
        for worker in 0..workers {
            coordinator.add_worker(worker);
        }
        Self { coordinator, now }
    }

    fn feed(&mut self, input: Input) -> Vec<Effect> {
        self.coordinator.handle(input, self.now)
    }

    fn ask(&mut self, client: u64, request: Request) -> Vec<Effect> {
        self.feed(Input::Request {
            client: ClientId(client),
            request,
        })
    }

    fn answer(&mut self, worker: WorkerId, order: OrderId, answer: Answer) -> Vec<Effect> {
        self.feed(Input::WorkerAnswer {
            worker,
            order,
            answer,
        })
    }
}

fn add_cluster(id: &str) -> Request {
    Request::Change(proto::Request {
        request_type: Some(RequestType::AddCluster(proto::Cluster {
            cluster_id: id.into(),
            ..Default::default()
        })),
    })
}

fn refused(message: &str) -> Answer {
    Answer::Refused {
        code: AnswerCode::WorkerRefused,
        message: message.into(),
    }
}

/// The generations sent, as (worker, order, how many changes).
fn applies(effects: &[Effect]) -> Vec<(WorkerId, OrderId, usize)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Send {
                worker,
                order,
                what: Order::Apply(generation),
            } => Some((*worker, *order, generation.len())),
            _ => None,
        })
        .collect()
}

/// The one order the effects send (to any number of workers).
fn order_of(effects: &[Effect]) -> OrderId {
    let orders: Vec<OrderId> = effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Send { order, .. } => Some(*order),
            _ => None,
        })
        .collect();
    assert!(!orders.is_empty(), "no order sent: {effects:?}");
    assert!(orders.iter().all(|o| *o == orders[0]), "{orders:?}");
    orders[0]
}

/// The workers the effects send an order to.
fn sent_to(effects: &[Effect]) -> Vec<WorkerId> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Send { worker, .. } => Some(*worker),
            _ => None,
        })
        .collect()
}

fn journal_job(effects: &[Effect]) -> Option<JobId> {
    let jobs: Vec<JobId> = effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::AppendJournal { job, .. } => Some(*job),
            _ => None,
        })
        .collect();
    assert!(jobs.len() <= 1, "journaled twice: {effects:?}");
    jobs.first().copied()
}

/// The answers, as (client, status is OK, error code, message).
fn answers(effects: &[Effect]) -> Vec<(u64, bool, String, String)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Answer { client, response } => Some((
                client.0,
                response.status == proto::ResponseStatus::Ok as i32,
                response.error_code.clone(),
                response.message.clone(),
            )),
            Effect::Report { client, .. } => Some((client.0, true, String::new(), "report".into())),
            _ => None,
        })
        .collect()
}

/// Every worker in `workers` answers `order` with `Done`; the effects.
fn all_done(rig: &mut Rig, order: OrderId, workers: &[WorkerId]) -> Vec<Effect> {
    let mut effects = Vec::new();
    for worker in workers {
        effects.extend(rig.answer(*worker, order, Answer::Done));
    }
    effects
}

/// The change applied on every worker, journaled, answered.
fn commit(rig: &mut Rig, sent: &[Effect], workers: &[WorkerId]) -> Vec<Effect> {
    let done = all_done(rig, order_of(sent), workers);
    let job = journal_job(&done).expect("journaled");
    let mut effects = done;
    effects.extend(rig.feed(Input::Journaled { job, saved: Ok(()) }));
    effects
}

#[test]
fn a_change_is_committed_once_every_worker_applied_it_and_journaled_once() {
    let mut rig = Rig::new(2);
    let sent = rig.ask(1, add_cluster("a"));
    assert_eq!(applies(&sent).len(), 2);
    assert!(
        rig.coordinator.next_deadline().is_some(),
        "waits with a deadline"
    );
    let first = rig.answer(0, order_of(&sent), Answer::Done);
    assert!(
        journal_job(&first).is_none(),
        "committed before worker 1 answered"
    );
    assert!(rig.coordinator.state().cluster("a").is_none());
    let second = rig.answer(1, order_of(&sent), Answer::Done);
    let job = journal_job(&second).expect("journaled");
    assert!(
        answers(&second).is_empty(),
        "answered before the journal synced"
    );
    assert!(rig.coordinator.state().cluster("a").is_some());
    let answered = rig.feed(Input::Journaled { job, saved: Ok(()) });
    assert_eq!(
        answers(&answered),
        vec![(1, true, String::new(), "applied on 2 worker(s)".into())]
    );
    assert_eq!(rig.coordinator.generation(), 1);
    assert!(rig.coordinator.next_deadline().is_none());
    let again = rig.feed(Input::Journaled { job, saved: Ok(()) });
    assert!(answers(&again).is_empty(), "answered twice");
}

#[test]
fn a_refusal_rolls_back_on_the_workers_that_applied_only() {
    let mut rig = Rig::new(3);
    let sent = rig.ask(1, add_cluster("a"));
    let order = order_of(&sent);
    rig.answer(0, order, Answer::Done);
    rig.answer(1, order, refused("bind failed"));
    let end = rig.answer(2, order, Answer::Done);
    let rollback = applies(&end);
    assert_eq!(
        rollback.iter().map(|(w, _, _)| *w).collect::<Vec<_>>(),
        vec![0, 2],
        "the rollback goes to the workers that applied, not the one that refused"
    );
    assert!(rollback.iter().all(|(_, o, n)| *o != order && *n == 1));
    assert!(
        journal_job(&end).is_none(),
        "a refused change was journaled"
    );
    let said = answers(&end);
    assert_eq!(said.len(), 1);
    assert_eq!((said[0].1, said[0].2.as_str()), (false, "E_WORKER_REFUSED"));
    assert!(
        said[0].3.contains("undone on worker(s) [0, 2]"),
        "{}",
        said[0].3
    );
    assert!(rig.coordinator.state().cluster("a").is_none());
    assert_eq!(rig.coordinator.generation(), 0);
}

#[test]
fn a_timeout_rolls_back_on_every_worker_that_may_apply_it_late() {
    let mut rig = Rig::new(2);
    let sent = rig.ask(1, add_cluster("a"));
    let order = order_of(&sent);
    rig.answer(0, order, Answer::Done);
    let deadline = rig.coordinator.next_deadline().expect("a deadline");
    rig.now = deadline - Duration::from_millis(1);
    assert!(answers(&rig.feed(Input::Tick)).is_empty(), "expired early");
    rig.now = deadline;
    let end = rig.feed(Input::Tick);
    let mut undo_on: Vec<WorkerId> = applies(&end).iter().map(|(w, _, _)| *w).collect();
    undo_on.sort_unstable();
    assert_eq!(
        undo_on,
        vec![0, 1],
        "the silent worker may apply it late: it is undone there"
    );
    let said = answers(&end);
    assert_eq!(said[0].2, "E_WORKER_TIMEOUT");
    assert!(
        rig.coordinator.next_deadline().is_some(),
        "the rollback has a deadline too"
    );
    let late = rig.answer(1, order, Answer::Done);
    assert!(journal_job(&late).is_none() && answers(&late).is_empty());
}

#[test]
fn a_worker_gone_mid_generation_counts_as_refused_and_gets_nothing_more() {
    let mut rig = Rig::new(2);
    let sent = rig.ask(1, add_cluster("a"));
    let order = order_of(&sent);
    rig.answer(0, order, Answer::Done);
    let end = rig.feed(Input::WorkerGone { worker: 1 });
    assert_eq!(
        sent_to(&end),
        vec![0],
        "the rollback goes to the live worker that applied"
    );
    assert_eq!(answers(&end)[0].2, "E_WORKER_REFUSED");
    assert!(answers(&end)[0].3.contains("worker 1 is gone"));
    let rollback = order_of(&end);
    rig.answer(0, rollback, Answer::Done);
    let next = rig.ask(1, add_cluster("b"));
    assert_eq!(sent_to(&next), vec![0], "a gone worker is sent nothing");
    let done = commit(&mut rig, &next, &[0]);
    assert_eq!(answers(&done)[0].3, "applied on 1 worker(s)");
}

#[test]
fn answers_come_in_each_clients_order_whatever_order_the_work_ends_in() {
    let mut rig = Rig::new(2);
    let status = rig.ask(1, Request::Query(Query::Status));
    let query = order_of(&status);
    let change = rig.ask(1, add_cluster("a"));
    // The workers answer out of order: the change first, worker 1 first.
    let change_order = applies(&change)[0].1;
    let mut effects = rig.answer(1, change_order, Answer::Done);
    effects.extend(rig.answer(0, change_order, Answer::Done));
    let job = journal_job(&effects).expect("journaled");
    let held = rig.feed(Input::Journaled { job, saved: Ok(()) });
    assert!(
        answers(&held).is_empty(),
        "the change was answered before the status"
    );
    let status_answer = Answer::Status {
        sessions: 0,
        listeners: 0,
    };
    rig.answer(1, query, status_answer.clone());
    let both = rig.answer(0, query, status_answer);
    let said: Vec<String> = answers(&both).into_iter().map(|a| a.3).collect();
    assert_eq!(
        said,
        vec!["report".to_owned(), "applied on 2 worker(s)".to_owned()]
    );
}

#[test]
fn two_clients_interleave_and_each_hears_its_answers_in_order() {
    let mut rig = Rig::new(1);
    let first = rig.ask(1, add_cluster("a"));
    let queued_b = rig.ask(2, add_cluster("b"));
    let queued_a = rig.ask(1, add_cluster("a"));
    assert!(
        applies(&queued_b).is_empty() && applies(&queued_a).is_empty(),
        "two jobs at once"
    );
    let mut heard = commit(&mut rig, &first, &[0]);
    let second = commit(&mut rig, &heard, &[0]);
    heard.extend(second);
    // Client 1's second request is unchanged: answered without a worker.
    let said = answers(&heard);
    assert_eq!(
        said.iter().map(|a| (a.0, a.1)).collect::<Vec<_>>(),
        vec![(1, true), (2, true), (1, true)]
    );
    assert!(said[2].3.starts_with("unchanged"), "{}", said[2].3);
    assert_eq!(rig.coordinator.generation(), 2);
}

#[test]
fn a_change_waits_behind_an_upgrade_and_runs_if_it_fails() {
    let mut rig = Rig::new(2);
    let export = rig.ask(1, Request::Upgrade(UpgradeRequest::default()));
    let export_order = order_of(&export);
    let change = rig.ask(2, add_cluster("a"));
    assert!(
        applies(&change).is_empty(),
        "a change ran during the upgrade"
    );
    let listeners = || Answer::Listeners(Arc::default());
    rig.answer(0, export_order, listeners());
    let handover = rig.answer(1, export_order, listeners());
    let job = handover
        .iter()
        .find_map(|effect| match effect {
            Effect::StartUpgrade { job, exported, .. } => {
                assert_eq!(exported.len(), 2);
                Some(*job)
            }
            _ => None,
        })
        .expect("the handover starts once every worker exported");
    assert!(
        applies(&handover).is_empty(),
        "a change ran during the handover"
    );
    let failed = rig.feed(Input::UpgradeFinished {
        job,
        outcome: Err("the successor exited".into()),
    });
    let said = answers(&failed);
    assert_eq!((said[0].0, said[0].2.as_str()), (1, "E_UPGRADE_FAILED"));
    assert!(
        said[0].3.contains("pid 4242 keeps serving"),
        "{}",
        said[0].3
    );
    assert_eq!(
        applies(&failed).len(),
        2,
        "the change runs once the upgrade is over"
    );
    assert_eq!(
        resumed(&failed),
        [0, 1],
        "every worker reads its QUIC sockets again"
    );
}

/// The workers sent `Order::Resume`.
fn resumed(effects: &[Effect]) -> Vec<u32> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Send {
                worker,
                what: Order::Resume,
                ..
            } => Some(*worker),
            _ => None,
        })
        .collect()
}

#[test]
fn after_an_upgrade_the_queued_change_is_refused_and_the_proxy_stops_softly() {
    let mut rig = Rig::new(1);
    let export = rig.ask(1, Request::Upgrade(UpgradeRequest::default()));
    rig.ask(2, add_cluster("a"));
    let handover = rig.answer(0, order_of(&export), Answer::Listeners(Arc::default()));
    let Some(job) = handover.iter().find_map(|effect| match effect {
        Effect::StartUpgrade { job, .. } => Some(*job),
        _ => None,
    }) else {
        panic!("no handover: {handover:?}");
    };
    let done = rig.feed(Input::UpgradeFinished {
        job,
        outcome: Ok(77),
    });
    let said = answers(&done);
    assert_eq!(
        said.iter().map(|a| (a.0, a.1)).collect::<Vec<_>>(),
        vec![(1, true), (2, false)]
    );
    assert_eq!(said[1].2, "E_STOPPING");
    assert!(applies(&done).is_empty());
    assert!(resumed(&done).is_empty(), "the successor reads the flows");
    assert_eq!(rig.coordinator.stopping(), Some(StopKind::Soft));
    assert!(
        !rig.coordinator.is_stopped(),
        "the soft stop's answers are awaited"
    );
    let stop = order_of(&done);
    rig.answer(0, stop, Answer::Done);
    assert!(rig.coordinator.is_stopped());
}

#[test]
fn a_failed_export_fails_the_upgrade_and_hands_nothing_over() {
    let mut rig = Rig::new(2);
    let export = rig.ask(1, Request::Upgrade(UpgradeRequest::default()));
    let order = order_of(&export);
    rig.answer(0, order, Answer::Listeners(Arc::default()));
    let end = rig.answer(1, order, Answer::Done);
    assert!(!end.iter().any(|e| matches!(e, Effect::StartUpgrade { .. })));
    assert_eq!(
        resumed(&end),
        [0, 1],
        "the worker that exported reads again"
    );
    assert!(
        answers(&end)[0]
            .3
            .contains("worker 1 answered something else")
    );
}

#[test]
fn a_journal_that_fails_is_said_in_the_answer_and_the_change_stays_committed() {
    let mut rig = Rig::new(1);
    let sent = rig.ask(1, add_cluster("a"));
    let done = all_done(&mut rig, order_of(&sent), &[0]);
    let job = journal_job(&done).expect("journaled");
    let error = command::state_file::StateFileError::NotFound {
        path: "/nowhere/state".into(),
    };
    let said = answers(&rig.feed(Input::Journaled {
        job,
        saved: Err(error),
    }));
    assert!(
        said[0].1 && said[0].3.contains("but the state file was not saved"),
        "{said:?}"
    );
    assert!(rig.coordinator.state().cluster("a").is_some());
}

#[test]
fn a_stop_refuses_the_queued_changes_and_waits_on_the_workers_with_a_deadline() {
    let mut rig = Rig::new(2);
    let running = rig.ask(1, add_cluster("a"));
    rig.ask(2, add_cluster("b"));
    let stop = rig.ask(3, Request::Stop(StopKind::Hard));
    let said = answers(&stop);
    assert_eq!(said.iter().map(|a| a.0).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(said[0].2, "E_STOPPING");
    assert!(matches!(
        stop.iter().find(|e| matches!(e, Effect::Send { .. })),
        Some(Effect::Send {
            what: Order::HardStop,
            ..
        })
    ));
    let later = rig.ask(4, add_cluster("c"));
    assert_eq!(answers(&later)[0].2, "E_STOPPING");
    let hard_stop = order_of(&stop);
    rig.answer(0, hard_stop, Answer::Done);
    assert!(!rig.coordinator.is_stopped());
    let deadline = rig.coordinator.next_deadline().expect("a deadline");
    assert!(deadline <= rig.now + TIMEOUT);
    // Worker 1 never answers the stop, nor the change: the stop ends at
    // its deadline, and the change that still runs is answered at the end.
    rig.answer(0, order_of(&running), Answer::Done);
    rig.now = deadline - Duration::from_millis(1);
    rig.feed(Input::Tick);
    assert!(!rig.coordinator.is_stopped());
    let closed = rig.coordinator.close();
    assert_eq!(
        answers(&closed)[0].0,
        1,
        "the running change is answered at the end"
    );
    assert_eq!(answers(&closed)[0].2, "E_STOPPING");
    rig.now = deadline;
    rig.feed(Input::Tick);
    assert!(
        rig.coordinator.is_stopped(),
        "a stop waits no longer than its deadline"
    );
}

#[test]
fn local_requests_are_served_at_their_clients_turn() {
    let mut rig = Rig::new(1);
    let sent = rig.ask(1, add_cluster("a"));
    let list = proto::Request {
        request_type: Some(RequestType::ListListeners(proto::ListListeners {})),
    };
    let held = rig.ask(1, Request::Local(list));
    assert!(
        !held.iter().any(|e| matches!(e, Effect::Serve { .. })),
        "served before the change"
    );
    let done = commit(&mut rig, &sent, &[0]);
    let kinds: Vec<&str> = done
        .iter()
        .filter_map(|e| match e {
            Effect::Answer { .. } => Some("answer"),
            Effect::Serve { .. } => Some("serve"),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, vec!["answer", "serve"]);
}

#[test]
fn a_batch_is_queued_with_its_last_part() {
    let mut rig = Rig::new(1);
    let part = |id: &str, more| {
        Request::BatchPart(proto::ChangeBatch {
            requests: vec![proto::Request {
                request_type: Some(RequestType::AddCluster(proto::Cluster {
                    cluster_id: id.into(),
                    ..Default::default()
                })),
            }],
            declarations: false,
            more,
        })
    };
    let first = rig.ask(1, part("a", true));
    assert!(answers(&first)[0].3.starts_with("part received"));
    assert!(applies(&first).is_empty());
    let last = rig.ask(1, part("b", false));
    assert_eq!(applies(&last)[0].2, 2, "one generation of both parts");
    let done = commit(&mut rig, &last, &[0]);
    assert_eq!(answers(&done)[0].3, "2 applied, 0 unchanged, 0 skipped");
}

/// A rig whose proxy started from `path`.
fn with_config(workers: WorkerId, path: &str) -> Rig {
    let mut rig = Rig::new(workers);
    let settings = Settings {
        order_timeout: TIMEOUT,
        soft_stop_grace: Duration::from_secs(5),
        config_path: Some(path.into()),
        pid: 4242,
    };
    rig.coordinator = Coordinator::new(settings, ConfigState::default(), Box::new(Free), rig.now);
    for worker in 0..workers {
        rig.coordinator.add_worker(worker);
    }
    rig
}

fn read_job(effects: &[Effect]) -> Option<JobId> {
    effects.iter().find_map(|effect| match effect {
        Effect::ReadConfig {
            job, seen: None, ..
        } => Some(*job),
        _ => None,
    })
}

fn ready(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Notify(coordinator::Notice::Ready(summary)) => Some(summary.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_sighup_reload_reads_the_file_applies_its_diff_and_tells_systemd() {
    let mut rig = with_config(1, "/etc/preread/preread.toml");
    let asked = rig.feed(Input::Hangup);
    let reloading = |e: &Effect| matches!(e, Effect::Notify(coordinator::Notice::Reloading));
    assert!(asked.iter().any(reloading));
    let job = read_job(&asked).expect("the file is read by the shell");
    let text = "[[listeners]]\naddress = \"127.0.0.1:9443\"\n".to_owned();
    let sent = rig.feed(Input::ConfigRead {
        job,
        read: Ok(text),
    });
    assert!(sent.iter().any(|e| matches!(e, Effect::LogElapsed { .. })));
    assert_eq!(applies(&sent).len(), 1);
    let done = commit(&mut rig, &sent, &[0]);
    assert_eq!(
        ready(&done),
        vec!["reload of /etc/preread/preread.toml: 1 applied, 0 unchanged, 0 skipped".to_owned()]
    );
    assert!(answers(&done).is_empty(), "a signal has no client");
    assert_eq!(rig.coordinator.state().listeners().count(), 1);
}

#[test]
fn a_sighup_reload_that_reads_nothing_changes_nothing() {
    let mut rig = with_config(1, "/etc/preread/preread.toml");
    let job = read_job(&rig.feed(Input::Hangup)).expect("read");
    let unread = coordinator::Unread::Unseen("the proxy cannot read it".into());
    let end = rig.feed(Input::ConfigRead {
        job,
        read: Err(unread),
    });
    assert!(applies(&end).is_empty());
    assert_eq!(ready(&end), vec!["the proxy cannot read it".to_owned()]);
    let next = rig.ask(1, add_cluster("a"));
    assert_eq!(applies(&next).len(), 1, "the queue goes on");
}

#[test]
fn a_state_load_applies_the_diff_to_the_file_read() {
    let mut rig = Rig::new(1);
    let asked = rig.ask(
        1,
        Request::LoadState {
            path: "/var/lib/preread/state".into(),
        },
    );
    let job = asked
        .iter()
        .find_map(|effect| match effect {
            Effect::ReadStateFile { job, .. } => Some(*job),
            _ => None,
        })
        .expect("the state file is read by the shell");
    let mut loaded = ConfigState::default();
    let Request::Change(add) = add_cluster("a") else {
        panic!("a change");
    };
    assert!(loaded.dispatch(&add).is_ok());
    let sent = rig.feed(Input::StateFileRead {
        job,
        read: Ok(loaded),
    });
    let done = commit(&mut rig, &sent, &[0]);
    let said = answers(&done);
    assert!(
        said[0]
            .3
            .starts_with("state loaded from /var/lib/preread/state: 1 applied"),
        "{said:?}"
    );
}

fn notices(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Notify(coordinator::Notice::Stopping(why)) => Some(why.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_stronger_stop_replaces_a_weaker_one_and_a_same_one_changes_nothing() {
    let mut rig = Rig::new(1);
    let running = rig.ask(9, add_cluster("a"));
    let soft = rig.ask(1, Request::Stop(StopKind::Soft));
    let again = rig.ask(2, Request::Stop(StopKind::Soft));
    assert_eq!(answers(&again)[0].3, "already stopping");
    assert!(sent_to(&again).is_empty());
    let hard = rig.ask(3, Request::Stop(StopKind::Hard));
    let hard_again = rig.ask(4, Request::Stop(StopKind::Hard));
    assert_eq!(answers(&hard_again)[0].3, "already stopping");
    let told: Vec<String> = [&soft, &again, &hard, &hard_again]
        .iter()
        .flat_map(|effects| notices(effects))
        .collect();
    assert_eq!(told, ["Soft stop", "Hard stop", "Hard stop"]);
    // The soft stop is no longer awaited once the hard one is ordered; the
    // running change still is.
    rig.answer(0, order_of(&hard), Answer::Done);
    assert!(
        rig.coordinator.is_stopped(),
        "the soft stop's answer was still awaited"
    );
    let done = rig.answer(0, order_of(&running), Answer::Done);
    assert!(
        journal_job(&done).is_some(),
        "the hard stop cancelled the running change"
    );
    assert_ne!(order_of(&soft), order_of(&hard));
}

#[test]
fn an_upgrade_after_a_stop_or_queued_before_one_is_refused_as_an_upgrade() {
    let mut rig = Rig::new(1);
    let running = rig.ask(1, add_cluster("a"));
    rig.ask(2, Request::Upgrade(UpgradeRequest::default()));
    let stop = rig.ask(3, Request::Stop(StopKind::Soft));
    let queued = answers(&stop);
    assert_eq!((queued[0].0, queued[0].2.as_str()), (2, "E_UPGRADE_FAILED"));
    assert!(
        queued[0].3.starts_with("the proxy is stopping; pid 4242"),
        "{queued:?}"
    );
    let late = rig.ask(4, Request::Upgrade(UpgradeRequest::default()));
    assert_eq!(answers(&late)[0].2, "E_UPGRADE_FAILED");
    let closed = rig.coordinator.close();
    assert_eq!(
        answers(&closed)[0].3,
        "the proxy stopped before the workers applied this generation of 1 change(s)"
    );
    let _ = running;
}

#[test]
fn a_client_that_left_hears_nothing_and_its_parts_are_forgotten() {
    let mut rig = Rig::new(1);
    let sent = rig.ask(1, add_cluster("a"));
    assert_eq!(rig.coordinator.answers_owed(), 1);
    rig.feed(Input::ClientGone {
        client: ClientId(1),
    });
    assert_eq!(rig.coordinator.answers_owed(), 0);
    let done = commit(&mut rig, &sent, &[0]);
    assert!(answers(&done).is_empty(), "an answer to a client that left");
    assert!(
        rig.coordinator.state().cluster("a").is_some(),
        "its change still completes"
    );
    let part = |id: &str| {
        Request::BatchPart(proto::ChangeBatch {
            requests: vec![proto::Request {
                request_type: Some(RequestType::AddCluster(proto::Cluster {
                    cluster_id: id.into(),
                    ..Default::default()
                })),
            }],
            declarations: false,
            more: true,
        })
    };
    rig.ask(2, part("b"));
    rig.feed(Input::ClientGone {
        client: ClientId(2),
    });
    let fresh = rig.ask(2, part("c"));
    assert_eq!(answers(&fresh)[0].3, "part received: 1 request(s) so far");
}

#[test]
fn a_late_file_read_of_an_earlier_job_is_not_taken_for_the_running_one() {
    let mut rig = with_config(1, "/etc/preread/preread.toml");
    let first = read_job(&rig.feed(Input::Hangup)).expect("read");
    let unread = coordinator::Unread::Unseen("gone".into());
    rig.feed(Input::ConfigRead {
        job: first,
        read: Err(unread),
    });
    let second = read_job(&rig.feed(Input::Hangup)).expect("read");
    assert_ne!(first, second, "two jobs, one id");
    let text = "[[listeners]]\naddress = \"127.0.0.1:9443\"\n".to_owned();
    let stale = rig.feed(Input::ConfigRead {
        job: first,
        read: Ok(text.clone()),
    });
    assert!(
        applies(&stale).is_empty(),
        "an earlier job's read was applied"
    );
    let journaled = rig.feed(Input::Journaled {
        job: second,
        saved: Ok(()),
    });
    assert!(
        ready(&journaled).is_empty(),
        "a journal answer for a job reading its file"
    );
    let sent = rig.feed(Input::ConfigRead {
        job: second,
        read: Ok(text),
    });
    assert_eq!(applies(&sent).len(), 1);
}

fn declarations(requests: Vec<RequestType>) -> Request {
    Request::BatchPart(proto::ChangeBatch {
        requests: requests
            .into_iter()
            .map(|kind| proto::Request {
                request_type: Some(kind),
            })
            .collect(),
        declarations: true,
        more: false,
    })
}

fn cluster(id: &str) -> RequestType {
    RequestType::AddCluster(proto::Cluster {
        cluster_id: id.into(),
        ..Default::default()
    })
}

#[test]
fn declarations_apply_their_diff_or_are_refused_whole() {
    let mut rig = Rig::new(1);
    let sent = rig.ask(1, add_cluster("old"));
    commit(&mut rig, &sent, &[0]);
    let declared = rig.ask(1, declarations(vec![cluster("new")]));
    let done = commit(&mut rig, &declared, &[0]);
    assert_eq!(answers(&done)[0].3, "2 applied, 0 unchanged, 0 skipped");
    assert!(rig.coordinator.state().cluster("old").is_none());
    let stray = RequestType::AddTcpFrontend(proto::TcpFrontend {
        cluster_id: "nowhere".into(),
        address: "127.0.0.1:1".into(),
        sni: None,
        alpn: Vec::new(),
        tags: Default::default(),
        protocol: None,
    });
    let refused = rig.ask(1, declarations(vec![cluster("x"), stray]));
    assert!(applies(&refused).is_empty());
    let said = answers(&refused);
    assert!(
        !said[0].1 && said[0].3.starts_with("declaration 2 of 2 is refused"),
        "{said:?}"
    );
}

/// Addresses another socket holds.
struct Taken(Vec<core::net::SocketAddr>);

impl AddressCheck for Taken {
    fn ensure_unbound(&mut self, address: core::net::SocketAddr) -> io::Result<()> {
        if self.0.contains(&address) {
            return Err(io::Error::from(io::ErrorKind::AddrInUse));
        }
        Ok(())
    }
}

fn listener(
    address: &str,
    active: Option<bool>,
    max_bytes: Option<u32>,
) -> proto::TcpListenerConfig {
    proto::TcpListenerConfig {
        address: address.into(),
        active,
        sni_preread_max_bytes: max_bytes,
        ..Default::default()
    }
}

#[test]
fn only_an_address_a_change_starts_listening_on_is_checked_free() {
    let taken: core::net::SocketAddr = "127.0.0.1:9443".parse().expect("an address");
    let idle_at: core::net::SocketAddr = "127.0.0.1:9445".parse().expect("an address");
    let settings = Settings {
        order_timeout: TIMEOUT,
        soft_stop_grace: Duration::from_secs(5),
        config_path: None,
        pid: 4242,
    };
    let now = Instant::now();
    let mut state = ConfigState::default();
    let add = |l| proto::Request {
        request_type: Some(RequestType::AddTcpListener(l)),
    };
    assert!(
        state
            .dispatch(&add(listener("127.0.0.1:9443", None, None)))
            .is_ok()
    );
    let mut rig = Rig {
        coordinator: Coordinator::new(settings, state, Box::new(Taken(vec![taken, idle_at])), now),
        now,
    };
    rig.coordinator.add_worker(0);
    // It listens there already: an update keeps its socket.
    let update = Request::Change(proto::Request {
        request_type: Some(RequestType::UpdateTcpListener(listener(
            "127.0.0.1:9443",
            None,
            Some(4096),
        ))),
    });
    let sent = rig.ask(1, update);
    assert_eq!(
        applies(&sent).len(),
        1,
        "a listening address was checked again"
    );
    commit(&mut rig, &sent, &[0]);
    // An inactive listener binds nothing yet: its taken address is not
    // checked.
    let idle = Request::Change(add(listener("127.0.0.1:9445", Some(false), None)));
    let sent = rig.ask(1, idle);
    assert_eq!(applies(&sent).len(), 1);
    commit(&mut rig, &sent, &[0]);
    // Deactivated, then activated: it starts listening again, checked.
    let at = |address: &str| proto::ListenerAddress {
        address: address.into(),
        protocol: None,
    };
    let off = Request::Change(proto::Request {
        request_type: Some(RequestType::DeactivateListener(at("127.0.0.1:9443"))),
    });
    let sent = rig.ask(1, off);
    commit(&mut rig, &sent, &[0]);
    let on = Request::Change(proto::Request {
        request_type: Some(RequestType::ActivateListener(at("127.0.0.1:9443"))),
    });
    let refused = rig.ask(1, on);
    assert!(
        applies(&refused).is_empty(),
        "a taken address was not checked"
    );
    let said = answers(&refused);
    assert_eq!(said[0].2, "E_WORKER_REFUSED");
    assert!(
        said[0].3.starts_with("cannot listen on 127.0.0.1:9443"),
        "{said:?}"
    );
}

fn logged(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Log { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_source_report_is_merged_once_every_source_reported() {
    use command::sources::{Declared, Fragment, FragmentBody, FragmentId, SourceKind};
    let mut rig = Rig::new(1);
    let slots = vec![
        (SourceKind::Directory, "/etc/preread/conf.d".to_owned()),
        (SourceKind::Docker, "unix:///run/docker.sock".to_owned()),
    ];
    rig.coordinator
        .start_sources(0, Some(ConfigState::default()), slots, rig.now);
    let Request::Change(add) = add_cluster("web") else {
        panic!("a change");
    };
    let fragment = Fragment {
        id: FragmentId {
            kind: SourceKind::Directory,
            name: "web.toml".into(),
        },
        body: FragmentBody::Declared(
            vec![Declared {
                request: add,
                origin: "web.toml:1:1".into(),
            }]
            .into(),
        ),
    };
    let synced = coordinator::SourceReport::Synced {
        kind: SourceKind::Directory,
        fragments: vec![fragment],
        at: std::time::SystemTime::UNIX_EPOCH,
    };
    let first = rig.feed(Input::SourceReport(synced));
    assert!(applies(&first).is_empty(), "merged before docker reported");
    let failed = coordinator::SourceReport::Failed {
        kind: SourceKind::Docker,
        error: "docker source: cannot connect".into(),
    };
    let sent = rig.feed(Input::SourceReport(failed));
    assert_eq!(applies(&sent).len(), 1);
    let done = commit(&mut rig, &sent, &[0]);
    assert!(
        logged(&done).contains(&"route sources: 1 change(s) applied, 0 skipped".to_owned()),
        "{:?}",
        logged(&done)
    );
    assert!(rig.coordinator.state().cluster("web").is_some());
}

#[test]
fn a_refused_reload_counts_its_errors() {
    let mut rig = with_config(1, "/etc/preread/preread.toml");
    let job = read_job(&rig.feed(Input::Hangup)).expect("read");
    let text = "[[listeners]]\naddress = \"nowhere\"\n".to_owned();
    let end = rig.feed(Input::ConfigRead {
        job,
        read: Ok(text),
    });
    assert!(applies(&end).is_empty());
    assert_eq!(
        ready(&end),
        vec!["reload of /etc/preread/preread.toml refused: 1 error(s); nothing changed".to_owned()]
    );
}

#[test]
fn generations_go_on_from_a_predecessors_and_deadlines_are_capped() {
    let mut rig = Rig::new(2);
    rig.coordinator.resume_generation(41);
    let settings = Settings {
        order_timeout: Duration::MAX,
        soft_stop_grace: Duration::from_secs(5),
        config_path: None,
        pid: 4242,
    };
    let mut slow = Coordinator::new(settings, ConfigState::default(), Box::new(Free), rig.now);
    slow.add_worker(0);
    slow.handle(
        Input::Request {
            client: ClientId(1),
            request: add_cluster("a"),
        },
        rig.now,
    );
    let year = Duration::from_secs(365 * 24 * 3600);
    assert_eq!(slow.next_deadline(), Some(rig.now + year));
    let sent = rig.ask(1, add_cluster("a"));
    commit(&mut rig, &sent, &[0, 1]);
    assert_eq!(rig.coordinator.generation(), 42);
    rig.feed(Input::WorkerGone { worker: 1 });
    assert_eq!(rig.coordinator.workers(), &[0]);
}
