//! The QUIC part of an upgrade's handover: the listeners' UDP sockets and
//! their decided flows, each flow with its socket connected to its
//! backend.
//!
//! Owns: numbering them in the `Handover` on the old side
//! ([`handover_of`]), and, on the successor's, taking the descriptors back
//! after checking each (a UDP socket bound to the named address; a UDP
//! socket connected to the flow's backend) and validating each flow
//! ([`FlowSnapshot::from_proto`]). Must never: keep a descriptor it
//! refused open, or refuse the flows that are valid because one is not. A
//! listening socket that is not what the handover says refuses the whole
//! handover (the old process resumes and loses nothing); a flow that
//! breaks a rule is dropped alone; a layout version this binary does not
//! know drops the flows and keeps the sockets.
//!
//! How the workers stop reading before the export, so that each datagram
//! is read by one process only: `worker-shell/src/worker/quic/upgrade.rs`.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use command::proto;
use coordinator::QuicExport;
use preread_worker::worker::quic::handover::{FlowError, FlowSnapshot, QUIC_HANDOVER_VERSION};
use preread_worker::worker::quic::upgrade::InheritedQuic;
use socket2::Type;

use crate::upgrade::handover::Inherited;

/// The descriptors to pass: each listening socket, then its flows'
/// backend sockets.
pub type Passed = Vec<OwnedFd>;

/// Duplicates of the exported sockets (theirs stay with the workers until
/// the successor serves or the upgrade fails), and the `QuicHandover`
/// naming them by number.
pub fn handover_of<'a>(
    exported: impl IntoIterator<Item = &'a QuicExport>,
) -> io::Result<(proto::QuicHandover, Passed)> {
    let mut passed = Vec::new();
    let mut sockets = Vec::new();
    for export in exported {
        let socket = export.socket.try_clone()?;
        let mut flows = Vec::with_capacity(export.flows.len());
        for (flow, backend) in &export.flows {
            let backend = backend.try_clone()?;
            flows.push(proto::HandedFlow {
                backend_fd: backend.as_raw_fd(),
                ..flow.clone()
            });
            passed.push(backend);
        }
        sockets.push(proto::InheritedQuicSocket {
            address: export.address.to_string(),
            fd: socket.as_raw_fd(),
            flows,
        });
        passed.push(socket);
    }
    let handover = proto::QuicHandover {
        version: QUIC_HANDOVER_VERSION,
        sockets,
    };
    Ok((handover, passed))
}

/// Why the QUIC part refuses the whole handover.
#[derive(Debug)]
pub enum QuicTakeoverError {
    /// A socket's address is not an `ip:port`.
    Address(String),
    /// A listening socket is not the UDP socket the handover names.
    Socket {
        address: SocketAddr,
        error: io::Error,
    },
}

impl std::fmt::Display for QuicTakeoverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Address(text) => write!(f, "inherited QUIC socket {text:?} is not an ip:port"),
            Self::Socket { address, error } => {
                write!(f, "inherited QUIC socket {address}: {error}")
            }
        }
    }
}

impl std::error::Error for QuicTakeoverError {}

/// The successor's side: the sockets and the valid flows of `quic`.
pub fn take_over(
    quic: Option<&proto::QuicHandover>,
    inherited: &mut Inherited,
) -> Result<Vec<InheritedQuic>, QuicTakeoverError> {
    let Some(quic) = quic else {
        return Ok(Vec::new());
    };
    let known = quic.version == QUIC_HANDOVER_VERSION;
    if !known {
        log::warn!(
            "upgrade: the QUIC flows are in layout {} (this binary reads {}): the sockets are \
             taken, the flows dropped (their clients start again)",
            quic.version,
            QUIC_HANDOVER_VERSION
        );
    }
    let mut taken = Vec::with_capacity(quic.sockets.len());
    for handed in &quic.sockets {
        let address: SocketAddr = handed
            .address
            .parse()
            .map_err(|_| QuicTakeoverError::Address(handed.address.clone()))?;
        let socket = inherited
            .udp_socket(handed.fd, address)
            .map_err(|error| QuicTakeoverError::Socket { address, error })?;
        let mut flows = Vec::with_capacity(handed.flows.len());
        for flow in &handed.flows {
            let checked = if known {
                take_flow(flow, inherited)
            } else {
                Err(FlowRefused::Layout(quic.version))
            };
            match checked {
                Ok(flow) => flows.push(flow),
                Err(why) => {
                    // Closed with its `OwnedFd`, when it is an open socket
                    // this process may own.
                    drop(inherited.take(flow.backend_fd));
                    log::warn!(
                        "upgrade: QUIC flow of {:?} on {address} dropped: {why}",
                        flow.client
                    );
                }
            }
        }
        taken.push(InheritedQuic {
            address,
            socket,
            flows,
        });
    }
    Ok(taken)
}

