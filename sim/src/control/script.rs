//! What one seed of the control-plane simulation plays: the workers' and
//! the clients' behaviour, the shell's own events (SIGHUP, route-source
//! reports, stop signals), and the texts and states the simulated files
//! hold, all drawn from the seed.
//!
//! Owns: [`Script`] and its generator [`script`]. Must never: decide
//! anything the coordinator decides (what a request plans to, whether it
//! commits): a script is only what the world does and asks.

use command::proto::{self, request::RequestType};
use command::sources::{Declared, Fragment, FragmentBody, FragmentId, SourceKind};
use coordinator::{Query, Request, StopKind, UpgradeRequest};
use preread_core::rng::Rng;

/// Listener addresses the requests and the texts pick from.
pub(crate) const LISTENERS: [&str; 3] = ["127.0.0.1:8440", "127.0.0.1:8441", "127.0.0.1:8442"];
const CLUSTERS: [&str; 4] = ["alpha", "bravo", "charlie", "delta"];
const NAMES: [&str; 4] = [
    "a.example.com",
    "b.example.com",
    "*.example.com",
    "c.example.net",
];
/// The config file the proxy started from (what SIGHUP reloads).
pub(crate) const CONFIG_PATH: &str = "/sim/preread.toml";

/// How one simulated worker behaves, in simulated milliseconds.
#[derive(Debug, Clone)]
pub(crate) struct WorkerPlan {
    /// The longest it takes to take an order from its channel.
    pub(crate) process_ms: u64,
    /// The longest its answer takes to reach the main thread.
    pub(crate) answer_ms: u64,
    /// A tenth of its answers take past the order timeout.
    pub(crate) slow: bool,
    /// It refuses some new generations (as a bind that fails).
    pub(crate) refuses: bool,
    /// Its thread ends at this time, orders unanswered.
    pub(crate) dies_at: Option<u64>,
    /// It takes no order from `.0` to `.1` (then works through its queue).
    pub(crate) hangs: Option<(u64, u64)>,
}

/// What a client's request must be answered with, so that the answers can
/// be told apart enough to see their order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expect {
    /// `Effect::Serve` of this very request.
    Serve(Box<proto::Request>),
    /// `Effect::Report` of this very query, or a failure.
    Report(Query),
    /// `Effect::Answer`: when OK, its message holds one of `ok`; a failure
    /// is allowed only when `may_fail`, and then holds one of `failed`
    /// (any message when empty).
    Answer {
        ok: Vec<String>,
        may_fail: bool,
        failed: Vec<String>,
    },
}

fn answer(ok: &[&str], may_fail: bool, failed: &[&str]) -> Expect {
    let owned = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
    Expect::Answer {
        ok: owned(ok),
        may_fail,
        failed: owned(failed),
    }
}

/// One thing a client does.
#[derive(Debug, Clone)]
pub(crate) enum Act {
    /// Sends a request, which must be answered as `.1` says.
    Ask(Box<(Request, Expect)>),
    /// Closes its connection.
    Leave,
}

/// What the shell itself feeds the coordinator.
#[derive(Debug, Clone)]
pub(crate) enum ShellAct {
    Hangup,
    Synced(Vec<Fragment>),
    SourceFailed,
    Stop(StopKind),
}

/// A state file a `state load` reads, or `None` for a missing one.
pub(crate) type StateFile = Option<Vec<proto::Request>>;

/// Everything one seed plays. See the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct Script {
    pub(crate) workers: Vec<WorkerPlan>,
    /// Each client's acts, with their times.
    pub(crate) clients: Vec<Vec<(u64, Act)>>,
    pub(crate) shell: Vec<(u64, ShellAct)>,
    /// The config text the proxy booted from.
    pub(crate) boot_text: String,
    /// The texts the config file holds at each later read, in turn
    /// (`None`: unreadable).
    pub(crate) later_texts: Vec<Option<String>>,
    /// What each `state load` reads, in turn.
    pub(crate) state_files: Vec<StateFile>,
    /// A directory route source is configured.
    pub(crate) sources: bool,
    /// An address another process listens on.
    pub(crate) taken: Option<&'static str>,
    /// Whether each upgrade's successor takes over, in turn.
    pub(crate) upgrades_succeed: Vec<bool>,
}

