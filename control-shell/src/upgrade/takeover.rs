//! `preread upgrade`, on the side of the new process: take the handover,
//! check it, and say whether it serves.
//!
//! Owns: reading the state, the inherited listening sockets and the
//! metrics endpoint's socket the old process handed over, validating them
//! with this binary's own rules, and the verdict sent back. Must never: serve a state this binary refuses
//! (it refuses the handover instead, and the old process keeps serving),
//! or keep a descriptor it was not told about.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;

use command::proto;
use command::state::ConfigState;
use command::validate::ValidationError;

use preread_worker::worker::quic::upgrade::InheritedQuic;

use crate::upgrade::handover::{self, Inherited, Verdict};
use crate::upgrade::quic::{self, QuicTakeoverError};

/// Inherited listening sockets, each with the address it listens on.
pub type Sockets = Vec<(SocketAddr, TcpListener)>;

/// What an upgrade's successor starts from.
#[derive(Debug)]
pub struct Successor {
    /// The control socket to the old process, for the verdict.
    pub control: UnixStream,
    /// The running state the old process handed over.
    pub state: ConfigState,
    /// The inherited listening sockets.
    pub sockets: Sockets,
    /// The old process's routing generation.
    pub generation: u64,
    /// The metrics endpoint's socket, blocking, when the old process served
    /// one.
    pub metrics: Option<(SocketAddr, TcpListener)>,
    /// The QUIC listeners' sockets, with their flows.
    pub quic: Vec<InheritedQuic>,
}

/// Why this process will not take the handover over.
#[derive(Debug)]
pub enum TakeoverError {
    /// The handover could not be read off the control socket.
    Read(io::Error),
    /// An inherited socket's address is not an `ip:port`.
    Address(String),
    /// An inherited descriptor is not the socket the handover says.
    Socket {
        address: SocketAddr,
        error: io::Error,
    },
    /// The running state breaks this binary's rules.
    State(ValidationError),
    /// A QUIC socket is not what the handover says.
    Quic(QuicTakeoverError),
}

impl fmt::Display for TakeoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read(error) => write!(f, "cannot read the handover: {error}"),
            Self::Address(text) => write!(f, "inherited listener {text:?} is not an ip:port"),
            Self::Socket { address, error } => write!(f, "inherited listener {address}: {error}"),
            Self::State(error) => write!(
                f,
                "the running state does not fit this binary and config: {}: {}",
                error.code.as_str(),
                error.message
            ),
            Self::Quic(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for TakeoverError {}

/// What `Successor::check` takes from the handover.
type Checked = (
    ConfigState,
    Sockets,
    u64,
    Option<(SocketAddr, TcpListener)>,
    Vec<InheritedQuic>,
);

impl Successor {
    /// Reads and checks the handover on `control`. When it cannot be taken,
    /// the refusal is sent back and returned.
    pub fn receive(
        mut control: UnixStream,
        mut inherited: Inherited,
    ) -> Result<Self, TakeoverError> {
        match Self::check(&mut control, &mut inherited) {
            Ok((state, sockets, generation, metrics, quic)) => Ok(Self {
                control,
                state,
                sockets,
                generation,
                metrics,
                quic,
            }),
            Err(why) => {
                refuse(&mut control, &why.to_string());
                Err(why)
            }
        }
    }

    fn check(
        control: &mut UnixStream,
        inherited: &mut Inherited,
    ) -> Result<Checked, TakeoverError> {
        let handover = handover::read_handover(control).map_err(TakeoverError::Read)?;
        let mut sockets = Vec::with_capacity(handover.listeners.len());
        for listener in &handover.listeners {
            let address = address_of(listener)?;
            let socket = inherited
                .listener(listener.fd, address)
                .map_err(|error| TakeoverError::Socket { address, error })?;
            sockets.push((address, socket));
        }
        let metrics = match &handover.metrics {
            Some(listener) => {
                let address = address_of(listener)?;
                let socket = inherited
                    .blocking_listener(listener.fd, address)
                    .map_err(|error| TakeoverError::Socket { address, error })?;
                Some((address, socket))
            }
            None => None,
        };
        let quic =
            quic::take_over(handover.quic.as_ref(), inherited).map_err(TakeoverError::Quic)?;
        let mut state = ConfigState::default();
        for request in &handover.state {
            state
                .dispatch(request)
                .map(|_| ())
                .map_err(TakeoverError::State)?;
        }
        Ok((state, sockets, handover.generation, metrics, quic))
    }

    /// The inherited sockets dealt to `workers` workers: each address's
    /// sockets in turn, so every socket is accepted on even when the old
    /// process ran more workers than this one (some then get two).
    pub fn deal(sockets: Sockets, workers: usize) -> Vec<Sockets> {
        let mut hands: Vec<Vec<_>> = (0..workers.max(1)).map(|_| Vec::new()).collect();
        let mut next: HashMap<SocketAddr, usize> = HashMap::new();
        let count = hands.len();
        for (address, socket) in sockets {
            let turn = next.entry(address).or_insert(0);
            if let Some(hand) = hands.get_mut(*turn % count) {
                hand.push((address, socket));
            }
            *turn += 1;
        }
        hands
    }
}

impl Successor {
    /// The inherited QUIC sockets dealt to `workers` workers as
    /// [`Self::deal`] deals the TCP ones; each socket's flows go with it,
    /// to the worker that reads the datagrams the kernel puts there.
    pub fn deal_quic(quic: Vec<InheritedQuic>, workers: usize) -> Vec<Vec<InheritedQuic>> {
        let mut hands: Vec<Vec<_>> = (0..workers.max(1)).map(|_| Vec::new()).collect();
        let mut next: HashMap<SocketAddr, usize> = HashMap::new();
        let count = hands.len();
        for socket in quic {
            let turn = next.entry(socket.address).or_insert(0);
            if let Some(hand) = hands.get_mut(*turn % count) {
                hand.push(socket);
            }
            *turn += 1;
        }
        hands
    }
}

fn address_of(listener: &proto::InheritedListener) -> Result<SocketAddr, TakeoverError> {
    listener
        .address
        .parse()
        .map_err(|_| TakeoverError::Address(listener.address.clone()))
}

/// Tells the old process this one serves.
pub fn ready(control: &mut UnixStream) {
    let verdict = Verdict::Ready {
        pid: std::process::id(),
    };
    if let Err(e) = handover::send_verdict(control, &verdict) {
        // The old process is gone: this one serves anyway.
        log::warn!("upgrade: cannot tell the old process this one serves: {e}");
    }
}

/// Tells the old process this one will not take over, and why.
pub fn refuse(control: &mut UnixStream, why: &str) {
    log::error!("upgrade: refusing the handover: {why}");
    if let Err(e) = handover::send_verdict(control, &Verdict::Refused(why.to_owned())) {
        log::warn!("upgrade: cannot tell the old process: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_socket_is_dealt_and_addresses_spread() {
        let a: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let sockets: Vec<(SocketAddr, TcpListener)> = (0..5)
            .map(|i| {
                let socket = TcpListener::bind(a).expect("bind");
                let key = if i < 3 {
                    a
                } else {
                    "127.0.0.2:0".parse().expect("addr")
                };
                (key, socket)
            })
            .collect();
        let hands = Successor::deal(sockets, 2);
        let sizes: Vec<usize> = hands.iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 2]);
        let first: Vec<SocketAddr> = hands[0].iter().map(|(k, _)| *k).collect();
        assert_eq!(first, [a, a, "127.0.0.2:0".parse().expect("addr")]);
        assert_eq!(Successor::deal(Vec::new(), 0).len(), 1);
    }
}
