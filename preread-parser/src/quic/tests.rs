//! The RFC test vectors byte for byte, and a flow's first flight in the
//! shapes real clients send it.

use super::test_vectors::*;
use super::{
    ClientInitials, CryptoFault, Fed, InitialPacket, PacketKeys, QuicError, Side, Version,
    connection_close, frames, protect, seal_initial, version_negotiation,
};
use crate::tls::Parsed;

fn client_payload() -> Vec<u8> {
    let mut payload = unhex(CLIENT_CRYPTO_FRAME);
    payload.resize(CLIENT_PAYLOAD_LEN, 0);
    payload
}

/// The ClientHello inside the A.2 CRYPTO frame (type, offset 0, 2-byte length).
fn rfc_hello() -> Vec<u8> {
    unhex(CLIENT_CRYPTO_FRAME)[4..].to_vec()
}

fn seal(version: Version, side: Side, packet: &InitialPacket<'_>, payload: &[u8]) -> Vec<u8> {
    let keys = PacketKeys::initial(version, &unhex(DCID), side);
    let mut out = Vec::new();
    seal_initial(
        &keys,
        &InitialPacket { version, ..*packet },
        payload,
        &mut out,
    );
    out
}

fn client_packet(dcid: &[u8], packet_number: u64) -> InitialPacket<'_> {
    InitialPacket {
        version: Version::V1,
        dcid,
        scid: &[],
        token: &[],
        packet_number,
        pn_len: 4,
    }
}

/// RFC 9001 A.2 and RFC 9369 A.2: sealing the client Initial gives the
/// RFC's bytes, and reading them gives the RFC's ClientHello.
#[test]
fn client_initial_vectors() {
    let dcid = unhex(DCID);
    for (version, expected) in [
        (Version::V1, V1_CLIENT_INITIAL),
        (Version::V2, V2_CLIENT_INITIAL),
    ] {
        let expected = unhex(expected);
        let sealed = seal(
            version,
            Side::Client,
            &client_packet(&dcid, 2),
            &client_payload(),
        );
        assert_eq!(sealed, expected, "{version} client Initial");
        let mut flow = ClientInitials::new(65_536);
        let fed = flow.feed(&expected);
        assert_eq!(
            fed,
            Ok(Fed {
                initials: 1,
                ..Fed::default()
            })
        );
        assert_eq!(flow.crypto_prefix(), rfc_hello());
        let Ok(Parsed::Complete(hello)) = flow.client_hello() else {
            panic!("the RFC's ClientHello is whole");
        };
        assert_eq!(hello.server_name, Some(&b"example.com"[..]));
        let alpn: Vec<&[u8]> = hello.alpn.into_iter().flatten().collect();
        assert_eq!(alpn, [&b"alpn"[..]]);
        assert_eq!((hello.records, hello.end), (0, rfc_hello().len()));
        assert_eq!(flow.version(), Some(version));
        assert_eq!(
            flow.original_dcid().map(|id| id.as_bytes()),
            Some(&dcid[..])
        );
        assert_eq!((flow.packets(), flow.datagrams()), (1, 1));
    }
}

/// RFC 9001 A.3 and RFC 9369 A.3: the server Initial, sealed byte for
/// byte with the server's keys, and opened again.
#[test]
fn server_initial_vectors() {
    let scid = unhex(SERVER_SCID);
    for (version, expected) in [
        (Version::V1, V1_SERVER_INITIAL),
        (Version::V2, V2_SERVER_INITIAL),
    ] {
        let packet = InitialPacket {
            version,
            dcid: &[],
            scid: &scid,
            token: &[],
            packet_number: 1,
            pn_len: 2,
        };
        let sealed = seal(version, Side::Server, &packet, &unhex(SERVER_PAYLOAD));
        let expected = unhex(expected);
        assert_eq!(sealed, expected, "{version} server Initial");
        let keys = PacketKeys::initial(version, &unhex(DCID), Side::Server);
        let mut opened = expected.clone();
        let pn_offset = 1 + 4 + 1 + 1 + scid.len() + 1 + 2;
        let Ok(result) = protect::open(&keys, &mut opened, pn_offset, None) else {
            panic!("the server's keys open the server's Initial");
        };
        assert_eq!(result.packet_number, 1);
        assert_eq!(
            opened[result.payload..result.payload + result.len],
            unhex(SERVER_PAYLOAD)[..]
        );
    }
}

