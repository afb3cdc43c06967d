//! Telling a peer goodbye on its socket: a rejected client's alert record
//! or reset, and the reset a piped session passes on when the other side
//! reset.
//!
//! Owns: performing the step's `Farewell` on the front socket before the
//! session closes, and arming a socket so that its close is a reset
//! ([`reset`]: `SO_LINGER` 0). An alert is written once, without waiting (a
//! client that cannot take 7 bytes gets the close alone), then a FIN
//! follows it, and what the client still had in flight is read and dropped
//! so that the close is a FIN, not a reset that could discard the alert
//! before the client reads it. Must never: block, wait on the peer, or
//! write an alert to a session that reached a backend (a reject comes
//! before any).

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::time::Duration;

use log::debug;
use mio::net::TcpStream;
use preread_core::step::Farewell;
use socket2::SockRef;

/// At most this many unread bytes are drained after an alert: a client
/// that keeps sending is not worth more, and gets the close as it comes.
const DRAIN_LIMIT: usize = 64 * 1024;

/// Performs `farewell` on the client's socket; the caller closes it next.
pub(super) fn say(front: &mut TcpStream, farewell: Farewell) {
    match farewell {
        Farewell::Fin => {}
        Farewell::Reset => reset(front),
        Farewell::Alert(record) => {
            match front.write(&record) {
                Ok(n) if n == record.len() => {}
                Ok(n) => debug!("the client took {n} of the alert's 7 bytes"),
                Err(e) => debug!("the alert was not written: {e}"),
            }
            let _ = front.shutdown(Shutdown::Write);
            drain(front);
        }
    }
}

/// Makes the coming close of `stream` a reset (`SO_LINGER` 0), not a FIN:
/// what it still had to send is dropped.
pub(super) fn reset(stream: &TcpStream) {
    if let Err(e) = SockRef::from(stream).set_linger(Some(Duration::ZERO)) {
        debug!("cannot set SO_LINGER 0 for a reset: {e}");
    }
}

/// Reads and drops what the client already sent, up to [`DRAIN_LIMIT`].
fn drain(front: &mut TcpStream) {
    let mut scratch = [0u8; 4096];
    let mut drained = 0;
    while drained < DRAIN_LIMIT {
        match front.read(&mut scratch) {
            Ok(0) => return,
            Ok(n) => drained += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
