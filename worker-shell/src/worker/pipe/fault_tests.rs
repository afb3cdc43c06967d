//! Which side a failed pipe blames, against real loopback sockets: a peer
//! that resets is named, so that its reset can be passed on.

use std::thread;
use std::time::{Duration, Instant};

use super::PipeStep;
use super::tests::{BOUND, pair, session, step};
use crate::worker::io::Ready;
use crate::worker::pool::BufferPool;
use crate::worker::tokens::Side;

const BOTH: Ready = Ready {
    readable: true,
    writable: true,
    closing: false,
};

#[test]
fn a_reset_is_the_fault_of_the_side_that_reset_copying_or_splicing() {
    for splice in [false, true] {
        for side in [Side::Front, Side::Back] {
            let (client, front) = pair();
            let (server, back) = pair();
            let mut session = session(front, back, splice);
            let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
            let (gone, _kept) = match side {
                Side::Front => (client, server),
                Side::Back => (server, client),
            };
            socket2::SockRef::from(&gone)
                .set_linger(Some(Duration::ZERO))
                .expect("SO_LINGER 0");
            drop(gone);
            let deadline = Instant::now() + BOUND;
            let fault = loop {
                // As a poll would report the reset: both sides ready.
                (session.front.ready, session.pipe.back.ready) = (BOTH, BOTH);
                match step(&mut session, &mut pool).step {
                    PipeStep::Failed(fault) => break fault,
                    other => assert!(Instant::now() < deadline, "no failure: {other:?}"),
                }
                thread::sleep(Duration::from_millis(1));
            };
            assert!(fault.is_reset(), "splice {splice}, {side:?}: {fault}");
            assert_eq!(fault.side, side, "splice {splice}: {fault}");
        }
    }
}