/// The reject a client can read: CONNECTION_CLOSE with CRYPTO_ERROR
/// 0x100 + unrecognized_name (112), opened with the server's keys.
#[test]
fn connection_close_opens_with_the_server_keys() {
    let dcid = unhex(DCID);
    for version in [Version::V1, Version::V2] {
        let reply = connection_close(version, &dcid, &[0xaa, 0xbb], 0x100 + 112, b"");
        let Ok(header) = super::parse_long_header(&reply) else {
            panic!("a long header");
        };
        assert_eq!(
            (header.dcid, header.scid, header.len),
            (&[0xaa, 0xbb][..], &dcid[..], reply.len())
        );
        assert_eq!(header.known_version(), Some(version));
        let keys = PacketKeys::initial(version, &dcid, Side::Server);
        let mut packet = reply.clone();
        let Ok(opened) = protect::open(&keys, &mut packet, header.pn_offset, None) else {
            panic!("the server keys open the close");
        };
        let mut codes = Vec::new();
        let walked = frames::walk(
            &packet[opened.payload..opened.payload + opened.len],
            |frame| {
                if let frames::Frame::ConnectionClose(code) = frame {
                    codes.push(code);
                }
                Ok::<_, QuicError>(())
            },
        );
        assert_eq!((walked, codes), (Ok(()), vec![0x100 + 112]));
        // The client's own keys do not open it.
        let client = PacketKeys::initial(version, &dcid, Side::Client);
        let mut packet = reply.clone();
        assert!(protect::open(&client, &mut packet, header.pn_offset, None).is_err());
    }
}

#[test]
fn version_negotiation_swaps_the_ids_and_offers_both_versions() {
    let packet = version_negotiation(&[1, 2, 3], &[9]);
    assert_eq!(
        packet,
        [
            0xc0, 0, 0, 0, 0, 1, 9, 3, 1, 2, 3, 0, 0, 0, 1, 0x6b, 0x33, 0x43, 0xcf
        ]
    );
}

/// A client Initial datagram of `frames` (padded to 1200 bytes).
fn datagram(dcid: &[u8], packet_number: u64, frames: &[u8]) -> Vec<u8> {
    let keys = PacketKeys::initial(Version::V1, &unhex(DCID), Side::Client);
    let mut payload = frames.to_vec();
    frames::write_padding(&mut payload, 1100usize.saturating_sub(frames.len()));
    let mut out = Vec::new();
    seal_initial(
        &keys,
        &client_packet(dcid, packet_number),
        &payload,
        &mut out,
    );
    out
}

fn crypto(offset: usize, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frames::write_crypto(&mut out, offset as u64, data);
    out
}

/// A hello over two datagrams, the second first, the later one to another
/// DCID (keys still from the first), its frames shuffled and overlapping.
#[test]
fn split_reordered_hello_with_a_new_dcid() {
    let hello = rfc_hello();
    let dcid = unhex(DCID);
    let mut first = crypto(150, &hello[150..]);
    first.extend([0x01]); // PING
    let mut second = crypto(90, &hello[90..160]);
    second.extend(crypto(0, &hello[..100]));
    let late = datagram(&dcid, 0, &first);
    let early = datagram(&[7; 5], 1, &second);
    let mut flow = ClientInitials::new(4096);
    assert_eq!(flow.feed(&late).map(|fed| fed.initials), Ok(1));
    assert!(matches!(flow.client_hello(), Ok(Parsed::Incomplete(_))));
    assert_eq!(flow.feed(&early).map(|fed| fed.initials), Ok(1));
    assert!(matches!(flow.client_hello(), Ok(Parsed::Complete(_))));
    // A duplicate changes nothing.
    assert_eq!(flow.feed(&late).map(|fed| fed.initials), Ok(1));
    assert_eq!(flow.crypto_prefix(), hello);
}

