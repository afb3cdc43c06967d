//! Rules of the coordinator that its other tests leave implicit: a hard
//! stop forgets the soft stop's order, a batch is answered with its
//! report, a skipped request is named in its job's answer, an answer to
//! no order is logged, and a source's first report merges even when it
//! brings no fragment (the file's declarations apply).

use std::io;
use std::time::{Duration, Instant};

use command::proto::{self, request::RequestType, response_content::ContentType};
use command::sources::SourceKind;
use command::state::{Applied, ConfigState};
use coordinator::{
    AddressCheck, Answer, ClientId, Coordinator, Effect, Input, Order, Request, Settings,
    SourceReport, StopKind,
};

const LISTENER: &str = "127.0.0.1:8443";

/// Refuses every address: another process holds them all.
struct Held;

impl AddressCheck for Held {
    fn ensure_unbound(&mut self, _: core::net::SocketAddr) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::AddrInUse))
    }
}

fn coordinator(now: Instant) -> Coordinator {
    let settings = Settings {
        order_timeout: Duration::from_secs(10),
        soft_stop_grace: Duration::from_secs(5),
        config_path: None,
        pid: 1,
    };
    let mut c = Coordinator::new(settings, ConfigState::default(), Box::new(Held), now);
    c.add_worker(0);
    c
}

fn request(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

fn add_listener() -> proto::Request {
    request(RequestType::AddTcpListener(proto::TcpListenerConfig {
        address: LISTENER.into(),
        ..Default::default()
    }))
}

fn with_listener() -> ConfigState {
    let mut state = ConfigState::default();
    let added = state.dispatch(&add_listener());
    assert_eq!(added.ok(), Some(Applied::Changed));
    state
}

fn answers(effects: &[Effect]) -> Vec<&proto::Response> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Answer { response, .. } => Some(response),
            _ => None,
        })
        .collect()
}

fn stop_order(effects: &[Effect]) -> u64 {
    effects
        .iter()
        .find_map(|e| match e {
            Effect::Send {
                order,
                what: Order::SoftStop { .. } | Order::HardStop,
                ..
            } => Some(*order),
            _ => None,
        })
        .expect("a stop order")
}

#[test]
fn a_hard_stop_does_not_wait_on_the_soft_stops_order() {
    let now = Instant::now();
    let mut c = coordinator(now);
    stop_order(&c.handle(Input::Stop(StopKind::Soft), now));
    let hard = stop_order(&c.handle(Input::Stop(StopKind::Hard), now));
    assert!(!c.is_stopped());
    let answer = Input::WorkerAnswer {
        worker: 0,
        order: hard,
        answer: Answer::Done,
    };
    c.handle(answer, now);
    assert!(c.is_stopped(), "the soft stop's order is forgotten");
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn a_batch_is_answered_with_its_report_and_names_what_it_skipped() {
    let now = Instant::now();
    let mut c = coordinator(now);
    let batch = proto::ChangeBatch {
        requests: vec![add_listener()],
        declarations: false,
        more: false,
    };
    let effects = c.handle(
        Input::Request {
            client: ClientId(1),
            request: Request::BatchPart(batch),
        },
        now,
    );
    let answer = answers(&effects);
    let report = answer
        .first()
        .and_then(|r| r.content.as_ref())
        .and_then(|c| c.content_type.as_ref());
    let Some(ContentType::Batch(report)) = report else {
        panic!("no batch report: {effects:?}");
    };
    assert_eq!((report.applied_total, report.skipped_total), (0, 1));
}

#[test]
fn a_state_load_names_each_request_it_skipped() {
    let now = Instant::now();
    let mut c = coordinator(now);
    let asked = c.handle(
        Input::Request {
            client: ClientId(1),
            request: Request::LoadState {
                path: "/saved.state".into(),
            },
        },
        now,
    );
    let job = asked
        .iter()
        .find_map(|e| match e {
            Effect::ReadStateFile { job, .. } => Some(*job),
            _ => None,
        })
        .expect("a read");
    let read = Input::StateFileRead {
        job,
        read: Ok(with_listener()),
    };
    let effects = c.handle(read, now);
    let answer = answers(&effects);
    let message = &answer.first().expect("answered").message;
    assert!(message.contains("skipped {\""), "{message}");
    assert!(message.contains(LISTENER), "{message}");
}

#[test]
fn an_answer_to_no_order_is_logged() {
    let now = Instant::now();
    let mut c = coordinator(now);
    let effects = c.handle(
        Input::WorkerAnswer {
            worker: 0,
            order: 99,
            answer: Answer::Done,
        },
        now,
    );
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Log { .. })),
        "{effects:?}"
    );
}

