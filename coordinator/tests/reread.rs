//! A SIGHUP reload reads only the cluster tables that changed when the
//! running state is the last text's file state, and the whole file once
//! it is not (after a batch of declarations): the log line of each reload
//! says which. Fake time, one fake worker.

use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use command::reread::file_state;
use coordinator::{AddressCheck, Answer, Coordinator, Effect, Input, Order, Settings};

struct Free;

impl AddressCheck for Free {
    fn ensure_unbound(&mut self, _: core::net::SocketAddr) -> io::Result<()> {
        Ok(())
    }
}

fn text(backend_port: u16) -> String {
    format!(
        "[[listeners]]\naddress = \"127.0.0.1:8443\"\n\n[clusters.a]\nfrontends = [{{ address = \
         \"127.0.0.1:8443\", sni = \"a.example.com\" }}]\nbackends = [{{ address = \
         \"127.0.0.1:{backend_port}\", backend_id = \"a-0\" }}]\n\n[clusters.b]\nfrontends = \
         [{{ address = \"127.0.0.1:8443\", sni = \"b.example.com\" }}]\nbackends = [{{ address = \
         \"127.0.0.1:9100\", backend_id = \"b-0\" }}]\n"
    )
}

/// Reloads `text` on SIGHUP, applied on the one worker; the log lines.
fn reload(c: &mut Coordinator, text: String, now: Instant) -> Vec<String> {
    let mut effects = c.handle(Input::Hangup, now);
    let mut logs = Vec::new();
    let mut text = Some(text);
    while let Some(effect) = effects.pop() {
        let next = match effect {
            Effect::ReadConfig { job, .. } => Input::ConfigRead {
                job,
                read: Ok(text.take().expect("read once")),
            },
            Effect::Send {
                order,
                what: Order::Apply(_),
                ..
            } => Input::WorkerAnswer {
                worker: 0,
                order,
                answer: Answer::Done,
            },
            Effect::AppendJournal { job, .. } => Input::Journaled { job, saved: Ok(()) },
            Effect::Log { message, .. } => {
                logs.push(message);
                continue;
            }
            Effect::LogElapsed { before, after, .. } => {
                logs.push(format!("{before} N ms{after}"));
                continue;
            }
            _ => continue,
        };
        effects.extend(c.handle(next, now));
    }
    logs
}

fn partial(logs: &[String]) -> bool {
    let read: Vec<&String> = logs
        .iter()
        .filter(|l| l.contains("read, checked"))
        .collect();
    assert_eq!(read.len(), 1, "{logs:?}");
    read[0].contains("changed cluster table")
}

#[test]
fn a_reload_reads_the_changed_tables_while_the_state_is_the_files() {
    let now = Instant::now();
    let booted = file_state(&text(9000), None).expect("a valid config");
    let settings = Settings {
        order_timeout: Duration::from_secs(10),
        soft_stop_grace: Duration::from_secs(5),
        config_path: Some(PathBuf::from("/etc/preread.toml")),
        pid: 1,
    };
    let mut c = Coordinator::new(settings, booted.state, Box::new(Free), now);
    c.add_worker(0);
    c.know_config_text(booted.outline, true);
    assert!(
        partial(&reload(&mut c, text(9001), now)),
        "the first reload"
    );
    assert_eq!(c.generation(), 1);
    assert!(
        partial(&reload(&mut c, text(9002), now)),
        "from the new text"
    );
    let declarations = coordinator::Request::BatchPart(command::proto::ChangeBatch {
        requests: Vec::new(),
        declarations: true,
        more: false,
    });
    let mut effects = c.handle(
        Input::Request {
            client: coordinator::ClientId(1),
            request: declarations,
        },
        now,
    );
    while let Some(effect) = effects.pop() {
        let next = match effect {
            Effect::Send { order, .. } => Input::WorkerAnswer {
                worker: 0,
                order,
                answer: Answer::Done,
            },
            Effect::AppendJournal { job, .. } => Input::Journaled { job, saved: Ok(()) },
            _ => continue,
        };
        effects.extend(c.handle(next, now));
    }
    assert!(c.state().cluster("a").is_none(), "declared empty");
    assert!(
        !partial(&reload(&mut c, text(9003), now)),
        "no text stands for the state"
    );
}

fn coordinator_on(text: &str, now: Instant) -> Coordinator {
    let booted = file_state(text, None).expect("a valid config");
    let settings = Settings {
        order_timeout: Duration::from_secs(10),
        soft_stop_grace: Duration::from_secs(5),
        config_path: Some(PathBuf::from("/etc/preread.toml")),
        pid: 1,
    };
    let mut c = Coordinator::new(settings, booted.state.clone(), Box::new(Free), now);
    c.add_worker(0);
    c.know_config_text(booted.outline, true);
    c
}

