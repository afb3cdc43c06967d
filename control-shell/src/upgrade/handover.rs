//! The upgrade handover between the running process and its successor:
//! the control socket they share, what crosses it, and the listening
//! sockets the successor inherits.
//!
//! Owns: the wire format of the control socket (one length-prefixed
//! `Handover` message from the old process, one verdict line back), the
//! environment variable that names the control socket's descriptor, making
//! a descriptor survive `exec`, and taking an inherited descriptor back as
//! a listening socket after checking what it is. Must never: trust a
//! descriptor number it was told without checking that it is a socket of
//! the expected kind and address, take the same number twice, or wait on
//! the other process without a deadline.
//!
//! The descriptors are inherited across `exec` rather than passed with
//! `SCM_RIGHTS`: the old process is the new one's parent, so inheritance
//! needs no ancillary-data code, and the numbers stay the same on both
//! sides.

use std::collections::BTreeSet;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use command::proto;
use prost::Message;
use socket2::{SockRef, Type};

/// Names the control socket's descriptor in the successor's environment.
pub const UPGRADE_FD_ENV: &str = "PREREAD_UPGRADE_FD";

/// The largest `Handover` accepted: the state of 100,000 routes is a few
/// MB.
const MAX_HANDOVER_BYTES: usize = 256 << 20;

/// How long the successor waits for the handover once it started.
pub const HANDOVER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The successor's answer, on one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It serves: its workers accept on the inherited sockets and it holds
    /// the command socket path.
    Ready { pid: u32 },
    /// It will not take over, and exits.
    Refused(String),
}

impl Verdict {
    fn line(&self) -> String {
        match self {
            Self::Ready { pid } => format!("ready {pid}\n"),
            // One line: a newline in the reason would end it early.
            Self::Refused(why) => format!("refused {}\n", why.replace('\n', " ")),
        }
    }

    fn parse(line: &str) -> Option<Self> {
        let line = line.trim_end_matches('\n');
        if let Some(pid) = line.strip_prefix("ready ") {
            return pid.parse().ok().map(|pid| Self::Ready { pid });
        }
        line.strip_prefix("refused ")
            .map(|why| Self::Refused(why.to_owned()))
    }
}

/// Lets `fd` be inherited by the program the next `exec` starts (clears
/// `FD_CLOEXEC`). Only the upgrade spawns a process, so no other child can
/// inherit it meanwhile.
pub fn inheritable(fd: &impl AsFd) -> io::Result<()> {
    SockRef::from(fd).set_cloexec(false)
}

/// Sends the handover: its length (u32, big-endian), then the message.
pub fn send_handover(stream: &mut UnixStream, handover: &proto::Handover) -> io::Result<()> {
    let bytes = handover.encode_to_vec();
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|&len| len as usize <= MAX_HANDOVER_BYTES)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the state is too large to hand over ({} bytes)",
                    bytes.len()
                ),
            )
        })?;
    stream.write_all(&len.to_be_bytes())?;
    stream.write_all(&bytes)?;
    stream.flush()
}

/// Reads the handover, waiting at most [`HANDOVER_READ_TIMEOUT`] per read.
pub fn read_handover(stream: &mut UnixStream) -> io::Result<proto::Handover> {
    stream.set_read_timeout(Some(HANDOVER_READ_TIMEOUT))?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_HANDOVER_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a handover of {len} bytes is over the {MAX_HANDOVER_BYTES}-byte cap"),
        ));
    }
    let mut bytes = vec![0u8; len];
    stream.read_exact(&mut bytes)?;
    proto::Handover::decode(bytes.as_slice())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad handover: {e}")))
}

/// Sends the verdict line.
pub fn send_verdict(stream: &mut UnixStream, verdict: &Verdict) -> io::Result<()> {
    stream.write_all(verdict.line().as_bytes())?;
    stream.flush()
}

