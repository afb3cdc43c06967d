//! A rejected or fallback QUIC flow kept for `preread rejects`: its client
//! datagrams at the decision, framed as `preread inspect --quic` reads
//! them (each datagram preceded by its length, 2 bytes big-endian).
//!
//! Owns: that framing of a flow's window, and handing it to the worker's
//! ring with what the ring keeps of a flow. Must never: change a byte of a
//! datagram, or keep a reference to the flow (the ring holds a copy).

use std::net::SocketAddr;
use std::time::SystemTime;

use crate::vocabulary::Outcome;
use crate::worker::ctx::Ctx;
use crate::worker::rejects::Captured;

/// The datagrams `held`, then `current` when not empty, each preceded by
/// its length (2 bytes, big-endian). A datagram over 65,535 bytes cannot
/// be read from a UDP socket, so none is left out.
pub(super) fn frame(held: &[Vec<u8>], current: &[u8]) -> Vec<u8> {
    let all = held
        .iter()
        .map(Vec::as_slice)
        .chain(Some(current).filter(|d| !d.is_empty()));
    let mut window = Vec::new();
    for datagram in all {
        if let Ok(len) = u16::try_from(datagram.len()) {
            window.extend_from_slice(&len.to_be_bytes());
            window.extend_from_slice(datagram);
        }
    }
    window
}

/// Keeps the flow of `client` on `listener`, decided as `outcome`, with
/// its datagrams `held` and `current`.
pub(super) fn keep(
    ctx: &mut Ctx,
    (listener, client): (SocketAddr, SocketAddr),
    outcome: Outcome,
    (held, current): (&[Vec<u8>], &[u8]),
) {
    if !ctx.rejects.is_on() {
        return;
    }
    let what = Captured {
        at: SystemTime::now(),
        listener,
        client,
        proxy_client: None,
        outcome,
        quic: true,
    };
    ctx.rejects.capture(&frame(held, current), what);
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn each_datagram_follows_its_length_in_order() {
        let held = vec![vec![0xc0, 1, 2], vec![0xc1; 300]];
        let window = frame(&held, &[0x40, 9]);
        let mut expected = vec![0, 3, 0xc0, 1, 2, 1, 44];
        expected.extend_from_slice(&[0xc1; 300]);
        expected.extend_from_slice(&[0, 2, 0x40, 9]);
        assert_eq!(window, expected);
        assert_eq!(frame(&held[..1], &[]), vec![0, 3, 0xc0, 1, 2]);
        assert!(frame(&[], &[]).is_empty());
    }
}
