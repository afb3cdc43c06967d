//! Passive health from a piped session: what the backend's first moments
//! tell of it, reported once to its instance (shared by every worker).
//!
//! Owns: [`verdict`], when a piped session has something to say (the
//! backend sent a byte: it works; it closed or reset before any while the
//! client was still there: a failure, like a refused connect), and
//! [`judge`], which reports it through the session's lease and announces a
//! transition. Must never: blame the backend for what the client did (a
//! client that closed or reset first, an idle timeout), or report a session
//! twice.

use std::time::Instant;

use super::ctx::Ctx;
use super::pipe::PipeFault;
use super::session::Piped;
use super::tokens::Side;
use crate::shared::instance::Observed;

/// What a piped session tells of its backend so far: `None` until it
/// knows. `back_read` is what was read from the backend, whether the
/// client took it yet or not; `fault` is the pipe's failure, if it failed.
pub(super) fn verdict(
    back_read: u64,
    (back_eof, front_eof): (bool, bool),
    fault: Option<&PipeFault>,
) -> Option<Observed> {
    if back_read > 0 {
        return Some(Observed::Passed);
    }
    match fault {
        Some(fault) if fault.side == Side::Back => {
            return Some(Observed::Failed(if fault.is_reset() {
                "reset the connection before sending a byte".to_owned()
            } else {
                format!("failed before sending a byte: {}", fault.error)
            }));
        }
        Some(_) => return None,
        None => {}
    }
    (back_eof && !front_eof)
        .then(|| Observed::Failed("closed the connection before sending a byte".to_owned()))
}

/// Reports a piped session's verdict on its backend, once it has one.
pub(super) fn judge(ctx: &mut Ctx, piped: &mut Piped, fault: Option<&PipeFault>, now: Instant) {
    if piped.backend_judged {
        return;
    }
    let pipe = &piped.pipe;
    let eofs = (pipe.down.eof, pipe.up.eof);
    let Some(observed) = verdict(pipe.back.read, eofs, fault) else {
        return;
    };
    piped.backend_judged = true;
    let checks = (ctx.runtime.clusters.get(&piped.target.route.cluster))
        .and_then(|backends| backends.checks());
    let lease = &mut piped.lease;
    if let Some(transition) = lease.report(observed, now, checks) {
        ctx.shared
            .counters
            .announce(lease.instance(), &transition, "its clients' connections");
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::verdict;
    use crate::shared::instance::Observed;
    use crate::worker::pipe::PipeFault;
    use crate::worker::tokens::Side;

    fn fault(side: Side, kind: io::ErrorKind) -> PipeFault {
        PipeFault {
            side,
            error: io::Error::from(kind),
        }
    }

    fn failed(observed: Option<Observed>) -> bool {
        matches!(observed, Some(Observed::Failed(_)))
    }

    #[test]
    fn a_byte_from_the_backend_passes_even_with_a_reset_after_it() {
        assert_eq!(verdict(1, (true, false), None), Some(Observed::Passed));
        let reset = fault(Side::Back, io::ErrorKind::ConnectionReset);
        assert_eq!(
            verdict(7, (false, false), Some(&reset)),
            Some(Observed::Passed)
        );
    }

    #[test]
    fn a_backend_that_quits_before_a_byte_fails() {
        assert!(failed(verdict(0, (true, false), None)), "closed first");
        let reset = fault(Side::Back, io::ErrorKind::ConnectionReset);
        assert_eq!(
            verdict(0, (false, false), Some(&reset)),
            Some(Observed::Failed(
                "reset the connection before sending a byte".into()
            ))
        );
        let other = fault(Side::Back, io::ErrorKind::TimedOut);
        assert!(failed(verdict(0, (false, false), Some(&other))));
    }

    #[test]
    fn nothing_is_said_while_waiting_or_when_the_client_went_first() {
        assert_eq!(verdict(0, (false, false), None), None, "still waiting");
        assert_eq!(
            verdict(0, (true, true), None),
            None,
            "the client closed first"
        );
        let client = fault(Side::Front, io::ErrorKind::ConnectionReset);
        assert_eq!(verdict(0, (false, false), Some(&client)), None);
    }
}