/// Reads the verdict line, waiting at most `timeout`. `Ok(None)`: the
/// successor closed the socket without one (it exited).
pub fn read_verdict(stream: &UnixStream, timeout: Duration) -> io::Result<Option<Verdict>> {
    stream.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let mut line = String::new();
    // A verdict is short; a longer line is not one.
    let read = BufReader::new(stream).take(4096).read_line(&mut line)?;
    if read == 0 {
        return Ok(None);
    }
    Verdict::parse(&line).map(Some).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a verdict: {:?}", line.trim_end()),
        )
    })
}

/// Descriptors of this process taken back from numbers it was told, each
/// once.
#[derive(Debug, Default)]
pub struct Inherited {
    taken: BTreeSet<RawFd>,
}

impl Inherited {
    /// The control socket named by [`UPGRADE_FD_ENV`]: `Ok(None)` when the
    /// variable is not set (a plain start).
    pub fn control(&mut self) -> io::Result<Option<UnixStream>> {
        let Some(text) = std::env::var_os(UPGRADE_FD_ENV) else {
            return Ok(None);
        };
        let fd = text
            .to_str()
            .and_then(|t| t.parse::<RawFd>().ok())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{UPGRADE_FD_ENV}={text:?} is not a descriptor number"),
                )
            })?;
        let fd = self.take(fd)?;
        let socket = socket2::Socket::from(fd);
        if socket.r#type()? != Type::STREAM || !socket.local_addr()?.is_unix() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{UPGRADE_FD_ENV}: descriptor is not a Unix stream socket"),
            ));
        }
        Ok(Some(UnixStream::from(OwnedFd::from(socket))))
    }

    /// The listening TCP socket inherited as `fd`, which must be bound to
    /// `address`; made non-blocking, for a worker's poll.
    pub fn listener(&mut self, fd: RawFd, address: SocketAddr) -> io::Result<TcpListener> {
        let socket = self.listening(fd, address)?;
        socket.set_nonblocking(true)?;
        Ok(TcpListener::from(OwnedFd::from(socket)))
    }

    /// [`Self::listener`] left as it is: blocking, as the metrics
    /// endpoint's accept thread, in the old process too, needs it (the flag
    /// belongs to the socket both processes share).
    pub fn blocking_listener(&mut self, fd: RawFd, address: SocketAddr) -> io::Result<TcpListener> {
        Ok(TcpListener::from(OwnedFd::from(
            self.listening(fd, address)?,
        )))
    }

    fn listening(&mut self, fd: RawFd, address: SocketAddr) -> io::Result<socket2::Socket> {
        let socket = socket2::Socket::from(self.take(fd)?);
        let bound = socket.local_addr()?.as_socket();
        if socket.r#type()? != Type::STREAM || !socket.is_listener()? || bound != Some(address) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "descriptor {fd} is not a TCP socket listening on {address} (bound to \
                     {bound:?})"
                ),
            ));
        }
        socket.set_cloexec(true)?;
        Ok(socket)
    }

    /// Takes ownership of descriptor `fd` once it is checked to be open
    /// and a socket.
    pub(crate) fn take(&mut self, fd: RawFd) -> io::Result<OwnedFd> {
        if fd < 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} is a standard stream, not an inherited socket"),
            ));
        }
        if self.taken.contains(&fd) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} is named twice"),
            ));
        }
        // SAFETY: fstat only writes the `stat` it is given and reports EBADF
        // for a descriptor that is not open.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `stat` is valid for writes; `fd` is any integer.
        if unsafe { libc::fstat(fd, &raw mut stat) } != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "descriptor {fd} is not open: {}",
                    io::Error::last_os_error()
                ),
            ));
        }
        if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} is not a socket"),
            ));
        }
        self.taken.insert(fd);
        // SAFETY: `fd` is open (fstat succeeded) and names a socket this
        // process inherited from its parent for this purpose; nothing else
        // in the process owns it (the proxy opens its own descriptors with
        // close-on-exec, and this set takes each number at most once), so
        // the `OwnedFd` is its only owner.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn verdicts_round_trip_and_garbage_is_none() {
        for verdict in [
            Verdict::Ready { pid: 4242 },
            Verdict::Refused("bad state\non two lines".to_owned()),
        ] {
            let parsed = Verdict::parse(&verdict.line()).expect("parses");
            match (&verdict, parsed) {
                (Verdict::Refused(_), Verdict::Refused(why)) => {
                    assert_eq!(why, "bad state on two lines");
                }
                (v, p) => assert_eq!(*v, p),
            }
        }
        assert_eq!(Verdict::parse("ready x\n"), None);
        assert_eq!(Verdict::parse("hello\n"), None);
    }

    #[test]
    fn handover_round_trips_over_a_pair() {
        let (mut a, mut b) = UnixStream::pair().expect("pair");
        let handover = proto::Handover {
            state: Vec::new(),
            listeners: vec![proto::InheritedListener {
                address: "127.0.0.1:1".to_owned(),
                fd: 7,
            }],
            generation: 9,
            metrics: Some(proto::InheritedListener {
                address: "127.0.0.1:2".to_owned(),
                fd: 8,
            }),
            quic: Some(proto::QuicHandover {
                version: 1,
                sockets: vec![proto::InheritedQuicSocket {
                    address: "127.0.0.1:3".to_owned(),
                    fd: 9,
                    flows: vec![proto::HandedFlow {
                        client: "192.0.2.1:4".to_owned(),
                        backend_fd: 10,
                        ..Default::default()
                    }],
                }],
            }),
        };
        send_handover(&mut a, &handover).expect("send");
        assert_eq!(read_handover(&mut b).expect("read"), handover);
        send_verdict(&mut b, &Verdict::Ready { pid: 1 }).expect("verdict");
        assert_eq!(
            read_verdict(&a, Duration::from_secs(1)).expect("read verdict"),
            Some(Verdict::Ready { pid: 1 })
        );
        drop(b);
        assert_eq!(read_verdict(&a, Duration::from_secs(1)).expect("eof"), None);
    }

    #[test]
    fn an_oversized_length_is_refused_before_reading() {
        let (mut a, mut b) = UnixStream::pair().expect("pair");
        a.write_all(&u32::MAX.to_be_bytes()).expect("write");
        let error = read_handover(&mut b).expect_err("too large");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn descriptors_are_checked_before_they_are_taken() {
        let mut inherited = Inherited::default();
        assert!(inherited.take(1).is_err(), "a standard stream");
        let file = tempfile::tempfile().expect("file");
        let error = inherited.take(file.as_raw_fd()).expect_err("not a socket");
        assert!(error.to_string().contains("not a socket"), "{error}");

        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("addr");
        let fd = OwnedFd::from(listener);
        let raw = fd.as_raw_fd();
        // The test hands its ownership over to `Inherited`, as exec does.
        std::mem::forget(fd);
        let other: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        let mut checker = Inherited::default();
        assert!(checker.listener(raw, other).is_err(), "wrong address");
        // The refused descriptor was closed with its `OwnedFd`; bind again.
        let listener = TcpListener::bind(address).expect("rebind");
        let fd = OwnedFd::from(listener);
        let raw = fd.as_raw_fd();
        std::mem::forget(fd);
        let mut inherited = Inherited::default();
        let adopted = inherited.listener(raw, address).expect("adopted");
        assert_eq!(adopted.local_addr().expect("addr"), address);
        assert!(inherited.listener(raw, address).is_err(), "taken twice");
        assert!(
            inherited.blocking_listener(raw, address).is_err(),
            "taken twice, whichever way"
        );
        let metrics = TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = metrics.local_addr().expect("addr");
        let fd = OwnedFd::from(metrics);
        let raw = fd.as_raw_fd();
        std::mem::forget(fd);
        let adopted = inherited
            .blocking_listener(raw, address)
            .expect("adopted blocking");
        let socket = SockRef::from(&adopted);
        assert!(!socket.nonblocking().expect("flags"), "left blocking");
    }
}
