//! Telling systemd (a `Type=notify` unit) where the proxy is in its life,
//! through the `sd-notify` crate.
//!
//! Owns: the moments the proxy notifies: `READY=1` once the listeners are
//! bound and the command socket answers, `RELOADING=1` (with the monotonic
//! time systemd 253 and later want) as a SIGHUP reload starts and `READY=1`
//! when it is done, `STOPPING=1` when a stop starts, each with a `STATUS=`
//! line an operator sees in `systemctl status`; and `MAINPID=` when an
//! upgrade hands the service to a new process. Must never: fail or block
//! the proxy: without `NOTIFY_SOCKET` nothing is sent, and a failed send is
//! logged at debug level only.

use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(states) {
        log::debug!("sd_notify failed: {error}");
    }
}

/// The proxy serves: its listeners are bound.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A reload of the config file starts.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(error) => {
            log::debug!("no monotonic clock for RELOADING=1: {error}");
            send(&[NotifyState::Reloading]);
        }
    }
}

/// An upgrade's successor, `pid`, is now the service's main process
/// (accepted from the old main process under `NotifyAccess=main`).
pub fn main_pid(pid: u32) {
    send(&[NotifyState::MainPid(pid)]);
}

/// A stop starts.
pub fn stopping(status: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(status)]);
}
