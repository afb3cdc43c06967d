//! [`ServerEnd`] against in-memory sources and sinks that cut, stall and
//! fail where a test says, so every path runs without a socket or a clock.
//! The same type over a real non-blocking socket on a mio poll is tested
//! beside the shell's adapter (`control-shell/src/server/channel_mio`).

use std::collections::VecDeque;
use std::io::{self, Read, Write};

use super::*;
use crate::channel::tests::{add_cluster, frame, response, soft_stop, status};
use crate::proto::ResponseStatus;

/// A source that hands out its steps in order, each a read's worth at
/// most, then reports `WouldBlock` forever.
struct Script(VecDeque<io::Result<Vec<u8>>>);

impl Script {
    fn new(steps: impl IntoIterator<Item = io::Result<Vec<u8>>>) -> Self {
        Self(steps.into_iter().collect())
    }
}

impl Read for Script {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.pop_front() {
            None => Err(io::ErrorKind::WouldBlock.into()),
            Some(Err(err)) => Err(err),
            Some(Ok(mut bytes)) => {
                let n = bytes.len().min(buf.len());
                buf[..n].copy_from_slice(&bytes[..n]);
                if n < bytes.len() {
                    self.0.push_front(Ok(bytes.split_off(n)));
                }
                Ok(n)
            }
        }
    }
}

/// A sink that takes at most `per_write` bytes a call and stalls
/// (`WouldBlock`) on every other call.
struct Trickle {
    got: Vec<u8>,
    per_write: usize,
    stall: bool,
}

impl Write for Trickle {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stall = !self.stall;
        if self.stall {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(self.per_write);
        self.got.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn take_all(end: &mut ServerEnd) -> Vec<Request> {
    std::iter::from_fn(|| end.next_request().expect("valid frames")).collect()
}

#[test]
fn frames_cut_anywhere_come_out_whole_and_in_order() {
    let reqs = vec![status(), add_cluster("a"), soft_stop()];
    let bytes: Vec<u8> = reqs.iter().flat_map(frame).collect();
    let cuts = bytes.chunks(3).map(|c| Ok(c.to_vec()));
    let mut end = ServerEnd::new();
    assert_eq!(
        end.read_from(&mut Script::new(cuts)).expect("read"),
        ReadOutcome::Drained
    );
    assert_eq!(take_all(&mut end), reqs);
    assert_eq!(end.buffered_input(), 0);
}

#[test]
fn pauses_once_a_full_frame_is_buffered_and_leaves_the_rest_unread() {
    let max = 64;
    // Far more than one read chunk, so one read cannot take it all.
    let reqs: Vec<Request> = (0..4000).map(|i| add_cluster(&format!("c{i}"))).collect();
    let bytes: Vec<u8> = reqs.iter().flat_map(frame).collect();
    assert!(bytes.len() > 2 * READ_CHUNK);
    let mut source = Script::new([Ok(bytes)]);
    let mut end = ServerEnd::with_max_frame_len(max);
    assert_eq!(
        end.read_from(&mut source).expect("read"),
        ReadOutcome::Paused
    );
    assert!(end.buffered_input() < max + HEADER_LEN + READ_CHUNK);
    assert!(!source.0.is_empty(), "the source still holds bytes");
    let mut got = take_all(&mut end);
    while end.read_from(&mut source).expect("read") == ReadOutcome::Paused {
        got.extend(take_all(&mut end));
    }
    got.extend(take_all(&mut end));
    assert_eq!(got, reqs);
}

#[test]
fn a_reset_is_peer_closed_and_what_came_before_is_still_served() {
    let partial = frame(&add_cluster("cut"));
    let mut source = Script::new([
        Ok(frame(&status())),
        Ok(partial[..partial.len() - 1].to_vec()),
        Err(io::ErrorKind::ConnectionReset.into()),
    ]);
    let mut end = ServerEnd::new();
    assert_eq!(
        end.read_from(&mut source).expect("read"),
        ReadOutcome::PeerClosed
    );
    assert!(end.is_peer_closed());
    assert_eq!(end.next_request().expect("whole frame"), Some(status()));
    assert!(matches!(end.next_request(), Err(ChannelError::Closed)));
}

#[test]
fn other_read_errors_are_io_errors() {
    let mut source = Script::new([Err(io::ErrorKind::PermissionDenied.into())]);
    assert!(matches!(
        ServerEnd::new().read_from(&mut source),
        Err(ChannelError::Io(_))
    ));
}

#[test]
fn stalled_partial_writes_deliver_every_answer_whole() {
    let responses: Vec<Response> = (0..3)
        .map(|i| response(ResponseStatus::Ok, &format!("answer {i}")))
        .collect();
    let mut end = ServerEnd::new();
    for resp in &responses {
        end.queue(resp).expect("queue");
    }
    let mut sink = Trickle {
        got: Vec::new(),
        per_write: 7,
        stall: false,
    };
    let mut stalls = 0;
    while !end.write_to(&mut sink).expect("write") {
        stalls += 1;
        assert!(stalls < 1000, "no progress");
    }
    assert!(stalls > 0);
    assert_eq!(end.pending_output(), 0);
    let mut decoder = FrameDecoder::new();
    decoder.push(&sink.got);
    let got: Vec<Response> =
        std::iter::from_fn(|| decoder.next_frame().expect("valid frames")).collect();
    assert_eq!(got, responses);
}

#[test]
fn answers_have_their_own_cap_above_the_requests_one() {
    let big = response(ResponseStatus::Ok, &"m".repeat(300));
    let mut end = ServerEnd::with_caps(64, 1024);
    end.queue(&big).expect("an answer over the request cap");
    let mut small = ServerEnd::with_caps(64, 128);
    assert!(
        small.queue(&big).is_err(),
        "an answer over the answer cap is refused"
    );
    assert_eq!(small.pending_output(), 0, "and nothing of it is queued");
}

#[test]
fn a_peer_gone_while_writing_is_closed() {
    struct Gone;
    impl Write for Gone {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut end = ServerEnd::new();
    end.queue(&response(ResponseStatus::Ok, "lost"))
        .expect("queue");
    assert!(matches!(end.write_to(&mut Gone), Err(ChannelError::Closed)));
}
