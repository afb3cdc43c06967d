//! The etcd source's thread: one read of `<prefix>routes/`, then one watch
//! from the revision after it; each watch response reported as one change
//! at its revision; the replica's status key kept under a lease.
//!
//! Owns: the thread's current-thread tokio runtime, the session with one
//! member at a time (the members tried in turn, with a backoff from
//! [`FIRST_RETRY`] to [`MAX_RETRY`] between rounds), the resync when etcd
//! cancels the watch (a compaction past its revision: the prefix read
//! again, only the difference reported), the status key (written when what
//! the replica serves changes, and when a session starts under a new
//! lease; the lease kept alive every [`KEEPALIVE`]), and the gauges the
//! metrics read. Must never: poll the store (the watch wakes it), report
//! a revision it has not read the changes of (the watch resumes after the
//! last one reported, so a skipped revision is a change lost for good),
//! or move that revision on a timeout or an error.

mod book;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use command::config::EtcdSettings;
use command::sources::SourceKind;
use command::sources::etcd::{ExcludedKey, ReplicaStatus};
use etcdv3client::pb;
use tokio::sync::mpsc::UnboundedReceiver;

use self::book::{Book, Delta, Event, Read};
use super::{Reporter, SourceEvent};
use crate::etcd::{Connection, EtcdError, Kv, REQUEST_TIMEOUT};

/// The first wait before the members are tried again.
const FIRST_RETRY: Duration = Duration::from_millis(100);

/// The longest wait between two rounds of the members.
const MAX_RETRY: Duration = Duration::from_secs(2);

/// The status key's lease: a replica that stops (or is cut from the
/// store) loses its status key this long after its last keepalive.
const LEASE_TTL: i64 = 10;

/// How often the lease is kept alive.
const KEEPALIVE: Duration = Duration::from_secs(3);

/// What the metrics read of the source.
#[derive(Debug, Default)]
pub struct EtcdGauges {
    /// The store revision the routes are served at (0: none yet).
    pub revision: AtomicI64,
    /// A member answers the watch.
    pub connected: AtomicBool,
}

/// What the proxy serves of the source, once committed.
#[derive(Debug, Clone)]
pub struct Served {
    pub revision: i64,
    pub generation: u64,
    pub excluded: Vec<ExcludedKey>,
}

/// Why a session ended.
enum Ended {
    Stop,
    Lost(EtcdError),
}

impl From<EtcdError> for Ended {
    fn from(why: EtcdError) -> Self {
        Self::Lost(why)
    }
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The status key and what it holds.
struct Status {
    key: Vec<u8>,
    /// What the proxy serves now.
    serving: Option<ReplicaStatus>,
    /// What the key holds, under which lease.
    written: Option<(ReplicaStatus, i64)>,
}

impl Status {
    fn serve(&mut self, served: Served) {
        self.serving = Some(ReplicaStatus {
            revision: served.revision,
            generation: served.generation,
            excluded: served.excluded,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            at: unix_ms(SystemTime::now()),
        });
    }

    /// Writes the status when the key does not hold it yet.
    async fn flush(&mut self, connection: &mut Connection, lease: i64) -> Result<(), EtcdError> {
        let Some(serving) = &self.serving else {
            return Ok(());
        };
        let fresh = self
            .written
            .as_ref()
            .is_none_or(|(written, under)| *under != lease || serving.differs_from(written));
        if !fresh {
            return Ok(());
        }
        let value = serde_json::to_vec(serving).unwrap_or_default();
        connection.put(&self.key, value, lease).await?;
        self.written = Some((serving.clone(), lease));
        Ok(())
    }
}

/// The source: its settings, what it reported, and its channels.
struct Source {
    settings: EtcdSettings,
    reporter: Reporter,
    served: UnboundedReceiver<Served>,
    gauges: Arc<EtcdGauges>,
    book: Book,
    status: Status,
    /// When a member last answered.
    contact: Option<Instant>,
}

/// Runs the source until the proxy stops it (drops the sender of
/// `served`).
pub(super) fn run(
    settings: EtcdSettings,
    replica: &str,
    reporter: &Reporter,
    served: UnboundedReceiver<Served>,
    gauges: Arc<EtcdGauges>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(why) => {
            reporter.report(SourceEvent::Failed {
                kind: SourceKind::Etcd,
                error: format!("etcd source: cannot start its runtime: {why}"),
            });
            return;
        }
    };
    let status = Status {
        key: format!("{}{replica}", settings.status_prefix()).into_bytes(),
        serving: None,
        written: None,
    };
    let mut source = Source {
        book: Book::new(settings.routes_prefix()),
        settings,
        reporter: reporter.clone(),
        served,
        gauges,
        status,
        contact: None,
    };
    runtime.block_on(source.run());
}

