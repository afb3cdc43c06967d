//! `preread upgrade`, on the side of the new process: take the handover,
//! check it, and say whether it serves.
//!
//! Owns: reading the state and the inherited listening sockets the old
//! process handed over, validating both with this binary's own rules, and
//! the verdict sent back. Must never: serve a state this binary refuses
//! (it refuses the handover instead, and the old process keeps serving),
//! or keep a descriptor it was not told about.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;

use command::state::ConfigState;

use crate::handover::{self, Inherited, Verdict};

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
}

impl Successor {
    /// Reads and checks the handover on `control`. When it cannot be taken,
    /// the refusal is sent back and returned.
    pub fn receive(mut control: UnixStream, mut inherited: Inherited) -> Result<Self, String> {
        match Self::check(&mut control, &mut inherited) {
            Ok((state, sockets, generation)) => Ok(Self {
                control,
                state,
                sockets,
                generation,
            }),
            Err(why) => {
                refuse(&mut control, &why);
                Err(why)
            }
        }
    }

    fn check(
        control: &mut UnixStream,
        inherited: &mut Inherited,
    ) -> Result<(ConfigState, Sockets, u64), String> {
        let handover = handover::read_handover(control)
            .map_err(|e| format!("cannot read the handover: {e}"))?;
        let mut sockets = Vec::with_capacity(handover.listeners.len());
        for listener in &handover.listeners {
            let address: SocketAddr = listener.address.parse().map_err(|_| {
                format!(
                    "inherited listener {:?} is not an ip:port",
                    listener.address
                )
            })?;
            let socket = inherited
                .listener(listener.fd, address)
                .map_err(|e| format!("inherited listener {address}: {e}"))?;
            sockets.push((address, socket));
        }
        let mut state = ConfigState::default();
        for request in &handover.state {
            state.dispatch(request).map(|_| ()).map_err(|e| {
                format!(
                    "the running state does not fit this binary and config: {}: {}",
                    e.code.as_str(),
                    e.message
                )
            })?;
        }
        Ok((state, sockets, handover.generation))
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
