use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::time::Duration;

use mio::{Events, Interest, Poll, Token};
use preread_core::step::ProxyMode;

use super::{open, writes_at_once};
use crate::worker::defer::tests::defer_accept;

#[test]
fn only_a_session_with_bytes_to_send_writes_at_once() {
    // A PROXY header is always there to write.
    assert!(writes_at_once(ProxyMode::Send, 0, 0));
    assert!(writes_at_once(ProxyMode::Send, 40, 40));
    // A relayed window goes whole.
    assert!(writes_at_once(ProxyMode::Relay, 40, 40));
    assert!(!writes_at_once(ProxyMode::Relay, 0, 0));
    // Without PROXY, the client's own PROXY header is skipped: a window
    // that held only that header leaves nothing (a server-first backend).
    assert!(writes_at_once(ProxyMode::None, 0, 517));
    assert!(writes_at_once(ProxyMode::None, 40, 41));
    assert!(!writes_at_once(ProxyMode::None, 40, 40));
    assert!(!writes_at_once(ProxyMode::None, 0, 0));
}

/// Connects with `open`, waits for the writable edge (bounded), writes
/// `hello`, and returns what the backend read and the option's value.
fn connect_and_send(at_once: bool, hello: &[u8]) -> std::io::Result<(Vec<u8>, libc::c_int)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut stream = open(listener.local_addr()?, at_once)?;
    let option = defer_accept(stream.as_raw_fd())?;
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut stream, Token(0), Interest::WRITABLE)?;
    let mut events = Events::with_capacity(4);
    poll.poll(&mut events, Some(Duration::from_secs(10)))?;
    assert!(
        events.iter().any(|e| e.is_writable()),
        "connect did not complete"
    );
    stream.write_all(hello)?;
    let (mut accepted, _) = listener.accept()?;
    accepted.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut got = vec![0u8; hello.len()];
    accepted.read_exact(&mut got)?;
    Ok((got, option))
}

#[test]
fn a_session_that_writes_at_once_defers_the_last_ack_and_its_bytes_arrive() -> std::io::Result<()> {
    let (got, option) = connect_and_send(true, b"hello, backend")?;
    assert_eq!(got, b"hello, backend");
    assert_ne!(option, 0, "TCP_DEFER_ACCEPT is set before the connect");
    Ok(())
}

#[test]
fn a_session_with_nothing_to_send_connects_plainly() -> std::io::Result<()> {
    let (got, option) = connect_and_send(false, b"late bytes")?;
    assert_eq!(got, b"late bytes");
    assert_eq!(
        option, 0,
        "the backend may speak first: its ACK is not held"
    );
    Ok(())
}

#[test]
fn a_refused_connect_is_an_error() -> std::io::Result<()> {
    // A port bound but not listening: a connect is refused. Not a listener
    // dropped (a child another test forks holds a copy until its exec, and
    // the copy would still accept). The refusal comes at once or as the
    // socket's error, never as a panic.
    let bound = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    bound.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
    let address = bound
        .local_addr()?
        .as_socket()
        .ok_or_else(|| std::io::Error::other("an IPv4 socket's address"))?;
    match open(address, true) {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused),
        Ok(stream) => {
            let mut stream = stream;
            let mut poll = Poll::new()?;
            poll.registry()
                .register(&mut stream, Token(0), Interest::WRITABLE)?;
            let mut events = Events::with_capacity(4);
            poll.poll(&mut events, Some(Duration::from_secs(10)))?;
            let error = stream.take_error()?;
            assert_eq!(
                error.map(|e| e.kind()),
                Some(std::io::ErrorKind::ConnectionRefused)
            );
        }
    }
    Ok(())
}