impl Source {
    async fn run(&mut self) {
        let mut start = 0;
        let mut retry = FIRST_RETRY;
        loop {
            let why = match self.session(&mut start, &mut retry).await {
                Ended::Stop => return,
                Ended::Lost(why) => why,
            };
            self.gauges.connected.store(false, Ordering::Relaxed);
            let stale = match (self.book.revision(), self.contact) {
                (Some(revision), Some(contact)) => format!(
                    "; serving revision {revision}, last heard from etcd {} s ago",
                    contact.elapsed().as_secs()
                ),
                _ => "; serving the state it started with (saved state and journal, or the \
                      config file): no revision read yet"
                    .to_owned(),
            };
            let failed = SourceEvent::Failed {
                kind: SourceKind::Etcd,
                error: format!("{why}{stale}"),
            };
            if !self.reporter.report(failed) {
                return;
            }
            start = (start + 1) % self.settings.endpoints.len().max(1);
            let pause = tokio::time::sleep(retry);
            tokio::pin!(pause);
            loop {
                tokio::select! {
                    () = &mut pause => break,
                    served = self.served.recv() => match served {
                        Some(served) => self.serve(served),
                        None => return,
                    },
                }
            }
            retry = (retry * 2).min(MAX_RETRY);
        }
    }

    fn serve(&mut self, served: Served) {
        self.gauges
            .revision
            .store(served.revision, Ordering::Relaxed);
        self.status.serve(served);
    }

    fn report(&self, delta: Delta) -> Result<(), Ended> {
        let changed = SourceEvent::Changed {
            kind: SourceKind::Etcd,
            revision: delta.revision,
            put: delta.put,
            deleted: delta.deleted,
            at: SystemTime::now(),
        };
        if self.reporter.report(changed) {
            Ok(())
        } else {
            Err(Ended::Stop)
        }
    }

    /// Reads the whole prefix and reports what differs from the book.
    async fn resync(&mut self, connection: &mut Connection) -> Result<(), Ended> {
        let began = Instant::now();
        let prefix = self.settings.routes_prefix();
        let (revision, keys) = connection.read_prefix(prefix.as_bytes()).await?;
        let reads: Vec<Read<'_>> = keys.iter().map(read).collect();
        let first = self.book.revision().is_none();
        let delta = self.book.resync(revision, &reads);
        log::info!(
            "etcd source {}: {} route key(s) read at revision {revision} in {} ms ({} \
             changed, {} gone){}",
            connection.endpoint(),
            self.book.len(),
            began.elapsed().as_millis(),
            delta.put.len(),
            delta.deleted.len(),
            if first { "" } else { ": resynchronized" }
        );
        self.report(delta)
    }

    /// One session with a member: read or resume, watch, keep the status.
    async fn session(&mut self, start: &mut usize, retry: &mut Duration) -> Ended {
        match self.follow(start, retry).await {
            Ok(never) => match never {},
            Err(ended) => ended,
        }
    }

