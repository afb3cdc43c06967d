//! Splicing only when it pays (`splice_threshold`), against real loopback
//! sockets: a short exchange copies and never takes a kernel pipe; a bulk
//! direction switches to splice, and what its buffer held goes out first.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::thread;

use super::tests::{pair, pattern, read_all, run_with, session, write_all};
use crate::worker::lanes::Lane;
use crate::worker::pool::BufferPool;

const THRESHOLD: u64 = 64 * 1024;

type Outcome = Result<(), Box<dyn std::error::Error>>;

/// A helper thread's result, its panic an error of the test.
fn joined<T>(handle: thread::JoinHandle<T>, what: &str) -> Result<T, String> {
    handle
        .join()
        .map_err(|_| format!("the {what} thread panicked"))
}

#[test]
fn a_short_exchange_with_splice_on_copies_and_takes_no_pipe() -> Outcome {
    let (mut client, front) = pair();
    let (mut server, back) = pair();
    let session = session(front, back, true);
    let request = pattern(600, 1);
    client.write_all(&request)?;
    client.shutdown(Shutdown::Write)?;
    let backend = thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let mut got = Vec::new();
        server.read_to_end(&mut got)?;
        server.write_all(&[7; 64])?;
        Ok(got)
    });
    let answer = read_all(client);
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
    let ended = run_with(session, &mut pool, THRESHOLD)?;
    assert!(joined(backend, "backend")?? == request);
    assert_eq!(joined(answer, "client")?, [7; 64]);
    assert_eq!(ended.pipes_created, 0, "a short exchange made no pipe");
    assert!(
        matches!(
            (&ended.lanes.up, &ended.lanes.down),
            (Lane::Warm { .. }, Lane::Warm { .. })
        ),
        "both directions still copying: {:?}",
        ended.lanes
    );
    Ok(())
}

#[test]
fn a_bulk_direction_splices_once_its_copied_bytes_went_out_first() -> Outcome {
    const LEN: usize = 4 << 20;
    let (client, front) = pair();
    let (server, back) = pair();
    let session = session(front, back, true);
    let up = pattern(LEN, 9);
    let client_sends = write_all(client.try_clone()?, up.clone());
    let backend = thread::spawn(move || -> std::io::Result<Vec<u8>> {
        let mut server = server;
        let mut got = Vec::new();
        server.read_to_end(&mut got)?;
        server.write_all(b"OK")?;
        Ok(got)
    });
    let answer = read_all(client);
    let mut pool = BufferPool::new(16 * 1024, crate::shared::admission::Slots::new(4));
    let ended = run_with(session, &mut pool, THRESHOLD)?;
    joined(client_sends, "client writer")?;
    // Byte for byte: the copied start, then the spliced rest, in order.
    assert!(joined(backend, "backend")?? == up, "the upload differs");
    assert_eq!(joined(answer, "client")?, b"OK");
    assert!(ended.lanes.up.is_spliced(), "{:?}", ended.lanes.up);
    assert!(
        matches!(ended.lanes.down, Lane::Warm { .. }),
        "2 bytes down never splice: {:?}",
        ended.lanes.down
    );
    assert_eq!(ended.pipes_created, 1);
    assert_eq!(ended.bytes_in, LEN as u64);
    assert!(
        !ended.buffers_held.0,
        "the spliced direction gave its buffer back"
    );
    Ok(())
}
