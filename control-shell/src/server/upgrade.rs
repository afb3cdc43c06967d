//! `preread upgrade`, on the side of the running process: start the
//! successor, hand it the listening sockets and the state, and step aside
//! only once it serves.
//!
//! Owns: the old process's half of the handover, once the coordinator had
//! every worker export its listening sockets ([`Effect::StartUpgrade`]):
//! duplicating them and the metrics endpoint's, starting the new binary
//! with them inherited, sending the state, and waiting (bounded) for its
//! verdict. The coordinator then orders the soft stop that drains this
//! process's sessions while the successor accepts. Must never:
//! stop accepting before the successor said it serves; leave a failed
//! successor running; tell systemd the service stops (it does not: only
//! its main process changes).
//!
//! [`Effect::StartUpgrade`]: coordinator::Effect::StartUpgrade

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use command::proto;
use coordinator::{Listeners, UpgradeRequest};

use super::CommandServer;
use super::upgrade_error::{Unready, UpgradeError};
use crate::upgrade::handover::{self, UPGRADE_FD_ENV, Verdict};
use crate::upgrade::quic;

/// How long the successor has to take over when the request names no
/// timeout.
const DEFAULT_TAKEOVER: Duration = Duration::from_secs(30);

/// How long a successor that failed gets to exit before it is killed.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// The listening sockets the workers exported.
type Exported = [(u32, Listeners)];

impl CommandServer {
    /// Starts the successor with the sockets the workers `exported`, and
    /// hands over; its pid once it serves. While it runs (at most its
    /// timeout) the command socket answers nothing else; the workers keep
    /// serving, and the coordinator runs no change until it hears how it
    /// went.
    pub(super) fn hand_over(
        &mut self,
        request: &UpgradeRequest,
        exported: &Exported,
    ) -> Result<u32, UpgradeError> {
        let binary = match &request.binary {
            Some(binary) => binary.clone(),
            None => self.settings.exe.clone().ok_or(UpgradeError::NoBinary)?,
        };
        let takeover = request.takeover.unwrap_or(DEFAULT_TAKEOVER);
        // The successor writes the saved files next: no snapshot of ours
        // may land after its own.
        self.saved.settle();
        let sockets = duplicates(exported)?;
        let (quic, quic_fds) = quic::handover_of(exported.iter().flat_map(|(_, e)| &e.quic))
            .map_err(UpgradeError::QuicCopy)?;
        let metrics = match self.metrics.handover_copy() {
            Some(Ok(copy)) => Some(copy),
            Some(Err(error)) => return Err(UpgradeError::MetricsCopy(error)),
            None => None,
        };
        let (mut ours, theirs) = UnixStream::pair().map_err(UpgradeError::ControlSocket)?;
        for fd in sockets
            .iter()
            .chain(&metrics)
            .map(|(_, fd)| fd)
            .chain(&quic_fds)
        {
            handover::inheritable(fd).map_err(UpgradeError::PassListener)?;
        }
        handover::inheritable(&theirs).map_err(UpgradeError::PassControl)?;
        let handover = proto::Handover {
            state: self.coordinator.state().generate_requests(),
            listeners: sockets
                .iter()
                .map(|(address, fd)| proto::InheritedListener {
                    address: address.to_string(),
                    fd: fd.as_raw_fd(),
                })
                .collect(),
            generation: self.coordinator.generation(),
            metrics: metrics
                .as_ref()
                .map(|(address, fd)| proto::InheritedListener {
                    address: address.to_string(),
                    fd: fd.as_raw_fd(),
                }),
            quic: Some(quic),
        };
        let child = Command::new(&binary)
            .args(&self.settings.argv)
            .env(UPGRADE_FD_ENV, theirs.as_raw_fd().to_string())
            .stdin(Stdio::null())
            .spawn()
            .map_err(|error| UpgradeError::Start {
                binary: binary.clone(),
                error,
            })?;
        // The successor holds its own copies now; ours must go, or its exit
        // would not close the control socket.
        drop(theirs);
        drop(sockets);
        drop(metrics);
        drop(quic_fds);
        let shown = binary.display().to_string();
        log::info!(
            "upgrade: started {shown} as pid {}, handing over {} socket(s) and {} request(s)",
            child.id(),
            handover.listeners.len(),
            handover.state.len()
        );
        let sent = ours
            .set_write_timeout(Some(takeover))
            .and_then(|()| handover::send_handover(&mut ours, &handover));
        // A successor that refused early may have answered before it read
        // the handover: its verdict says more than the failed send.
        let verdict = match (handover::read_verdict(&ours, takeover), sent) {
            (Ok(Some(verdict)), _) => Ok(Some(verdict)),
            (_, Err(e)) => Err(e),
            (read, Ok(())) => read,
        };
        settle(child, &shown, verdict)
    }
}

/// Duplicates of every socket the workers exported: theirs stay with
/// them, these go to the successor.
fn duplicates(exported: &Exported) -> Result<Vec<(SocketAddr, OwnedFd)>, UpgradeError> {
    let mut sockets = Vec::new();
    for (_, listeners) in exported {
        for (address, fd) in &listeners.tcp {
            let copy = fd.try_clone().map_err(|error| UpgradeError::Duplicate {
                address: *address,
                error,
            })?;
            sockets.push((*address, copy));
        }
    }
    Ok(sockets)
}

/// What the successor's verdict (or silence) means, reaping it when it
/// failed.
fn settle(
    mut child: Child,
    binary: &str,
    verdict: io::Result<Option<Verdict>>,
) -> Result<u32, UpgradeError> {
    let pid = child.id();
    let who = format!("{binary} (pid {pid})");
    let failed = match verdict {
        Ok(Some(Verdict::Ready { pid: told })) if told == pid => return Ok(pid),
        Ok(Some(Verdict::Ready { pid: told })) => Unready::ClaimsPid(told),
        Ok(Some(Verdict::Refused(why))) => Unready::Refused(why),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            let _ = child.kill();
            let _ = child.wait();
            return Err(UpgradeError::TimedOut { who });
        }
        // No verdict: why the handover broke matters less than how the
        // successor ended, if it did.
        Ok(None) => Unready::NoVerdict,
        Err(e) => Unready::Broken(e),
    };
    Err(match reap(&mut child, Instant::now() + REAP_WAIT) {
        Some(status) => UpgradeError::Exited {
            who,
            status,
            why: failed,
        },
        None => UpgradeError::Killed { who, why: failed },
    })
}

/// Waits until `until` for the child to exit, then kills it. Its status
/// when it exited by itself.
fn reap(child: &mut Child, until: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => break,
        }
    }
    if let Err(e) = child.kill() {
        log::warn!("upgrade: cannot kill pid {}: {e}", child.id());
    }
    let _ = child.wait();
    None
}