    async fn follow(
        &mut self,
        start: &mut usize,
        retry: &mut Duration,
    ) -> Result<std::convert::Infallible, Ended> {
        let (mut connection, index) = Connection::any(&self.settings, *start).await?;
        *start = index;
        if self.book.revision().is_none() {
            self.resync(&mut connection).await?;
        }
        let mut watcher = self.watch(&mut connection).await?;
        let lease = connection.grant(LEASE_TTL).await?;
        let endpoint = connection.endpoint().to_owned();
        let mut keepalive = bounded_keepalive(&mut connection, lease).await?;
        self.contact = Some(Instant::now());
        self.gauges.connected.store(true, Ordering::Relaxed);
        *retry = FIRST_RETRY;
        log::info!(
            "etcd source: watching {} on {endpoint} from revision {}",
            self.settings.routes_prefix(),
            self.book.watch_from()
        );
        self.status.flush(&mut connection, lease).await?;
        let mut tick = tokio::time::interval(KEEPALIVE);
        loop {
            tokio::select! {
                message = watcher.message() => {
                    let response = match message {
                        Ok(Some(response)) => response,
                        Ok(None) => {
                            return Err(Ended::Lost(EtcdError::WatchEnded {
                                endpoint,
                                why: "the member closed the stream".to_owned(),
                            }));
                        }
                        Err(why) => {
                            return Err(Ended::Lost(EtcdError::WatchEnded {
                                endpoint,
                                why: why.to_string(),
                            }));
                        }
                    };
                    self.contact = Some(Instant::now());
                    if response.canceled {
                        if response.compact_revision == 0 {
                            return Err(Ended::Lost(EtcdError::WatchEnded {
                                endpoint,
                                why: format!("canceled: {}", response.cancel_reason),
                            }));
                        }
                        log::warn!(
                            "etcd source {endpoint}: the store was compacted at revision {} past \
                             revision {} this replica watched from: reading the routes again \
                             (only the difference is applied)",
                            response.compact_revision,
                            self.book.watch_from()
                        );
                        self.resync(&mut connection).await?;
                        watcher = self.watch(&mut connection).await?;
                        continue;
                    }
                    if response.events.is_empty() {
                        continue;
                    }
                    let revision = response
                        .events
                        .iter()
                        .filter_map(|e| e.kv.as_ref().map(|kv| kv.mod_revision))
                        .max()
                        .unwrap_or_else(|| response.header.as_ref().map_or(0, |h| h.revision));
                    let events: Vec<Event<'_>> = response.events.iter().filter_map(event).collect();
                    let delta = self.book.fold(revision, &events);
                    self.report(delta)?;
                }
                served = self.served.recv() => {
                    let Some(served) = served else { return Err(Ended::Stop) };
                    self.serve(served);
                    self.status.flush(&mut connection, lease).await?;
                }
                answer = keepalive.message() => {
                    match answer {
                        Ok(Some(answer)) if answer.ttl > 0 => self.contact = Some(Instant::now()),
                        Ok(Some(_)) => {
                            return Err(Ended::Lost(EtcdError::WatchEnded {
                                endpoint,
                                why: "the status key's lease expired".to_owned(),
                            }));
                        }
                        Ok(None) | Err(_) => {
                            return Err(Ended::Lost(EtcdError::WatchEnded {
                                endpoint,
                                why: "the lease keepalive stream ended".to_owned(),
                            }));
                        }
                    }
                }
                _ = tick.tick() => {
                    if keepalive.keep_alive().await.is_err() {
                        return Err(Ended::Lost(EtcdError::WatchEnded {
                            endpoint,
                            why: "the lease keepalive stream ended".to_owned(),
                        }));
                    }
                }
            }
        }
    }

    /// A watch of the route keys from the revision after the book's.
    async fn watch(&self, connection: &mut Connection) -> Result<etcdv3client::Watcher, Ended> {
        let prefix = self.settings.routes_prefix();
        let endpoint = connection.endpoint().to_owned();
        let mut create = connection
            .client
            .watch
            .do_watch(prefix.clone())
            .with_prefix();
        create.request.start_revision = self.book.watch_from();
        match tokio::time::timeout(REQUEST_TIMEOUT, create).await {
            Ok(Ok(watcher)) => Ok(watcher),
            Ok(Err(why)) => Err(Ended::Lost(EtcdError::WatchEnded {
                endpoint,
                why: why.to_string(),
            })),
            Err(_) => Err(Ended::Lost(EtcdError::timeout(&endpoint, "watch"))),
        }
    }
}

async fn bounded_keepalive(
    connection: &mut Connection,
    lease: i64,
) -> Result<etcdv3client::LeaseKeepAliver, EtcdError> {
    let endpoint = connection.endpoint().to_owned();
    match tokio::time::timeout(REQUEST_TIMEOUT, connection.client.lease.keep_alive(lease)).await {
        Ok(Ok(keepalive)) => Ok(keepalive),
        Ok(Err(why)) => Err(EtcdError::request(&endpoint, "lease keepalive", &why)),
        Err(_) => Err(EtcdError::timeout(&endpoint, "lease keepalive")),
    }
}

fn read(kv: &Kv) -> Read<'_> {
    Read {
        key: &kv.key,
        value: &kv.value,
        mod_revision: kv.mod_revision,
    }
}

fn event(event: &pb::Event) -> Option<Event<'_>> {
    let kv = event.kv.as_ref()?;
    if event.r#type == pb::event::EventType::Delete as i32 {
        Some(Event::Delete { key: &kv.key })
    } else {
        Some(Event::Put(Read {
            key: &kv.key,
            value: &kv.value,
            mod_revision: kv.mod_revision,
        }))
    }
}
