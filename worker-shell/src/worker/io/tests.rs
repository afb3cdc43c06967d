use std::net::TcpListener;
use std::time::Instant;

use mio::net::TcpStream;

use super::{Nodelay, Peer};

/// A backend peer as the connect makes it: connected, writable, option off.
fn backend_peer() -> std::io::Result<(Peer, std::net::TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = std::net::TcpStream::connect(listener.local_addr()?)?;
    client.set_nonblocking(true)?;
    let (accepted, _) = listener.accept()?;
    let mut peer = Peer::new(TcpStream::from_std(client), Instant::now());
    peer.ready.writable = true;
    peer.nodelay = Nodelay::Unwritten;
    Ok((peer, accepted))
}

#[test]
fn nodelay_is_set_before_the_second_write_not_the_first() -> std::io::Result<()> {
    let (mut peer, _backend) = backend_peer()?;
    assert!(!peer.stream.nodelay()?);
    // Nothing to write: no write, nothing due.
    assert_eq!(peer.write(b"")?, 0);
    assert_eq!(peer.nodelay, Nodelay::Unwritten);
    assert_eq!(peer.write(b"first")?, 5);
    assert!(
        !peer.stream.nodelay()?,
        "the first write cannot wait for Nagle"
    );
    assert_eq!(peer.nodelay, Nodelay::Due);
    assert_eq!(peer.write(b"second")?, 6);
    assert!(peer.stream.nodelay()?, "set before the second write");
    assert_eq!(peer.nodelay, Nodelay::On);
    Ok(())
}

#[test]
fn a_socket_not_writable_is_not_written_and_its_option_waits() -> std::io::Result<()> {
    let (mut peer, _backend) = backend_peer()?;
    assert_eq!(peer.write(b"first")?, 5);
    peer.ready.writable = false;
    assert_eq!(peer.write(b"second")?, 0);
    assert!(!peer.stream.nodelay()?);
    assert_eq!(peer.nodelay, Nodelay::Due);
    Ok(())
}

#[test]
fn a_client_socket_is_never_touched() -> std::io::Result<()> {
    let (mut peer, _backend) = backend_peer()?;
    peer.nodelay = Nodelay::On;
    peer.write(b"first")?;
    peer.write(b"second")?;
    // `On` means inherited from the listener: this socket never had it,
    // and nothing set it.
    assert!(!peer.stream.nodelay()?);
    Ok(())
}
