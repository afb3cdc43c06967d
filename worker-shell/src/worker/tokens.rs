//! The worker's poll tokens.
//!
//! Owns: the token layout: a session's front socket is `2k`, its backend
//! `2k+1`, a listener `LISTENER_BASE + i`, and the waker `usize::MAX`;
//! QUIC sockets sit between the sessions and the TCP listeners
//! (`QUIC_FLOW_BASE`, `QUIC_LISTENER_BASE`). Must never: let two kinds of
//! token overlap.

use mio::Token;

/// The token of the worker's waker (orders from the main thread).
pub(super) const WAKER_TOKEN: Token = Token(usize::MAX);

/// Listener tokens start here; session tokens (`2k`, `2k+1`) stay below.
pub(super) const LISTENER_BASE: usize = 1 << 48;

/// QUIC listener sockets are `QUIC_LISTENER_BASE + i`, below the TCP
/// listeners.
pub(super) const QUIC_LISTENER_BASE: usize = 1 << 47;

/// A QUIC flow's backend socket is `QUIC_FLOW_BASE + flow`, below the
/// QUIC listeners and above every session token.
pub(super) const QUIC_FLOW_BASE: usize = 1 << 46;

const _: () = assert!(WAKER_TOKEN.0 > LISTENER_BASE, "the waker is no listener");

/// Which socket of a session an event is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// The client's socket.
    Front,
    /// The backend's socket.
    Back,
}

/// The token of session `key`'s socket on `side`.
pub(super) fn session_token(key: usize, side: Side) -> Token {
    match side {
        Side::Front => Token(key * 2),
        Side::Back => Token(key * 2 + 1),
    }
}

/// What a token below [`LISTENER_BASE`] names: a session and a side.
pub(super) fn session_of(token: usize) -> (usize, Side) {
    let side = if token % 2 == 0 {
        Side::Front
    } else {
        Side::Back
    };
    (token / 2, side)
}

#[cfg(test)]
mod tests {
    use super::{LISTENER_BASE, Side, session_of, session_token};

    #[test]
    fn session_tokens_round_trip_and_stay_below_listeners() {
        for key in [0, 1, 7, 1 << 20] {
            for side in [Side::Front, Side::Back] {
                let token = session_token(key, side).0;
                assert!(token < LISTENER_BASE);
                assert_eq!(session_of(token), (key, side));
            }
        }
    }
}
