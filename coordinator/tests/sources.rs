//! The route sources through the coordinator: a source's first report
//! queues a merge, the merge is one generation like a change, a report
//! that changes nothing queues none, a failed read keeps the fragments
//! and is counted, and `preread sources` lists what the committed merge
//! holds. Fake time, fake workers.

use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use command::proto::{self, request::RequestType, response_content::ContentType};
use command::sources::{Declared, Fragment, FragmentBody, FragmentId, SourceKind};
use command::state::{Applied, ConfigState};
use coordinator::{
    AddressCheck, Answer, Coordinator, Effect, Input, Order, Settings, SourceReport,
};

const LISTENER: &str = "127.0.0.1:8443";
const KIND: SourceKind = SourceKind::Directory;

struct Free;

impl AddressCheck for Free {
    fn ensure_unbound(&mut self, _: core::net::SocketAddr) -> io::Result<()> {
        Ok(())
    }
}

fn request(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

/// The config file's declarations: one listener.
fn file() -> ConfigState {
    let mut state = ConfigState::default();
    let listener = proto::TcpListenerConfig {
        address: LISTENER.into(),
        ..Default::default()
    };
    let added = state.dispatch(&request(RequestType::AddTcpListener(listener)));
    assert_eq!(added.ok(), Some(Applied::Changed));
    state
}

/// A fragment of one cluster routed on `address`.
fn fragment(name: &str, address: &str) -> Fragment {
    let declared = [
        RequestType::AddCluster(proto::Cluster {
            cluster_id: name.into(),
            ..Default::default()
        }),
        RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: name.into(),
            address: address.into(),
            sni: Some(format!("{name}.example.com")),
            ..Default::default()
        }),
        RequestType::AddBackend(proto::Backend {
            cluster_id: name.into(),
            backend_id: format!("{name}-0"),
            address: "127.0.0.1:9000".into(),
            ..Default::default()
        }),
    ];
    Fragment {
        id: FragmentId::new(KIND, format!("{name}.toml")),
        body: FragmentBody::Declared(
            declared
                .into_iter()
                .map(|kind| Declared {
                    request: request(kind),
                    origin: format!("{name}.toml"),
                })
                .collect(),
        ),
    }
}

fn synced(fragments: Vec<Fragment>, at_ms: u64) -> Input {
    Input::SourceReport(SourceReport::Synced {
        kind: KIND,
        fragments,
        at: UNIX_EPOCH + Duration::from_millis(at_ms),
    })
}

fn failed(error: &str) -> Input {
    Input::SourceReport(SourceReport::Failed {
        kind: KIND,
        error: error.into(),
    })
}

const ORDER_TIMEOUT: Duration = Duration::from_secs(10);

struct Rig {
    c: Coordinator,
    now: Instant,
    /// The worker refuses every generation.
    refuse: bool,
}

impl Rig {
    fn new() -> Self {
        let now = Instant::now();
        let settings = Settings {
            order_timeout: ORDER_TIMEOUT,
            soft_stop_grace: Duration::from_secs(5),
            config_path: None,
            pid: 1,
        };
        let mut c = Coordinator::new(settings, file(), Box::new(Free), now);
        c.add_worker(0);
        c.start_sources(0, Some(file()), vec![(KIND, "/routes.d".into())], now);
        Self {
            c,
            now,
            refuse: false,
        }
    }

    /// Feeds `input`; applies what it sends on the one worker and journals
    /// it; the number of generations sent.
    fn feed(&mut self, input: Input) -> usize {
        let mut effects = self.c.handle(input, self.now);
        let mut sent = 0;
        while let Some(effect) = effects.pop() {
            let next = match effect {
                Effect::Send {
                    order,
                    what: Order::Apply(_),
                    ..
                } => {
                    sent += 1;
                    // A merge retried on every refusal would never end.
                    assert!(sent <= 10, "generations sent without end");
                    let answer = if self.refuse {
                        Answer::Refused {
                            code: command::answer_code::AnswerCode::WorkerRefused,
                            message: "worker 0 refused: planted".into(),
                        }
                    } else {
                        Answer::Done
                    };
                    Input::WorkerAnswer {
                        worker: 0,
                        order,
                        answer,
                    }
                }
                Effect::AppendJournal { job, .. } => Input::Journaled { job, saved: Ok(()) },
                _ => continue,
            };
            effects.extend(self.c.handle(next, self.now));
        }
        sent
    }

