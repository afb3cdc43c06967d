//! A source that says what changed (etcd) through the coordinator: each
//! report is one generation at its revision, only the changed fragments
//! and the excluded ones are tried again, the last key deleted empties the
//! routes, the revision applied is published once committed, and a proxy
//! whose store never answered keeps its saved state. Fake time, fake
//! workers; the incremental merge is checked against the full one.

use std::collections::BTreeSet;
use std::io;
use std::time::{Duration, Instant, UNIX_EPOCH};

use command::codes::ErrorCode;
use command::proto::{self, request::RequestType, response_content::ContentType};
use command::sources::etcd::fragment;
use command::sources::{Fragment, SourceKind, merge};
use command::state::{Applied, ConfigState};
use coordinator::{
    AddressCheck, Answer, Coordinator, Effect, Input, Order, Settings, SourceReport,
};

const LISTENER: &str = "127.0.0.1:8443";

struct Free;

impl AddressCheck for Free {
    fn ensure_unbound(&mut self, _: core::net::SocketAddr) -> io::Result<()> {
        Ok(())
    }
}

/// The config file's declarations: one listener.
fn file() -> ConfigState {
    let mut state = ConfigState::default();
    let listener = proto::TcpListenerConfig {
        address: LISTENER.into(),
        ..Default::default()
    };
    let added = state.dispatch(&proto::Request {
        request_type: Some(RequestType::AddTcpListener(listener)),
    });
    assert_eq!(added.ok(), Some(Applied::Changed));
    state
}

/// Route key `name`: cluster `name` for `sni`.
fn key(name: &str, sni: &str) -> Fragment {
    let text = format!(
        "[clusters.{name}]\nfrontends = [{{ address = \"*:8443\", sni = \"{sni}\" }}]\n\
         backends = [{{ address = \"127.0.0.1:9000\" }}]\n"
    );
    fragment(name, text.as_bytes())
}

fn changed(revision: i64, put: Vec<Fragment>, deleted: &[&str]) -> Input {
    Input::SourceReport(SourceReport::Changed {
        kind: SourceKind::Etcd,
        revision,
        put,
        deleted: deleted.iter().map(|d| (*d).to_owned()).collect(),
        at: UNIX_EPOCH + Duration::from_millis(1),
    })
}

struct Rig {
    c: Coordinator,
    now: Instant,
    /// Every `SourceApplied`: revision, excluded names.
    applied: Vec<(i64, Vec<String>)>,
}

impl Rig {
    /// A proxy whose running state is `running`, fed by etcd.
    fn new(running: ConfigState) -> Self {
        let now = Instant::now();
        let settings = Settings {
            order_timeout: Duration::from_secs(10),
            soft_stop_grace: Duration::from_secs(5),
            config_path: None,
            pid: 1,
        };
        let mut c = Coordinator::new(settings, running, Box::new(Free), now);
        c.add_worker(0);
        let slots = vec![(SourceKind::Etcd, "http://127.0.0.1:2379".into())];
        c.start_sources(0, Some(file()), slots, now);
        Self {
            c,
            now,
            applied: Vec::new(),
        }
    }

    /// Feeds `input`, applies what it sends; the generations sent.
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
                    Input::WorkerAnswer {
                        worker: 0,
                        order,
                        answer: Answer::Done,
                    }
                }
                Effect::AppendJournal { job, .. } => Input::Journaled { job, saved: Ok(()) },
                Effect::SourceApplied {
                    revision, excluded, ..
                } => {
                    let names = excluded.into_iter().map(|e| e.id.name).collect();
                    self.applied.push((revision, names));
                    continue;
                }
                _ => continue,
            };
            effects.extend(self.c.handle(next, self.now));
        }
        sent
    }

    fn clusters(&self) -> BTreeSet<String> {
        self.c
            .state()
            .clusters()
            .map(|c| c.cluster_id.clone())
            .collect()
    }

    fn listed(&self) -> proto::SourceEntry {
        match self.c.sources_list(self.now, UNIX_EPOCH) {
            ContentType::Sources(list) => list.sources[1].clone(),
            other => panic!("{other:?}"),
        }
    }
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