#[test]
fn a_first_report_merges_the_files_declarations_even_with_no_fragment() {
    for report in [
        SourceReport::Failed {
            kind: SourceKind::Directory,
            error: "cannot read /routes.d".into(),
        },
        SourceReport::Synced {
            kind: SourceKind::Directory,
            fragments: Vec::new(),
            at: std::time::UNIX_EPOCH,
        },
    ] {
        let now = Instant::now();
        let settings = Settings {
            order_timeout: Duration::from_secs(10),
            soft_stop_grace: Duration::from_secs(5),
            config_path: None,
            pid: 1,
        };
        let mut c = Coordinator::new(settings, ConfigState::default(), Box::new(Free), now);
        c.add_worker(0);
        let slots = vec![(SourceKind::Directory, "/routes.d".to_owned())];
        c.start_sources(1, Some(with_listener()), slots, now);
        let effects = c.handle(Input::SourceReport(report), now);
        let sent = effects
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Effect::Send {
                        what: Order::Apply(_),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(sent, 1, "{effects:?}");
    }
}

struct Free;

impl AddressCheck for Free {
    fn ensure_unbound(&mut self, _: core::net::SocketAddr) -> io::Result<()> {
        Ok(())
    }
}

fn ask(c: &mut Coordinator, client: u64, request: Request, now: Instant) -> Vec<Effect> {
    c.handle(
        Input::Request {
            client: ClientId(client),
            request,
        },
        now,
    )
}

fn change(kind: RequestType) -> Request {
    Request::Change(request(kind))
}

fn add_cluster(id: &str) -> Request {
    change(RequestType::AddCluster(proto::Cluster {
        cluster_id: id.into(),
        ..Default::default()
    }))
}

fn apply_order(effects: &[Effect]) -> Option<u64> {
    effects.iter().find_map(|e| match e {
        Effect::Send {
            order,
            what: Order::Apply(_),
            ..
        } => Some(*order),
        _ => None,
    })
}

/// Worker 0 applies the generation `effects` sent: the journal job.
fn applied(
    c: &mut Coordinator,
    effects: &[Effect],
    now: Instant,
) -> (Vec<Effect>, coordinator::JobId) {
    let order = apply_order(effects).expect("a generation sent");
    let done = c.handle(
        Input::WorkerAnswer {
            worker: 0,
            order,
            answer: Answer::Done,
        },
        now,
    );
    let job = done
        .iter()
        .find_map(|e| match e {
            Effect::AppendJournal { job, .. } => Some(*job),
            _ => None,
        })
        .expect("journaled");
    (done, job)
}

#[test]
fn a_client_that_left_hears_nothing_and_its_parts_are_forgotten() {
    let now = Instant::now();
    let mut c = coordinator(now);
    let sent = ask(&mut c, 1, add_cluster("a"), now);
    c.handle(
        Input::ClientGone {
            client: ClientId(1),
        },
        now,
    );
    let (_, job) = applied(&mut c, &sent, now);
    let end = c.handle(Input::Journaled { job, saved: Ok(()) }, now);
    assert!(answers(&end).is_empty(), "{end:?}");
    let part = |id: &str, more| {
        Request::BatchPart(proto::ChangeBatch {
            requests: vec![request(RequestType::AddCluster(proto::Cluster {
                cluster_id: id.into(),
                ..Default::default()
            }))],
            declarations: false,
            more,
        })
    };
    ask(&mut c, 2, part("b", true), now);
    c.handle(
        Input::ClientGone {
            client: ClientId(2),
        },
        now,
    );
    let last = ask(&mut c, 2, part("c", false), now);
    let sent = last.iter().find_map(|e| match e {
        Effect::Send {
            what: Order::Apply(g),
            ..
        } => Some(g.len()),
        _ => None,
    });
    assert_eq!(
        sent,
        Some(1),
        "only the part sent after the client came back"
    );
}

#[test]
fn each_job_has_its_own_id_and_a_journal_answer_for_another_is_ignored() {
    let now = Instant::now();
    let mut c = coordinator(now);
    let sent = ask(&mut c, 1, add_cluster("a"), now);
    let (_, first) = applied(&mut c, &sent, now);
    let wrong = c.handle(
        Input::Journaled {
            job: coordinator::JobId(first.0 + 7),
            saved: Ok(()),
        },
        now,
    );
    assert!(answers(&wrong).is_empty(), "{wrong:?}");
    let answered = c.handle(
        Input::Journaled {
            job: first,
            saved: Ok(()),
        },
        now,
    );
    assert_eq!(answers(&answered).len(), 1);
    let sent = ask(&mut c, 1, add_cluster("b"), now);
    let (_, second) = applied(&mut c, &sent, now);
    assert_ne!(first, second);
}

#[test]
fn stops_tell_systemd_once_per_strength_and_order_no_weaker_one() {
    let now = Instant::now();
    let mut c = coordinator(now);
    let count = |effects: &[Effect]| {
        let notices = effects
            .iter()
            .filter(|e| matches!(e, Effect::Notify(_)))
            .count();
        let orders = effects
            .iter()
            .filter(|e| matches!(e, Effect::Send { .. }))
            .count();
        (notices, orders)
    };
    assert_eq!(count(&c.handle(Input::Stop(StopKind::Soft), now)), (1, 1));
    assert_eq!(count(&c.handle(Input::Stop(StopKind::Soft), now)), (0, 0));
    assert_eq!(count(&c.handle(Input::Stop(StopKind::Hard), now)), (1, 1));
    assert_eq!(c.stopping(), Some(StopKind::Hard));
    assert_eq!(count(&c.handle(Input::Stop(StopKind::Soft), now)), (0, 0));
}

#[test]
fn an_upgrade_asked_while_stopping_fails_as_an_upgrade() {
    let now = Instant::now();
    let mut c = coordinator(now);
    let sent = ask(&mut c, 1, add_cluster("a"), now);
    let queued = ask(&mut c, 2, Request::Upgrade(Default::default()), now);
    assert!(answers(&queued).is_empty());
    let stopped = c.handle(Input::Stop(StopKind::Soft), now);
    let late = ask(&mut c, 3, Request::Upgrade(Default::default()), now);
    for effects in [&stopped, &late] {
        let codes: Vec<&str> = answers(effects)
            .iter()
            .map(|r| r.error_code.as_str())
            .collect();
        assert_eq!(codes, vec!["E_UPGRADE_FAILED"], "{effects:?}");
    }
    let closed = c.close();
    let message = &answers(&closed).first().expect("the change").message;
    assert!(message.contains("before the workers applied"), "{message}");
    assert!(apply_order(&sent).is_some());
}

#[test]
fn a_listener_is_checked_free_only_when_the_change_opens_it() {
    let now = Instant::now();
    let mut c = coordinator(now);
    let refused = ask(&mut c, 1, Request::Change(add_listener()), now);
    assert!(apply_order(&refused).is_none(), "the address is held");
    let message = &answers(&refused).first().expect("answered").message;
    assert!(message.contains("cannot listen on"), "{message}");
    let settings = Settings {
        order_timeout: Duration::from_secs(10),
        soft_stop_grace: Duration::from_secs(5),
        config_path: None,
        pid: 1,
    };
    let mut c = Coordinator::new(settings, with_listener(), Box::new(Held), now);
    c.add_worker(0);
    let update = change(RequestType::UpdateTcpListener(proto::TcpListenerConfig {
        address: LISTENER.into(),
        expect_proxy: true,
        ..Default::default()
    }));
    let sent = ask(&mut c, 1, update, now);
    assert!(apply_order(&sent).is_some(), "already listening: {sent:?}");
    let (_, job) = applied(&mut c, &sent, now);
    c.handle(Input::Journaled { job, saved: Ok(()) }, now);
    let off = change(RequestType::DeactivateListener(proto::ListenerAddress {
        address: LISTENER.into(),
        protocol: None,
    }));
    let sent = ask(&mut c, 1, off, now);
    assert!(
        apply_order(&sent).is_some(),
        "closing needs no check: {sent:?}"
    );
}

#[test]
fn a_merge_that_applied_is_logged() {
    let now = Instant::now();
    let settings = Settings {
        order_timeout: Duration::from_secs(10),
        soft_stop_grace: Duration::from_secs(5),
        config_path: None,
        pid: 1,
    };
    let mut c = Coordinator::new(settings, ConfigState::default(), Box::new(Free), now);
    c.add_worker(0);
    let slots = vec![(SourceKind::Directory, "/routes.d".to_owned())];
    c.start_sources(1, Some(with_listener()), slots, now);
    let report = SourceReport::Synced {
        kind: SourceKind::Directory,
        fragments: Vec::new(),
        at: std::time::UNIX_EPOCH,
    };
    let sent = c.handle(Input::SourceReport(report), now);
    let (done, job) = applied(&mut c, &sent, now);
    let mut effects = done;
    effects.extend(c.handle(Input::Journaled { job, saved: Ok(()) }, now));
    let logged = effects.iter().any(|e| {
        matches!(e, Effect::Log { message, .. } if message.starts_with("route sources: 1 change(s) applied"))
    });
    assert!(logged, "{effects:?}");
}

#[test]
fn a_listener_added_inactive_is_not_checked_free() {
    let now = Instant::now();
    let mut c = coordinator(now);
    let inactive = change(RequestType::AddTcpListener(proto::TcpListenerConfig {
        address: LISTENER.into(),
        active: Some(false),
        ..Default::default()
    }));
    let sent = ask(&mut c, 1, inactive, now);
    assert!(apply_order(&sent).is_some(), "nothing listens: {sent:?}");
}

#[test]
fn a_merge_that_changes_nothing_is_not_logged() {
    let now = Instant::now();
    let settings = Settings {
        order_timeout: Duration::from_secs(10),
        soft_stop_grace: Duration::from_secs(5),
        config_path: None,
        pid: 1,
    };
    let mut c = Coordinator::new(settings, with_listener(), Box::new(Free), now);
    c.add_worker(0);
    let slots = vec![(SourceKind::Directory, "/routes.d".to_owned())];
    c.start_sources(1, Some(with_listener()), slots, now);
    let report = SourceReport::Failed {
        kind: SourceKind::Directory,
        error: "cannot read /routes.d".into(),
    };
    let effects = c.handle(Input::SourceReport(report), now);
    assert!(apply_order(&effects).is_none(), "{effects:?}");
    let logged = effects
        .iter()
        .any(|e| matches!(e, Effect::Log { message, .. } if message.starts_with("route sources:")));
    assert!(!logged, "{effects:?}");
}