/// Why one handed flow is dropped.
#[derive(Debug)]
enum FlowRefused {
    /// The flows are in a layout this binary does not read.
    Layout(u32),
    /// A field breaks a rule.
    Invalid(FlowError),
    /// Its backend socket is not the one the handover names.
    Socket(io::Error),
}

impl std::fmt::Display for FlowRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Layout(version) => write!(f, "layout {version} is not one this binary reads"),
            Self::Invalid(error) => error.fmt(f),
            Self::Socket(error) => write!(f, "its backend socket: {error}"),
        }
    }
}

/// One valid flow with its checked backend socket, or why not.
fn take_flow(
    flow: &proto::HandedFlow,
    inherited: &mut Inherited,
) -> Result<(FlowSnapshot, UdpSocket), FlowRefused> {
    let snapshot = FlowSnapshot::from_proto(flow).map_err(FlowRefused::Invalid)?;
    let backend = inherited
        .connected_udp(flow.backend_fd, snapshot.backend_address)
        .map_err(FlowRefused::Socket)?;
    Ok((snapshot, backend))
}

impl Inherited {
    /// The UDP socket inherited as `fd`, which must be bound to `address`;
    /// non-blocking, for a worker's poll.
    pub fn udp_socket(&mut self, fd: RawFd, address: SocketAddr) -> io::Result<UdpSocket> {
        let socket = self.udp(fd)?;
        let bound = socket.local_addr()?.as_socket();
        if bound != Some(address) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} is bound to {bound:?}, not {address}"),
            ));
        }
        Ok(UdpSocket::from(OwnedFd::from(socket)))
    }

    /// The UDP socket inherited as `fd`, which must be connected to
    /// `backend`; non-blocking.
    pub fn connected_udp(&mut self, fd: RawFd, backend: SocketAddr) -> io::Result<UdpSocket> {
        let socket = self.udp(fd)?;
        let peer = socket.peer_addr().ok().and_then(|p| p.as_socket());
        if peer != Some(backend) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} is connected to {peer:?}, not the backend {backend}"),
            ));
        }
        Ok(UdpSocket::from(OwnedFd::from(socket)))
    }

    fn udp(&mut self, fd: RawFd) -> io::Result<socket2::Socket> {
        let socket = socket2::Socket::from(self.take(fd)?);
        if socket.r#type()? != Type::DGRAM || socket.local_addr()?.as_socket().is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} is not a UDP socket"),
            ));
        }
        socket.set_cloexec(true)?;
        socket.set_nonblocking(true)?;
        Ok(socket)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::IntoRawFd;
    use std::time::Duration;

    use super::*;

    /// A descriptor handed to `Inherited` as `exec` would: its number only.
    fn raw(fd: impl Into<OwnedFd>) -> RawFd {
        fd.into().into_raw_fd()
    }

    fn flow(backend: SocketAddr, fd: RawFd) -> proto::HandedFlow {
        proto::HandedFlow {
            client: "192.0.2.1:5000".into(),
            cids: vec![vec![7; 8]],
            backend_spoke: true,
            backend_fd: fd,
            backend_address: backend.to_string(),
            cluster: "h3".into(),
            backend: "h3-1".into(),
            age_ms: 100,
            idle_ms: 10,
            quic_version: 1,
            ..Default::default()
        }
    }

    #[test]
    fn valid_flows_are_kept_and_a_bad_one_is_dropped_alone() {
        let listening = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let address = listening.local_addr().expect("addr");
        let backend_server = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let backend = backend_server.local_addr().expect("addr");
        let connected = || {
            let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
            socket.connect(backend).expect("connect");
            socket
        };
        let good = flow(backend, raw(connected()));
        let elsewhere = flow("127.0.0.1:9".parse().expect("addr"), raw(connected()));
        let bad_cid = proto::HandedFlow {
            cids: vec![vec![1; 21]],
            ..flow(backend, raw(connected()))
        };
        let quic = proto::QuicHandover {
            version: QUIC_HANDOVER_VERSION,
            sockets: vec![proto::InheritedQuicSocket {
                address: address.to_string(),
                fd: raw(listening),
                flows: vec![good, elsewhere, bad_cid],
            }],
        };
        let mut inherited = Inherited::default();
        let taken = take_over(Some(&quic), &mut inherited).expect("taken");
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].address, address);
        assert_eq!(taken[0].flows.len(), 1, "only the valid flow");
        let (snapshot, socket) = &taken[0].flows[0];
        assert_eq!(snapshot.backend_address, backend);
        // The adopted backend socket still reaches the backend.
        socket.send(b"ping").expect("send");
        backend_server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buffer = [0u8; 8];
        let (len, _) = backend_server.recv_from(&mut buffer).expect("recv");
        assert_eq!(&buffer[..len], b"ping");
    }

    #[test]
    fn an_unknown_layout_keeps_the_sockets_and_drops_the_flows() {
        let listening = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let address = listening.local_addr().expect("addr");
        let backend = "127.0.0.1:9".parse().expect("addr");
        let quic = proto::QuicHandover {
            version: QUIC_HANDOVER_VERSION + 1,
            sockets: vec![proto::InheritedQuicSocket {
                address: address.to_string(),
                fd: raw(listening),
                flows: vec![flow(backend, -1)],
            }],
        };
        let taken = take_over(Some(&quic), &mut Inherited::default()).expect("taken");
        assert_eq!((taken.len(), taken[0].flows.len()), (1, 0));
        assert!(
            take_over(None, &mut Inherited::default())
                .expect("none")
                .is_empty()
        );
    }

    #[test]
    fn a_listening_socket_that_is_not_what_it_says_refuses_the_handover() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = tcp.local_addr().expect("addr");
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind");
        for (fd, named) in [(raw(tcp), address), (raw(udp), address)] {
            let quic = proto::QuicHandover {
                version: QUIC_HANDOVER_VERSION,
                sockets: vec![proto::InheritedQuicSocket {
                    address: named.to_string(),
                    fd,
                    flows: Vec::new(),
                }],
            };
            let error = take_over(Some(&quic), &mut Inherited::default()).expect_err("refused");
            assert!(matches!(error, QuicTakeoverError::Socket { .. }), "{error}");
        }
        let quic = proto::QuicHandover {
            version: QUIC_HANDOVER_VERSION,
            sockets: vec![proto::InheritedQuicSocket {
                address: "here".into(),
                fd: 3,
                flows: Vec::new(),
            }],
        };
        let error = take_over(Some(&quic), &mut Inherited::default()).expect_err("refused");
        assert!(error.to_string().contains("\"here\""), "{error}");
    }

    #[test]
    fn the_old_side_numbers_each_descriptor_it_passes() {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let address = socket.local_addr().expect("addr");
        let backend = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let exported = [QuicExport {
            address,
            socket: OwnedFd::from(socket),
            flows: vec![(
                flow("127.0.0.1:9".parse().expect("addr"), 0),
                OwnedFd::from(backend),
            )],
        }];
        let (handover, passed) = handover_of(&exported).expect("duplicated");
        assert_eq!(handover.version, QUIC_HANDOVER_VERSION);
        assert_eq!(passed.len(), 2);
        let numbers: Vec<RawFd> = passed.iter().map(AsRawFd::as_raw_fd).collect();
        assert_eq!(handover.sockets[0].fd, numbers[1]);
        assert_eq!(handover.sockets[0].flows[0].backend_fd, numbers[0]);
        assert_eq!(handover.sockets[0].address, address.to_string());
    }
}