#[test]
fn each_report_is_one_generation_at_its_revision_down_to_no_key() {
    let mut rig = Rig::new(file());
    let put = vec![key("a", "a.example"), key("b", "b.example")];
    assert_eq!(rig.feed(changed(4, put, &[])), 1);
    assert_eq!(rig.clusters(), names(&["a", "b"]));
    assert_eq!(rig.applied, [(4, vec![])]);
    assert_eq!(rig.listed().revision, 4);
    assert_eq!((rig.listed().fragments, rig.listed().routes), (2, 2));

    assert_eq!(rig.feed(changed(5, vec![key("a", "z.example")], &[])), 1);
    let snis: Vec<Option<String>> = rig.c.state().frontends().map(|f| f.sni).collect();
    assert!(snis.contains(&Some("z.example".into())), "{snis:?}");
    assert!(!snis.contains(&Some("a.example".into())), "{snis:?}");

    assert_eq!(rig.feed(changed(6, Vec::new(), &["a"])), 1);
    assert_eq!(rig.feed(changed(7, Vec::new(), &["b"])), 1, "the last key");
    assert!(rig.clusters().is_empty(), "the routes are empty");
    assert_eq!(rig.c.state(), &file());
    assert_eq!(rig.listed().revision, 7);
    assert_eq!(rig.listed().fragments, 0);
    // A revision that changes no fragment moves the revision served.
    assert_eq!(rig.feed(changed(9, Vec::new(), &["gone"])), 0);
    assert_eq!(rig.applied.last(), Some(&(9, vec![])));
}

#[test]
fn a_clashing_key_is_excluded_then_applies_when_its_rival_goes() {
    let mut rig = Rig::new(file());
    rig.feed(changed(2, vec![key("a", "x.example")], &[]));
    rig.feed(changed(
        3,
        vec![key("b", "x.example"), key("c", "c.example")],
        &[],
    ));
    assert_eq!(rig.clusters(), names(&["a", "c"]));
    assert_eq!(rig.applied.last(), Some(&(3, vec!["b".to_owned()])));
    let listed = rig.listed();
    assert_eq!(
        listed.excluded[0].error_code,
        ErrorCode::FrontendConflict.as_str()
    );
    let broken = fragment("bad", b"[clusters.bad\n");
    rig.feed(changed(4, vec![broken], &[]));
    assert_eq!(
        rig.applied.last(),
        Some(&(4, vec!["b".to_owned(), "bad".to_owned()]))
    );
    rig.feed(changed(5, Vec::new(), &["a"]));
    assert_eq!(rig.clusters(), names(&["b", "c"]), "b retried and applied");
    assert_eq!(rig.applied.last(), Some(&(5, vec!["bad".to_owned()])));
}

#[test]
fn the_incremental_merge_lands_where_a_fresh_full_merge_does() {
    let mut rig = Rig::new(file());
    let mut store: std::collections::BTreeMap<String, Fragment> = Default::default();
    let mut revision = 1;
    // A deterministic walk of puts, rewrites, clashes and deletions.
    for step in 0..120u32 {
        let name = format!("k{}", step % 13);
        revision += 1;
        if step % 5 == 4 {
            store.remove(&name);
            rig.feed(changed(revision, Vec::new(), &[name.as_str()]));
        } else {
            let sni = format!("s{}.example", (step * 7) % 11);
            let f = key(&name, &sni);
            store.insert(name, f.clone());
            rig.feed(changed(revision, vec![f], &[]));
        }
    }
    let applied: BTreeSet<command::sources::FragmentId> = rig
        .c
        .state()
        .clusters()
        .map(|c| command::sources::FragmentId::new(SourceKind::Etcd, c.cluster_id.clone()))
        .collect();
    let full = merge(&file(), store.values(), &applied);
    assert_eq!(rig.c.state(), &full.state);
}

#[test]
fn a_store_never_reached_keeps_the_saved_state() {
    let mut saved = file();
    for d in match key("web", "web.example").body {
        command::sources::FragmentBody::Declared(d) => d.decode(),
        command::sources::FragmentBody::Broken(p) => panic!("{p:?}"),
    } {
        let request = match &d.request.request_type {
            Some(RequestType::AddTcpFrontend(f)) => proto::Request {
                request_type: Some(RequestType::AddTcpFrontend(proto::TcpFrontend {
                    address: LISTENER.into(),
                    ..f.clone()
                })),
            },
            _ => d.request.clone(),
        };
        assert!(saved.dispatch(&request).is_ok());
    }
    let mut rig = Rig::new(saved.clone());
    let failed = Input::SourceReport(SourceReport::Failed {
        kind: SourceKind::Etcd,
        error: "etcd http://127.0.0.1:2379: connection refused".into(),
    });
    assert_eq!(rig.feed(failed), 0, "no merge before the store answers");
    assert_eq!(rig.c.state(), &saved);
    assert_eq!(rig.listed().errors, 1);
    // The store answers: its first revision is merged whole.
    assert_eq!(
        rig.feed(changed(3, vec![key("api", "api.example")], &[])),
        1
    );
    assert_eq!(rig.clusters(), names(&["api"]));
}