fn file_routes(c: &Coordinator, now: Instant) -> u32 {
    match c.sources_list(now, std::time::SystemTime::now()) {
        command::proto::response_content::ContentType::Sources(list) => list.sources[0].routes,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_reload_counts_the_files_routes_and_a_refused_one_its_errors() {
    let now = Instant::now();
    let mut c = coordinator_on(&text(9000), now);
    assert_eq!(file_routes(&c, now), 0, "not reloaded yet");
    reload(&mut c, text(9001), now);
    assert_eq!(file_routes(&c, now), 2);
    let mut effects = c.handle(Input::Hangup, now);
    let job = effects
        .iter()
        .find_map(|e| match e {
            Effect::ReadConfig { job, .. } => Some(*job),
            _ => None,
        })
        .expect("a read");
    let bad = "[[listeners]]\naddress = \"not an address\"\n".to_owned();
    effects = c.handle(Input::ConfigRead { job, read: Ok(bad) }, now);
    let summary = effects
        .iter()
        .find_map(|e| match e {
            Effect::Notify(coordinator::Notice::Ready(summary)) => Some(summary.clone()),
            _ => None,
        })
        .expect("systemd hears the reload is over");
    assert!(
        summary.contains("refused:") && !summary.contains(" 0 error(s)"),
        "{summary}"
    );
}

#[test]
fn a_reload_with_a_route_source_keeps_its_fragments() {
    use command::proto::{self, request::RequestType};
    use command::sources::{Declared, Fragment, FragmentBody, FragmentId, SourceKind};
    let now = Instant::now();
    let booted = file_state(&text(9000), None).expect("a valid config");
    let mut c = coordinator_on(&text(9000), now);
    let slots = vec![(SourceKind::Directory, "/routes.d".to_owned())];
    c.start_sources(2, Some(booted.state), slots, now);
    let declared = [
        RequestType::AddCluster(proto::Cluster {
            cluster_id: "dir".into(),
            ..Default::default()
        }),
        RequestType::AddTcpFrontend(proto::TcpFrontend {
            cluster_id: "dir".into(),
            address: "127.0.0.1:8443".into(),
            sni: Some("dir.example.com".into()),
            ..Default::default()
        }),
    ];
    let fragment = Fragment {
        id: FragmentId::new(SourceKind::Directory, "dir.toml"),
        body: FragmentBody::Declared(
            declared
                .into_iter()
                .map(|kind| Declared {
                    request: proto::Request {
                        request_type: Some(kind),
                    },
                    origin: "dir.toml".into(),
                })
                .collect(),
        ),
    };
    let report = coordinator::SourceReport::Synced {
        kind: SourceKind::Directory,
        fragments: vec![fragment],
        at: std::time::UNIX_EPOCH,
    };
    let mut effects = c.handle(Input::SourceReport(report), now);
    while let Some(effect) = effects.pop() {
        let next = match effect {
            Effect::Send { order, .. } => Input::WorkerAnswer {
                worker: 0,
                order,
                answer: Answer::Done,
            },
            Effect::AppendJournal { job, .. } => Input::Journaled { job, saved: Ok(()) },
            _ => continue,
        };
        effects.extend(c.handle(next, now));
    }
    assert!(c.state().cluster("dir").is_some(), "merged");
    assert!(
        partial(&reload(&mut c, text(9001), now)),
        "from the file's declarations"
    );
    assert!(c.state().cluster("dir").is_some(), "the fragment stays");
    let backend = c
        .state()
        .backends()
        .find(|b| b.backend_id == "a-0")
        .map(|b| b.address.clone());
    assert_eq!(backend.as_deref(), Some("127.0.0.1:9001"));
    assert!(c.state().cluster("b").is_some(), "the tables not read stay");
    let declarations = coordinator::Request::BatchPart(proto::ChangeBatch {
        requests: Vec::new(),
        declarations: true,
        more: false,
    });
    let mut effects = c.handle(
        Input::Request {
            client: coordinator::ClientId(1),
            request: declarations,
        },
        now,
    );
    while let Some(effect) = effects.pop() {
        let next = match effect {
            Effect::Send { order, .. } => Input::WorkerAnswer {
                worker: 0,
                order,
                answer: Answer::Done,
            },
            Effect::AppendJournal { job, .. } => Input::Journaled { job, saved: Ok(()) },
            _ => continue,
        };
        effects.extend(c.handle(next, now));
    }
    assert!(c.state().cluster("a").is_none(), "declared empty");
    assert!(
        c.state().cluster("dir").is_none(),
        "excluded: its listener is not declared"
    );
    assert!(
        !partial(&reload(&mut c, text(9004), now)),
        "the last text is not the file's any more"
    );
    assert!(c.state().cluster("a").is_some() && c.state().cluster("dir").is_some());
}

#[test]
fn a_batch_of_declarations_becomes_the_state() {
    use command::proto::{self, request::RequestType};
    let now = Instant::now();
    let mut c = coordinator_on("", now);
    let listener = proto::Request {
        request_type: Some(RequestType::AddTcpListener(proto::TcpListenerConfig {
            address: "127.0.0.1:8443".into(),
            active: Some(false),
            ..Default::default()
        })),
    };
    let declarations = coordinator::Request::BatchPart(proto::ChangeBatch {
        requests: vec![listener],
        declarations: true,
        more: false,
    });
    let effects = c.handle(
        Input::Request {
            client: coordinator::ClientId(1),
            request: declarations,
        },
        now,
    );
    let sent = effects
        .iter()
        .any(|e| matches!(e, Effect::Send { what: Order::Apply(g), .. } if g.len() == 1));
    assert!(sent, "{effects:?}");
}