impl Script {
    /// Whether `worker` never dies.
    pub(crate) fn lives_on(&self, worker: coordinator::WorkerId) -> bool {
        usize::try_from(worker)
            .ok()
            .and_then(|w| self.workers.get(w))
            .is_some_and(|plan| plan.dies_at.is_none())
    }

    /// Whether `client` never leaves.
    pub(crate) fn stays(&self, client: u64) -> bool {
        usize::try_from(client)
            .ok()
            .and_then(|c| self.clients.get(c))
            .is_some_and(|acts| !acts.iter().any(|(_, act)| matches!(act, Act::Leave)))
    }
}

fn request(kind: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(kind),
    }
}

fn backend_of(rng: &mut Rng, cluster: &str) -> proto::Backend {
    let n = rng.below(2);
    proto::Backend {
        cluster_id: cluster.to_owned(),
        backend_id: format!("{cluster}-{n}"),
        address: format!("127.0.0.1:{}", 7000 + n),
        ..Default::default()
    }
}

fn frontend_of(rng: &mut Rng, cluster: &str) -> proto::TcpFrontend {
    proto::TcpFrontend {
        cluster_id: cluster.to_owned(),
        address: (*rng.pick(&LISTENERS)).to_owned(),
        sni: Some((*rng.pick(&NAMES)).to_owned()),
        ..Default::default()
    }
}

/// One add, update, remove, activate or deactivate request on the small
/// pools: many are refused or change nothing, on purpose.
pub(crate) fn change(rng: &mut Rng) -> proto::Request {
    let address = (*rng.pick(&LISTENERS)).to_owned();
    let cluster = *rng.pick(&CLUSTERS);
    let kind = match rng.below(11) {
        0 | 1 => RequestType::AddTcpListener(proto::TcpListenerConfig {
            address,
            ..Default::default()
        }),
        2 => RequestType::RemoveListener(proto::ListenerAddress {
            address,
            protocol: None,
        }),
        3 => RequestType::DeactivateListener(proto::ListenerAddress {
            address,
            protocol: None,
        }),
        4 => RequestType::ActivateListener(proto::ListenerAddress {
            address,
            protocol: None,
        }),
        5 | 6 => RequestType::AddCluster(proto::Cluster {
            cluster_id: cluster.to_owned(),
            ..Default::default()
        }),
        7 => RequestType::RemoveCluster(proto::ClusterRef {
            cluster_id: cluster.to_owned(),
        }),
        8 => RequestType::AddTcpFrontend(frontend_of(rng, cluster)),
        9 => RequestType::RemoveTcpFrontend(frontend_of(rng, cluster)),
        _ => RequestType::AddBackend(backend_of(rng, cluster)),
    };
    request(kind)
}

/// The declarations of a random routing state, in dispatch order:
/// listeners, then each cluster with its frontends and backends.
fn declarations(rng: &mut Rng) -> Vec<proto::Request> {
    let mut out = Vec::new();
    let listeners: Vec<&str> = LISTENERS
        .iter()
        .copied()
        .filter(|_| rng.chance(60))
        .collect();
    for address in &listeners {
        out.push(request(RequestType::AddTcpListener(
            proto::TcpListenerConfig {
                address: (*address).to_owned(),
                ..Default::default()
            },
        )));
    }
    let clusters: Vec<&str> = CLUSTERS
        .iter()
        .copied()
        .filter(|_| rng.chance(50))
        .collect();
    for cluster in clusters {
        out.push(request(RequestType::AddCluster(proto::Cluster {
            cluster_id: (*cluster).to_owned(),
            ..Default::default()
        })));
        if !listeners.is_empty() && rng.chance(70) {
            let mut frontend = frontend_of(rng, cluster);
            frontend.address = (*rng.pick(&listeners)).to_owned();
            frontend.sni = Some(format!("{cluster}.example.com"));
            out.push(request(RequestType::AddTcpFrontend(frontend)));
        }
        if rng.chance(70) {
            out.push(request(RequestType::AddBackend(backend_of(rng, cluster))));
        }
    }
    out
}

