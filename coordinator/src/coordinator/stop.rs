//! Stops: the soft stop that lets sessions finish within the grace, and
//! the hard stop that closes everything.
//!
//! Owns: whether a stop is under way and how strong, the stop order with
//! its deadline (the grace on top of the order timeout for a soft stop),
//! and the refusal of the queued jobs. Must never: order a weaker stop
//! over a stronger one, or wait on a soft stop's answers once a hard stop
//! was ordered (workers may exit without finishing it).

use std::time::Instant;

use command::proto;
use log::Level;

use super::{Coordinator, Purpose, StopKind};
use crate::effect::{Effect, Notice, log};
use crate::orders::Order;

impl Coordinator {
    /// Orders a stop, unless one as strong is already under way; tells
    /// systemd when `notify` (not after an upgrade, whose service goes on
    /// in the successor). Returns what to tell the client.
    pub(crate) fn start_stop(
        &mut self,
        kind: StopKind,
        notify: bool,
        now: Instant,
        out: &mut Vec<Effect>,
    ) -> String {
        if notify && (self.stopping.is_none() || kind == StopKind::Hard) {
            out.push(Effect::Notify(Notice::Stopping(format!("{kind:?} stop"))));
        }
        match (self.stopping, kind) {
            (Some(StopKind::Hard), _) | (Some(StopKind::Soft), StopKind::Soft) => {
                return "already stopping".to_owned();
            }
            _ => {}
        }
        self.stopping = Some(kind);
        self.fail_queued(out);
        if kind == StopKind::Hard {
            self.pending
                .cancel(|p| matches!(p, Purpose::Stop(StopKind::Soft)));
        }
        let grace = self.settings.soft_stop_grace;
        let (order, timeout) = match kind {
            StopKind::Soft => (
                Order::SoftStop {
                    grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                },
                grace.saturating_add(self.settings.order_timeout),
            ),
            StopKind::Hard => (Order::HardStop, self.settings.order_timeout),
        };
        self.broadcast(order, Purpose::Stop(kind), None, timeout, now, out);
        match kind {
            StopKind::Soft => format!(
                "soft stop ordered to {} worker(s): sessions get up to {} s to finish",
                self.workers.len(),
                grace.as_secs()
            ),
            StopKind::Hard => format!("hard stop ordered to {} worker(s)", self.workers.len()),
        }
    }

    /// Logs why an upgrade did not happen; its answer.
    pub(crate) fn upgrade_refusal(
        &self,
        why: impl std::fmt::Display,
        out: &mut Vec<Effect>,
    ) -> proto::Response {
        log(
            out,
            Level::Error,
            format!("upgrade failed: {why}; this process keeps serving"),
        );
        crate::responses::failure(
            command::answer_code::AnswerCode::UpgradeFailed,
            format!("{why}; pid {} keeps serving", self.settings.pid),
        )
    }
}
