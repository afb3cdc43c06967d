//! Invariants of the QUIC Initial reader (`preread_parser::quic`).
//!
//! Owns: [`check_quic_initial`], which panics when an invariant breaks.
//! Included with `#[path]` by `preread-parser/tests/quic_fuzz_replay.rs`,
//! so it may use only `preread_parser` and std. Everything is derived from
//! the input bytes: a crash replays exactly.
//!
//! The input is a mode byte and length-prefixed records (2 bytes,
//! big-endian; a last record cut short takes what is left):
//! - mode byte even: each record is the plaintext payload of one client
//!   Initial, sealed here with the shipped `seal_initial` (byte 1 picks the
//!   version, byte 2 the cap), so the fuzzer reaches the frame walk, the
//!   reassembly and the ClientHello parser instead of stopping at the AEAD;
//! - mode byte odd: each record is a raw datagram, as a client sent it.

use preread_parser::quic::{
    ClientInitials, InitialPacket, PacketKeys, QuicError, Side, Version, seal_initial,
};
use preread_parser::tls::Parsed;

/// The DCID every sealed packet carries (RFC 9001 Appendix A's).
const DCID: [u8; 8] = [0x83, 0x94, 0xc8, 0xf0, 0x3e, 0x51, 0x57, 0x08];

/// What a flow came to, for the replay's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuicOutcome {
    /// A whole ClientHello.
    Complete,
    /// A valid prefix.
    Incomplete,
    /// The reader refused a datagram.
    Refused,
    /// The ClientHello parser refused the CRYPTO stream.
    BadHello,
}

fn records(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let [hi, lo, ref rest @ ..] = *data {
        let len = usize::from(u16::from_be_bytes([hi, lo])).min(rest.len());
        out.push(&rest[..len]);
        data = &rest[len..];
    }
    out
}

/// Feeds `datagrams` in order; the outcome and the CRYPTO prefix.
fn read(datagrams: &[Vec<u8>], cap: usize) -> (QuicOutcome, Vec<u8>) {
    let mut flow = ClientInitials::new(cap);
    for (n, datagram) in datagrams.iter().enumerate() {
        let fed = flow.feed(datagram);
        assert_eq!(flow.datagrams(), n + 1, "every datagram is counted");
        assert!(
            flow.crypto_prefix().len() <= cap,
            "the cap bounds the stream"
        );
        match fed {
            Ok(fed) => assert!(
                fed.initials <= datagram.len() / 21,
                "an Initial is at least 21 bytes"
            ),
            Err(error) => {
                assert!(!error.to_string().is_empty());
                return (QuicOutcome::Refused, flow.crypto_prefix().to_vec());
            }
        }
    }
    let outcome = match flow.client_hello() {
        Ok(Parsed::Complete(hello)) => {
            assert_eq!(
                hello.end,
                flow.crypto_prefix().len(),
                "the hello is the whole stream"
            );
            QuicOutcome::Complete
        }
        Ok(Parsed::Incomplete(_)) => QuicOutcome::Incomplete,
        Err(_) => QuicOutcome::BadHello,
    };
    (outcome, flow.crypto_prefix().to_vec())
}

/// Checks the reader's invariants on `data`; panics when one breaks.
pub fn check_quic_initial(data: &[u8]) -> QuicOutcome {
    let Some((&mode, rest)) = data.split_first() else {
        return read(&[], 4096).0;
    };
    if mode & 1 == 1 {
        let datagrams: Vec<Vec<u8>> = records(rest).into_iter().map(<[u8]>::to_vec).collect();
        return read(&datagrams, 4096).0;
    }
    let [selector, cap, ref rest @ ..] = *rest else {
        return read(&[], 4096).0;
    };
    let version = if selector & 1 == 0 {
        Version::V1
    } else {
        Version::V2
    };
    let cap = 64 + usize::from(cap) * 64;
    let keys = PacketKeys::initial(version, &DCID, Side::Client);
    let payloads = records(rest);
    let seal = |n: usize, payload: &[u8], out: &mut Vec<u8>| {
        let packet = InitialPacket {
            version,
            dcid: &DCID,
            scid: &[],
            token: &[],
            packet_number: n as u64,
            pn_len: 4,
        };
        seal_initial(&keys, &packet, payload, out);
    };
    let separate: Vec<Vec<u8>> = payloads
        .iter()
        .enumerate()
        .map(|(n, payload)| {
            let mut out = Vec::new();
            seal(n, payload, &mut out);
            out
        })
        .collect();
    let (outcome, prefix) = read(&separate, cap);
    // The same packets coalesced in one datagram read the same.
    let mut coalesced = Vec::new();
    for (n, payload) in payloads.iter().enumerate() {
        seal(n, payload, &mut coalesced);
    }
    let (together, together_prefix) = read(&[coalesced], cap);
    if outcome != QuicOutcome::Refused && together != QuicOutcome::Refused {
        assert_eq!(
            (outcome, &prefix),
            (together, &together_prefix),
            "coalescing changed the hello"
        );
    }
    // In reverse order (the packet numbers recover either way), a flow
    // that reads without a refusal both ways ends with the same stream.
    let reversed: Vec<Vec<u8>> = separate.iter().rev().cloned().collect();
    let (backwards, backwards_prefix) = read(&reversed, cap);
    if outcome != QuicOutcome::Refused && backwards != QuicOutcome::Refused {
        assert_eq!(
            (outcome, &prefix),
            (backwards, &backwards_prefix),
            "order changed the hello"
        );
    }
    // Sealed with the right keys, no packet is undecryptable.
    if outcome == QuicOutcome::Refused {
        let mut flow = ClientInitials::new(cap);
        let refused = separate.iter().find_map(|d| flow.feed(d).err());
        assert_ne!(
            refused,
            Some(QuicError::Undecryptable),
            "a sealed packet did not open"
        );
    }
    outcome
}