/// A config text that declares a random state (one in ten has an error).
fn config_text(rng: &mut Rng) -> String {
    let mut text = String::new();
    let declared = declarations(rng);
    let mut clusters: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    for step in &declared {
        match &step.request_type {
            Some(RequestType::AddTcpListener(l)) => {
                text.push_str(&format!("[[listeners]]\naddress = \"{}\"\n\n", l.address));
            }
            Some(RequestType::AddCluster(c)) => {
                clusters.push((c.cluster_id.clone(), Vec::new(), Vec::new()));
            }
            Some(RequestType::AddTcpFrontend(f)) => {
                if let Some(last) = clusters.last_mut() {
                    let sni = f.sni.clone().unwrap_or_default();
                    last.1.push(format!(
                        "{{ address = \"{}\", sni = \"{sni}\" }}",
                        f.address
                    ));
                }
            }
            Some(RequestType::AddBackend(b)) => {
                if let Some(last) = clusters.last_mut() {
                    last.2.push(format!(
                        "{{ address = \"{}\", backend_id = \"{}\" }}",
                        b.address, b.backend_id
                    ));
                }
            }
            _ => {}
        }
    }
    for (id, frontends, backends) in clusters {
        text.push_str(&format!("[clusters.{id}]\n"));
        text.push_str(&format!("frontends = [{}]\n", frontends.join(", ")));
        text.push_str(&format!("backends = [{}]\n\n", backends.join(", ")));
    }
    if rng.chance(10) {
        text.push_str("[[listeners]]\naddress = \"not an address\"\n");
    }
    text
}

/// The fragments of the directory source: clusters of their own, some on
/// listeners the file may not declare (then excluded).
fn fragments(rng: &mut Rng) -> Vec<Fragment> {
    (0..rng.range(0, 3))
        .map(|n| {
            let cluster = format!("dir{}", rng.below(3));
            let mut frontend = frontend_of(rng, &cluster);
            frontend.sni = Some(format!("{cluster}-{n}.example.org"));
            let declared = [
                RequestType::AddCluster(proto::Cluster {
                    cluster_id: cluster.clone(),
                    ..Default::default()
                }),
                RequestType::AddTcpFrontend(frontend),
                RequestType::AddBackend(backend_of(rng, &cluster)),
            ];
            Fragment {
                id: FragmentId::new(SourceKind::Directory, format!("{cluster}.toml")),
                body: FragmentBody::Declared(
                    declared
                        .into_iter()
                        .map(|kind| Declared {
                            request: request(kind),
                            origin: format!("{cluster}.toml"),
                        })
                        .collect(),
                ),
            }
        })
        .collect()
}

/// One client request and what must answer it; `seq` makes the tokens of
/// this client's requests unique.
fn ask(rng: &mut Rng, client: usize, seq: usize, stops: bool) -> Act {
    let token = format!("c{client}r{seq}");
    let may_fail = true;
    match rng.below(100) {
        0..=39 => Act::Ask(Box::new((
            Request::Change(change(rng)),
            answer(&["applied on ", "unchanged: "], may_fail, &[]),
        ))),
        40..=51 => {
            let query = match rng.below(3) {
                0 => Query::Status,
                1 => Query::Metrics {
                    series_only: rng.chance(50),
                },
                _ => Query::Rejects(proto::QueryRejects {
                    reason: Some(token),
                    listener: None,
                }),
            };
            Act::Ask(Box::new((
                Request::Query(query.clone()),
                Expect::Report(query),
            )))
        }
        52..=66 => {
            let local = request(RequestType::SaveState(proto::SaveState { path: token }));
            Act::Ask(Box::new((
                Request::Local(local.clone()),
                Expect::Serve(Box::new(local)),
            )))
        }
        67..=76 => {
            let batch = proto::ChangeBatch {
                requests: if rng.chance(50) {
                    declarations(rng)
                } else {
                    (0..rng.range(1, 3)).map(|_| change(rng)).collect()
                },
                declarations: rng.chance(50),
                more: false,
            };
            Act::Ask(Box::new((
                Request::BatchPart(batch),
                answer(&[" applied, "], may_fail, &[]),
            )))
        }
        77..=84 => {
            let path = format!("/sim/{token}.state");
            Act::Ask(Box::new((
                Request::LoadState { path: path.clone() },
                answer(&[&path], may_fail, &[]),
            )))
        }
        85..=93 => {
            let seen = proto::ReloadFile {
                path: CONFIG_PATH.to_owned(),
                size: 0,
                crc32: 0,
            };
            Act::Ask(Box::new((
                Request::ReloadFile(seen),
                answer(&[" applied, "], may_fail, &[]),
            )))
        }
        94..=96 => Act::Ask(Box::new((
            Request::Upgrade(UpgradeRequest::default()),
            answer(&["upgraded: "], may_fail, &["keeps serving"]),
        ))),
        _ if stops => {
            let kind = if rng.chance(70) {
                StopKind::Soft
            } else {
                StopKind::Hard
            };
            Act::Ask(Box::new((
                Request::Stop(kind),
                answer(&["stop"], false, &[]),
            )))
        }
        _ => Act::Ask(Box::new((
            Request::Change(change(rng)),
            answer(&["applied on ", "unchanged: "], may_fail, &[]),
        ))),
    }
}

