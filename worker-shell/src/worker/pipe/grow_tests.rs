//! Growing a bulk direction's kernel pipe, against real loopback sockets:
//! a bulk transfer grows its pipe within the budget and holds its slot
//! until the session ends; a short one, or one past the budget, keeps the
//! kernel's pipe; every byte arrives either way.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::tests::{Ended, pair, pattern, read_all, run_bulk, session, write_all};
use super::{Bulk, Growth};
use crate::shared::admission::Slots;
use crate::worker::pool::BufferPool;

const MIB: usize = 1 << 20;

/// `len` bytes from the client to the backend, spliced from the first
/// byte, the backend reading late so that the pipe fills first; the
/// backend answers 100 bytes. Checks every byte and returns the session.
fn upload(len: usize, bulk: Bulk<'_>) -> Ended {
    let (client, front) = pair();
    let (server, back) = pair();
    let mut pool = BufferPool::new(16 * 1024, Slots::new(4));
    let sent = pattern(len, 3);
    let answer = pattern(100, 9);
    let backend = {
        let answer = answer.clone();
        let mut server = server;
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            let got = read_all(server.try_clone().expect("clone"));
            std::io::Write::write_all(&mut server, &answer).expect("answer");
            server
                .shutdown(std::net::Shutdown::Write)
                .expect("backend FIN");
            got.join().expect("backend reader")
        })
    };
    let client_gets = read_all(client.try_clone().expect("clone"));
    let client_sends = write_all(client, sent.clone());
    let ended = run_bulk(session(front, back, true), &mut pool, 0, bulk).expect("the pipe ends");
    client_sends.join().expect("client writer");
    assert!(
        backend.join().expect("backend") == sent,
        "the upload differs"
    );
    assert_eq!(client_gets.join().expect("client reader"), answer);
    assert_eq!(ended.fallbacks, 0);
    ended
}

/// Growth to `size` bytes within `budget`.
fn bulk_of(size: usize, budget: &Arc<Slots>) -> Bulk<'_> {
    Bulk { size, budget }
}

fn capacity(ended: Ended) -> (usize, usize) {
    let size = |lane: crate::worker::lanes::Lane| lane.into_pipe().map_or(0, |p| p.capacity());
    (size(ended.lanes.up), size(ended.lanes.down))
}

#[test]
fn a_bulk_transfer_grows_its_pipe_and_holds_a_slot_of_the_budget_until_it_ends() {
    let budget = Slots::new(1);
    let bulk = bulk_of(MIB, &budget);
    let mut ended = upload(16 * MIB, bulk);
    assert!(
        matches!(ended.growth[0], Growth::Grown(_)),
        "the upload's pipe grew: {:?}",
        ended.growth
    );
    assert!(
        matches!(ended.growth[1], Growth::Ungrown),
        "a 100-byte answer is no bulk transfer: {:?}",
        ended.growth
    );
    assert_eq!(budget.taken(), 1, "the grown pipe holds the budget's slot");

    // The budget is spent: the next bulk transfer splices through the
    // kernel's pipe, and every byte still arrives.
    let second = upload(16 * MIB, bulk);
    assert!(matches!(second.growth[0], Growth::Ungrown));
    let (up, _) = capacity(second);
    assert!(up < MIB, "{up}");

    let growth = std::mem::take(&mut ended.growth);
    let (up, _) = capacity(ended);
    assert_eq!(up, MIB, "the grown pipe has the bulk size");
    drop(growth);
    assert_eq!(budget.taken(), 0, "the slot went back with the session");
}

#[test]
fn a_transfer_shorter_than_the_bulk_mark_keeps_the_kernels_pipe() {
    let budget = Slots::new(4);
    let bulk = bulk_of(MIB, &budget);
    // Under 4 fills of half a 64 KiB pipe whatever the timing.
    let ended = upload(120 * 1024, bulk);
    assert!(
        matches!(ended.growth[0], Growth::Ungrown),
        "{:?}",
        ended.growth
    );
    assert_eq!(budget.taken(), 0);
}

#[test]
fn without_a_bulk_size_nothing_grows() {
    let budget = Slots::new(4);
    let bulk = bulk_of(0, &budget);
    let ended = upload(16 * MIB, bulk);
    assert!(matches!(ended.growth[0], Growth::Ungrown));
    assert_eq!(budget.taken(), 0);
    let (up, _) = capacity(ended);
    assert!(up < MIB, "{up}");
}

#[test]
fn a_pipe_grows_to_the_bulk_size_asked_for() {
    let budget: Arc<Slots> = Slots::new(1);
    let bulk = bulk_of(256 * 1024, &budget);
    let ended = upload(16 * MIB, bulk);
    assert!(matches!(ended.growth[0], Growth::Grown(_)));
    let (up, _) = capacity(ended);
    assert_eq!(up, 256 * 1024);
}
