//! The Docker source's thread: follows the Engine API's container events
//! and reports the labels' fragments after every change.
//!
//! Owns: the sequence of a connection (open the event stream, then list
//! the containers, so no change falls between the two; list again after
//! every event that can change a route), the full resync on every
//! (re)connect, and the retry with backoff while Docker is unreachable
//! (each failure reported: logged and counted by the server, the last good
//! fragments kept). Must never: stop retrying while the proxy runs, or
//! report a partial list as a whole read.

use std::time::{Duration, SystemTime};

use command::sources::SourceKind;
use command::sources::labels::fragments;

use super::docker_api::{DockerApi, changes_routes};
use super::docker_error::DockerError;
use super::{Reporter, SourceEvent};

/// The first wait before reconnecting to an unreachable Docker.
const FIRST_RETRY: Duration = Duration::from_millis(100);

/// The longest wait between two attempts: a restarted dockerd is found
/// within this.
const MAX_RETRY: Duration = Duration::from_secs(2);

/// Why a connection to Docker ended.
enum Ended {
    /// The proxy stops the source.
    Stop,
    /// Docker went away, or never answered.
    Lost(DockerError),
}

/// Runs the source until the proxy stops it.
pub(super) fn run(api: &DockerApi, reporter: &Reporter) {
    let mut retry = FIRST_RETRY;
    loop {
        let why = match follow(api, reporter, &mut retry) {
            Ended::Stop => return,
            Ended::Lost(why) => why,
        };
        let error = format!("Docker at {} is unreachable: {why}", api.socket().display());
        if !reporter.report(SourceEvent::Failed {
            kind: SourceKind::Docker,
            error,
        }) {
            return;
        }
        std::thread::sleep(retry);
        retry = (retry * 2).min(MAX_RETRY);
    }
}

/// One connection: resync, then a resync per relevant event, until the
/// stream ends. A successful resync resets the backoff.
fn follow(api: &DockerApi, reporter: &Reporter, retry: &mut Duration) -> Ended {
    let mut events = match api.events() {
        Ok(events) => events,
        Err(why) => return Ended::Lost(why),
    };
    loop {
        match api.containers() {
            Ok(containers) => {
                *retry = FIRST_RETRY;
                let synced = SourceEvent::Synced {
                    kind: SourceKind::Docker,
                    fragments: fragments(&containers),
                    at: SystemTime::now(),
                };
                if !reporter.report(synced) {
                    return Ended::Stop;
                }
            }
            Err(why) => return Ended::Lost(why),
        }
        loop {
            match events.next_action() {
                Ok(action) if changes_routes(&action) => break,
                Ok(_) => {}
                Err(_) if reporter.stopped() => return Ended::Stop,
                Err(why) => return Ended::Lost(why),
            }
        }
    }
}