/// An Initial and a 0-RTT packet coalesced, then junk padding: the 0-RTT
/// packet is skipped unread, the junk ignored.
#[test]
fn coalesced_packets_and_zero_rtt() {
    let dcid = unhex(DCID);
    let mut dgram = datagram(&dcid, 0, &crypto(0, &rfc_hello()));
    let mut zero_rtt = vec![0xd0, 0, 0, 0, 1, 8];
    zero_rtt.extend(&dcid);
    zero_rtt.extend([0, 0x40, 30]);
    zero_rtt.extend([0x55; 30]);
    dgram.extend(&zero_rtt);
    dgram.extend([0; 40]);
    let mut flow = ClientInitials::new(4096);
    let fed = flow.feed(&dgram);
    assert_eq!(
        fed,
        Ok(Fed {
            initials: 1,
            skipped: 1,
            ..Fed::default()
        })
    );
    // A datagram of 0-RTT alone, before any Initial: skipped, no error.
    let mut flow = ClientInitials::new(4096);
    assert_eq!(flow.feed(&zero_rtt).map(|fed| fed.skipped), Ok(1));
    assert_eq!(flow.version(), None);
}

#[test]
fn what_can_never_yield_a_hello() {
    let dcid = unhex(DCID);
    let mut tampered = datagram(&dcid, 0, &crypto(0, &rfc_hello()));
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert_eq!(
        ClientInitials::new(4096).feed(&tampered),
        Err(QuicError::Undecryptable)
    );
    // After the first Initial opened, a tampered one is skipped.
    let mut flow = ClientInitials::new(4096);
    assert!(
        flow.feed(&datagram(&dcid, 0, &crypto(0, &rfc_hello()[..50])))
            .is_ok()
    );
    assert_eq!(flow.feed(&tampered).map(|fed| fed.undecryptable), Ok(1));
    let mut unknown = tampered.clone();
    unknown[1..5].copy_from_slice(&[0xff, 0, 0, 0x1d]);
    assert_eq!(
        ClientInitials::new(4096).feed(&unknown),
        Err(QuicError::UnsupportedVersion(0xff00_001d))
    );
    assert_eq!(
        ClientInitials::new(4096).feed(&[0x40, 1, 2]),
        Err(QuicError::NotLongHeader)
    );
    let beyond = datagram(&dcid, 0, &crypto(4000, &[1; 200]));
    assert_eq!(
        ClientInitials::new(4096).feed(&beyond),
        Err(QuicError::Crypto(CryptoFault::BeyondCap {
            end: 4200,
            cap: 4096
        }))
    );
    let stream_frame = datagram(&dcid, 0, &[0x08, 0, 1, 0]);
    assert!(matches!(
        ClientInitials::new(4096).feed(&stream_frame),
        Err(QuicError::Frame(_))
    ));
    // A hello announcing more than the cap is known at once.
    let mut flow = ClientInitials::new(1000);
    assert!(
        flow.feed(&datagram(&dcid, 0, &crypto(0, &[1, 0, 0x10, 0])))
            .is_ok()
    );
    let Ok(Parsed::Incomplete(crate::tls::Needed::AtLeast(n))) = flow.client_hello() else {
        panic!("an incomplete hello");
    };
    assert!(4 + n.get() > 1000);
}

#[test]
fn the_client_closing_is_reported() {
    let dcid = unhex(DCID);
    let mut close = Vec::new();
    frames::write_connection_close(&mut close, 0x0a, 0, b"");
    let mut flow = ClientInitials::new(4096);
    assert_eq!(
        flow.feed(&datagram(&dcid, 0, &close)).map(|fed| fed.closed),
        Ok(Some(0x0a))
    );
}

/// The helper flight: one Initial per 1200-byte datagram, read back whole.
#[test]
fn a_client_first_flight_reads_back() {
    let hello = rfc_hello();
    for version in [Version::V1, Version::V2] {
        let flight =
            super::client_first_flight(version, &[1, 2, 3, 4, 5, 6, 7, 8], &[9], &hello, 100);
        assert_eq!(flight.len(), hello.len().div_ceil(100));
        let mut flow = ClientInitials::new(4096);
        for datagram in flight.iter().rev() {
            assert_eq!(datagram.len(), super::MIN_INITIAL_DATAGRAM);
            assert!(flow.feed(datagram).is_ok());
        }
        assert_eq!(flow.crypto_prefix(), hello);
        assert_eq!(flow.client_scid().map(|id| id.as_bytes()), Some(&[9][..]));
        // A trailing byte after the hello is refused.
        let mut longer = hello.clone();
        longer.push(0);
        let mut flow = ClientInitials::new(4096);
        for datagram in super::client_first_flight(version, &[1; 8], &[], &longer, 1100) {
            assert!(flow.feed(&datagram).is_ok());
        }
        assert!(flow.client_hello().is_err());
    }
}
