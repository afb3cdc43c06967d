//! `preread upgrade`, as a job: the workers export their listening
//! sockets, the shell hands them and the state over to the successor, and
//! this process stops softly once the successor serves.
//!
//! Owns: the upgrade's place in the job queue (it waits for the change
//! that runs, and the changes that come wait for it) and what its client
//! hears. Must never: let a change run while the handover runs, or stop
//! accepting before the successor said it serves.

use std::sync::Arc;
use std::time::Instant;

use log::Level;

use super::jobs::{Phase, Running};
use super::{Coordinator, Purpose, StopKind};
use crate::effect::{Effect, log};
use crate::input::{JobId, UpgradeFailure, UpgradeRequest};
use crate::orders::{Answer, Order};
use crate::pending::Gathered;
use crate::responses::ok;
use crate::turns::Ticket;

impl Coordinator {
    /// The upgrade's turn: every worker exports its listening sockets.
    pub(crate) fn start_export(
        &mut self,
        id: JobId,
        client: Option<Ticket>,
        request: UpgradeRequest,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let timeout = self.settings.order_timeout;
        self.broadcast(
            Order::ExportListeners,
            Purpose::Export,
            None,
            timeout,
            now,
            out,
        );
        let phase = Phase::Exporting(request);
        self.jobs.running = Some(Running { id, client, phase });
    }

    /// The workers exported: the shell hands over, or the upgrade fails.
    pub(crate) fn exported(
        &mut self,
        gathered: Gathered<Purpose>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let Some(Running {
            id,
            client,
            phase: Phase::Exporting(request),
        }) = self.jobs.running.take()
        else {
            log(out, Level::Error, "exported listeners for no upgrade");
            return;
        };
        let mut exported = Vec::new();
        let mut why = gathered
            .first_failure()
            .map(|(_, code, message)| format!("{code}: {message}"));
        for (worker, answer) in gathered.answers {
            match answer {
                Answer::Listeners(sockets) => exported.push((worker, Arc::clone(&sockets))),
                _ => {
                    why.get_or_insert_with(|| format!("worker {worker} answered something else"));
                }
            }
        }
        if let Some(why) = why {
            self.resume(now, out);
            let answer = self.upgrade_refusal(why, out);
            if let Some(ticket) = client {
                self.answer(ticket, answer, out);
            }
            return;
        }
        out.push(Effect::StartUpgrade {
            job: id,
            request,
            exported,
        });
        let phase = Phase::HandingOver;
        self.jobs.running = Some(Running { id, client, phase });
    }

    /// The handover ended: this process stops softly if the successor
    /// took over, and keeps serving otherwise.
    pub(crate) fn upgrade_finished(
        &mut self,
        job: JobId,
        outcome: Result<u32, UpgradeFailure>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let handing = |p: &Phase| matches!(p, Phase::HandingOver);
        let Some(run) = self.jobs.take_running(job, handing) else {
            log(
                out,
                Level::Error,
                format!("a handover's end for job {job:?}, not running"),
            );
            return;
        };
        let answer = match outcome {
            Ok(pid) => {
                let own = self.settings.pid;
                let grace = self.settings.soft_stop_grace.as_secs();
                log(
                    out,
                    Level::Info,
                    format!(
                        "upgrade: pid {pid} serves the listeners and the command socket; pid \
                         {own} stops accepting and drains its sessions for up to {grace} s"
                    ),
                );
                let answer = ok(format!(
                    "upgraded: pid {pid} took over; pid {own} drains its sessions for up to \
                     {grace} s, then exits"
                ));
                if let Some(ticket) = run.client {
                    self.answer(ticket, answer, out);
                }
                self.start_stop(StopKind::Soft, false, now, out);
                return;
            }
            Err(why) => {
                self.resume(now, out);
                self.upgrade_refusal(why, out)
            }
        };
        if let Some(ticket) = run.client {
            self.answer(ticket, answer, out);
        }
    }

    /// The upgrade failed: the workers read the QUIC sockets and flows
    /// they exported again (the datagrams that came meanwhile waited in
    /// the sockets).
    fn resume(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let timeout = self.settings.order_timeout;
        self.broadcast(Order::Resume, Purpose::Resume, None, timeout, now, out);
    }
}