    fn listed(&self) -> proto::SourceEntry {
        let wall = UNIX_EPOCH + Duration::from_secs(1_000);
        match self.c.sources_list(self.now, wall) {
            ContentType::Sources(list) => {
                assert_eq!(list.sources.len(), 2, "{list:?}");
                assert_eq!(list.sources[0].kind, "file");
                assert_eq!(list.sources[0].last_sync_unix_ms, 1_000_000);
                list.sources[1].clone()
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_first_report_merges_once_and_the_listing_shows_it() {
    let mut rig = Rig::new();
    assert_eq!(rig.listed().kind, "directory");
    assert_eq!(rig.listed().last_sync_unix_ms, 0, "never read");
    assert_eq!(rig.feed(synced(vec![fragment("web", LISTENER)], 7)), 1);
    assert!(rig.c.state().cluster("web").is_some(), "merged");
    let entry = rig.listed();
    assert_eq!(entry.location, "/routes.d");
    assert_eq!((entry.routes, entry.fragments), (1, 1));
    assert_eq!(entry.last_sync_unix_ms, 7);
    assert_eq!(entry.excluded_total, 0);
    assert_eq!(
        rig.feed(synced(vec![fragment("web", LISTENER)], 9)),
        0,
        "nothing changed: no merge"
    );
    assert_eq!(rig.listed().last_sync_unix_ms, 9);
    assert_eq!(rig.feed(synced(Vec::new(), 11)), 1, "the fragment went");
    assert!(rig.c.state().cluster("web").is_none());
    assert_eq!(rig.listed().fragments, 0);
    assert!(!rig.c.is_busy());
}

#[test]
fn a_refused_merge_is_tried_again_after_a_pause_not_at_once() {
    let mut rig = Rig::new();
    rig.refuse = true;
    assert_eq!(
        rig.feed(synced(vec![fragment("web", LISTENER)], 7)),
        1,
        "tried once, not again at once"
    );
    assert!(rig.c.state().cluster("web").is_none(), "refused");
    assert!(!rig.c.is_busy());
    let retry = rig.c.next_deadline().expect("the retry is a deadline");
    assert_eq!(retry, rig.now + ORDER_TIMEOUT, "one order timeout later");
    rig.now = retry - Duration::from_millis(1);
    assert_eq!(rig.feed(Input::Tick), 0, "not before its time");
    rig.now = retry;
    assert_eq!(rig.feed(Input::Tick), 1, "retried, refused again");
    assert!(rig.c.state().cluster("web").is_none());
    rig.refuse = false;
    rig.now += ORDER_TIMEOUT;
    assert_eq!(rig.feed(Input::Tick), 1, "the retry merges");
    assert!(rig.c.state().cluster("web").is_some(), "merged");
    assert_eq!(rig.c.next_deadline(), None, "nothing left to retry");
}

#[test]
fn a_fragment_on_no_listener_is_excluded_and_listed() {
    let mut rig = Rig::new();
    let report = vec![
        fragment("web", LISTENER),
        fragment("lost", "127.0.0.1:9999"),
    ];
    assert_eq!(rig.feed(synced(report, 1)), 1);
    let entry = rig.listed();
    assert_eq!((entry.fragments, entry.excluded_total), (1, 1));
    assert_eq!(entry.excluded.len(), 1);
    assert_eq!(entry.excluded[0].name, "lost.toml");
    assert!(!entry.excluded[0].error_code.is_empty());
    assert!(rig.c.state().cluster("lost").is_none());
}

#[test]
fn a_failed_read_keeps_the_fragments_and_is_counted() {
    let mut rig = Rig::new();
    assert_eq!(
        rig.feed(failed("cannot read /routes.d")),
        0,
        "a first report: a merge of nothing"
    );
    assert_eq!(rig.feed(synced(vec![fragment("web", LISTENER)], 3)), 1);
    assert_eq!(rig.feed(failed("cannot read /routes.d")), 0);
    assert_eq!(rig.feed(failed("cannot read /routes.d again")), 0);
    let entry = rig.listed();
    assert_eq!(entry.errors, 2 + 1);
    assert_eq!(entry.error, "cannot read /routes.d again");
    assert!(rig.c.state().cluster("web").is_some(), "kept");
    assert_eq!(rig.feed(synced(vec![fragment("web", LISTENER)], 5)), 0);
    assert_eq!(rig.listed().error, "", "read again");
}

#[test]
fn a_report_of_another_kind_is_ignored() {
    let mut rig = Rig::new();
    let other = Input::SourceReport(SourceReport::Synced {
        kind: SourceKind::Docker,
        fragments: vec![fragment("web", LISTENER)],
        at: SystemTime::UNIX_EPOCH,
    });
    assert_eq!(rig.feed(other), 0);
    assert!(rig.c.state().cluster("web").is_none());
}
