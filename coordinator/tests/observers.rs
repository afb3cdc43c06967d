//! What the coordinator tells the shell about itself (`workers`,
//! `is_busy`, `answers_owed`, `generation`, `next_deadline`, the sources'
//! listing, its `Debug`), each checked while a change runs and after it:
//! the shell's loop decides on them when to tick, when to end and what to
//! list.

use std::io;
use std::time::{Duration, Instant, SystemTime};

use command::proto::{self, request::RequestType, response_content::ContentType};
use command::sources::SourceKind;
use command::state::ConfigState;
use coordinator::{
    AddressCheck, Answer, ClientId, Coordinator, Effect, Input, JobId, Order, OrderId, Request,
    Settings,
};

struct Free;

impl AddressCheck for Free {
    fn ensure_unbound(&mut self, _: core::net::SocketAddr) -> io::Result<()> {
        Ok(())
    }
}

fn coordinator(timeout: Duration, now: Instant) -> Coordinator {
    let settings = Settings {
        order_timeout: timeout,
        soft_stop_grace: Duration::from_secs(5),
        config_path: None,
        pid: 1,
    };
    let mut coordinator = Coordinator::new(settings, ConfigState::default(), Box::new(Free), now);
    coordinator.add_worker(3);
    coordinator.add_worker(5);
    coordinator
}

fn add_cluster(id: &str) -> Input {
    Input::Request {
        client: ClientId(1),
        request: Request::Change(proto::Request {
            request_type: Some(RequestType::AddCluster(proto::Cluster {
                cluster_id: id.into(),
                ..Default::default()
            })),
        }),
    }
}

fn order_of(effects: &[Effect]) -> OrderId {
    effects
        .iter()
        .find_map(|effect| match effect {
            Effect::Send {
                order,
                what: Order::Apply(_),
                ..
            } => Some(*order),
            _ => None,
        })
        .expect("a generation sent")
}

fn journal_job(effects: &[Effect]) -> JobId {
    effects
        .iter()
        .find_map(|effect| match effect {
            Effect::AppendJournal { job, .. } => Some(*job),
            _ => None,
        })
        .expect("journaled")
}

#[test]
fn a_running_change_is_seen_busy_and_owed_until_it_is_answered() {
    let now = Instant::now();
    let mut c = coordinator(Duration::from_secs(10), now);
    assert_eq!(c.workers(), &[3, 5]);
    assert!(!c.is_busy());
    assert_eq!(c.answers_owed(), 0);
    let sent = c.handle(add_cluster("a"), now);
    let order = order_of(&sent);
    assert!(c.is_busy());
    assert_eq!(c.answers_owed(), 1);
    assert_eq!(c.next_deadline(), Some(now + Duration::from_secs(10)));
    let answer = |worker| Input::WorkerAnswer {
        worker,
        order,
        answer: Answer::Done,
    };
    c.handle(answer(3), now);
    let done = c.handle(answer(5), now);
    assert!(c.is_busy(), "journaling");
    let job = journal_job(&done);
    c.handle(Input::Journaled { job, saved: Ok(()) }, now);
    assert!(!c.is_busy());
    assert_eq!(c.answers_owed(), 0);
    assert_eq!(c.generation(), 1);
    assert!(format!("{c:?}").starts_with("Coordinator {"));
    c.handle(Input::WorkerGone { worker: 3 }, now);
    assert_eq!(c.workers(), &[5]);
}

#[test]
fn generations_count_on_from_a_predecessors() {
    let now = Instant::now();
    let mut c = coordinator(Duration::from_secs(10), now);
    c.resume_generation(41);
    assert_eq!(c.generation(), 41);
    let order = order_of(&c.handle(add_cluster("a"), now));
    c.handle(
        Input::WorkerAnswer {
            worker: 3,
            order,
            answer: Answer::Done,
        },
        now,
    );
    let done = c.handle(
        Input::WorkerAnswer {
            worker: 5,
            order,
            answer: Answer::Done,
        },
        now,
    );
    assert_eq!(c.generation(), 42);
    c.handle(
        Input::Journaled {
            job: journal_job(&done),
            saved: Ok(()),
        },
        now,
    );
}

#[test]
fn a_timeout_past_a_year_waits_a_year() {
    let now = Instant::now();
    let mut c = coordinator(Duration::MAX, now);
    c.handle(add_cluster("a"), now);
    let year = Duration::from_secs(365 * 24 * 3600);
    assert_eq!(c.next_deadline(), Some(now + year));
}

#[test]
fn the_sources_listing_holds_the_file_and_each_started_source() {
    let now = Instant::now();
    let mut c = coordinator(Duration::from_secs(10), now);
    let listed = |c: &Coordinator| match c.sources_list(now, SystemTime::now()) {
        ContentType::Sources(list) => list
            .sources
            .iter()
            .map(|s| s.kind.clone())
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(listed(&c), vec!["file".to_owned()]);
    let slots = vec![(SourceKind::Directory, "/etc/preread/routes.d".to_owned())];
    c.start_sources(0, Some(ConfigState::default()), slots, now);
    assert_eq!(listed(&c), vec!["file".to_owned(), "directory".to_owned()]);
}