/// A batch sent in parts: the first parts are answered at once.
fn parts(rng: &mut Rng, at: u64, acts: &mut Vec<(u64, Act)>) {
    let count = rng.range(2, 3);
    let declarations = rng.chance(50);
    for part in 0..count {
        let batch = proto::ChangeBatch {
            requests: (0..rng.range(0, 2)).map(|_| change(rng)).collect(),
            declarations,
            more: part + 1 < count,
        };
        let expect = if batch.more {
            answer(&["part received"], true, &[])
        } else {
            answer(&[" applied, "], true, &[])
        };
        acts.push((
            at + part as u64,
            Act::Ask(Box::new((Request::BatchPart(batch), expect))),
        ));
    }
}

/// The script of `seed`.
pub(crate) fn script(seed: u64) -> Script {
    let mut rng = Rng::new(seed ^ 0xC0DE_C0DE_5EED_0001);
    let workers = (0..rng.range(1, 4))
        .map(|_| WorkerPlan {
            process_ms: rng.range_u64(0, 40),
            answer_ms: rng.range_u64(0, 120),
            slow: rng.chance(20),
            refuses: rng.chance(30),
            dies_at: rng.chance(12).then(|| rng.range_u64(0, 4_000)),
            hangs: rng.chance(12).then(|| {
                let from = rng.range_u64(0, 3_000);
                (from, from + rng.range_u64(500, 3_000))
            }),
        })
        .collect();
    let stops = rng.chance(15);
    let clients = (0..rng.range(1, 4))
        .map(|client| {
            let mut acts = Vec::new();
            let mut at = rng.range_u64(0, 300);
            for seq in 0..rng.range(2, 10) {
                at += rng.range_u64(0, 400);
                if rng.chance(8) {
                    parts(&mut rng, at, &mut acts);
                } else {
                    acts.push((at, ask(&mut rng, client, seq, stops)));
                }
            }
            if rng.chance(10) {
                // After its last request (the parts of a batch included).
                let last = acts.iter().map(|(when, _)| *when).max().unwrap_or(at);
                acts.push((last + rng.range_u64(0, 500), Act::Leave));
            }
            acts
        })
        .collect();
    let sources = rng.chance(40);
    let mut shell = Vec::new();
    for _ in 0..rng.range(0, 2) {
        shell.push((rng.range_u64(0, 4_000), ShellAct::Hangup));
    }
    if sources {
        shell.push((rng.range_u64(0, 200), ShellAct::Synced(fragments(&mut rng))));
        for _ in 0..rng.range(0, 3) {
            let act = if rng.chance(80) {
                ShellAct::Synced(fragments(&mut rng))
            } else {
                ShellAct::SourceFailed
            };
            shell.push((rng.range_u64(0, 4_000), act));
        }
    }
    if rng.chance(4) {
        let kind = if rng.chance(50) {
            StopKind::Soft
        } else {
            StopKind::Hard
        };
        shell.push((rng.range_u64(1_000, 5_000), ShellAct::Stop(kind)));
    }
    Script {
        workers,
        clients,
        shell,
        boot_text: config_text(&mut rng),
        later_texts: (0..6)
            .map(|_| rng.chance(90).then(|| config_text(&mut rng)))
            .collect(),
        state_files: (0..6)
            .map(|_| rng.chance(85).then(|| declarations(&mut rng)))
            .collect(),
        sources,
        taken: rng.chance(20).then(|| *rng.pick(&LISTENERS)),
        upgrades_succeed: (0..4).map(|_| rng.chance(50)).collect(),
    }
}
