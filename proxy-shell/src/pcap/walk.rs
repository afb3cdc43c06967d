//! The packets of a capture file: pcap or pcapng, down to TCP segments and
//! UDP datagrams over IPv4 or IPv6.
//!
//! Owns: recognising the file (its magic), walking its records with
//! `pcap-parser`, peeling the link layer (Ethernet with its VLAN tags,
//! Linux cooked SLL and SLL2, raw IP, BSD loopback) and the IP and
//! transport headers with `etherparse`, and the timestamps. A record that
//! runs past the end of the file stops the walk with a [`Stop`]: the
//! packets before it still count. Must never: group packets into flows
//! (`flows` does), read a file (it is given the bytes), or panic on any
//! byte of the file.
//!
//! `pcap-parser` rather than `pcap-file`: it reads both formats from a
//! borrowed slice (the packets stay borrowed, nothing is copied), reports
//! a cut record as such, and ships the cooked-capture headers (SLL, SLL2)
//! that `tcpdump -i any` writes. `etherparse` then reads the IP and
//! transport headers leniently: a packet the snap length cut still gives
//! the bytes it has, flagged as cut.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use etherparse::err::packet::SliceError;
use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
use pcap_parser::data::{PacketData, get_packetdata_linux_sll, get_packetdata_linux_sll2};
use pcap_parser::nom;
use pcap_parser::pcapng::{Block, parse_block_be, parse_block_le, parse_sectionheaderblock};
use pcap_parser::{Linktype, PcapError, parse_pcap_frame, parse_pcap_frame_be, parse_pcap_header};

use super::error::CaptureError;

/// One TCP segment or UDP datagram of the capture.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Packet<'a> {
    /// Its number in the capture, from 1 (as Wireshark numbers frames).
    pub number: usize,
    /// Its timestamp, from the Unix epoch.
    pub at: Duration,
    pub source: SocketAddr,
    pub destination: SocketAddr,
    pub transport: Transport<'a>,
    /// The snap length cut the packet: `payload` ends early.
    pub cut: bool,
}

/// What a [`Packet`] carries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Transport<'a> {
    Tcp {
        seq: u32,
        syn: bool,
        ack: bool,
        fin: bool,
        rst: bool,
        payload: &'a [u8],
    },
    Udp {
        payload: &'a [u8],
    },
}

/// Why the walk ended before the end of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    /// Where the record that could not be read starts.
    pub offset: usize,
    /// The packets read before it.
    pub packets: usize,
    /// Whether the record runs past the end of the file (a capture cut
    /// short, or a length field that lies), rather than being malformed.
    pub past_end: bool,
}

/// What the walk skipped, by kind, for the capture's notes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    /// Records on an interface whose link type is not read.
    pub link_type: usize,
    /// Packets that are neither IP nor carry TCP or UDP (ARP, ICMP, …).
    pub other: usize,
    /// IP fragments (not reassembled).
    pub fragments: usize,
    /// Packets whose headers the snap length cut.
    pub headers_cut: usize,
}

/// What the walk saw besides the packets it handed over.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Walked {
    /// Every record that holds a packet.
    pub records: usize,
    pub skipped: Skipped,
    /// The link types met that are not read.
    pub unknown_link_types: Vec<i32>,
    pub stop: Option<Stop>,
}

/// The link types whose packets are read.
fn readable(link: Linktype) -> bool {
    [
        Linktype::NULL,
        Linktype::ETHERNET,
        Linktype::RAW,
        Linktype::LOOP,
        Linktype::LINUX_SLL,
        Linktype::LINUX_SLL2,
        Linktype::IPV4,
        Linktype::IPV6,
    ]
    .contains(&link)
}

/// Walks the capture `bytes`, handing each TCP segment and UDP datagram
/// to `each` in file order.
pub(crate) fn walk<'a>(
    bytes: &'a [u8],
    mut each: impl FnMut(Packet<'a>),
) -> Result<Walked, CaptureError> {
    let magic: [u8; 4] = match bytes.get(..4) {
        Some(&[a, b, c, d]) => [a, b, c, d],
        _ => {
            return Err(CaptureError::TooShort { len: bytes.len() });
        }
    };
    let mut walked = Walked::default();
    let mut handle = |walked: &mut Walked, link: Linktype, at: Duration, data: &'a [u8]| {
        walked.records += 1;
        let number = walked.records;
        if !readable(link) {
            walked.skipped.link_type += 1;
            if !walked.unknown_link_types.contains(&link.0) {
                walked.unknown_link_types.push(link.0);
            }
            return;
        }
        match transport(link, data) {
            Ok((source, destination, transport, cut)) => each(Packet {
                number,
                at,
                source,
                destination,
                transport,
                cut,
            }),
            Err(Unread::Other) => walked.skipped.other += 1,
            Err(Unread::Fragment) => walked.skipped.fragments += 1,
            Err(Unread::Cut) => walked.skipped.headers_cut += 1,
        }
    };
    match magic {
        [0x0a, 0x0d, 0x0d, 0x0a] => walk_pcapng(bytes, &mut walked, &mut handle)?,
        _ => walk_pcap(bytes, magic, &mut walked, &mut handle)?,
    }
    Ok(walked)
}

fn walk_pcap<'a>(
    bytes: &'a [u8],
    magic: [u8; 4],
    walked: &mut Walked,
    handle: &mut impl FnMut(&mut Walked, Linktype, Duration, &'a [u8]),
) -> Result<(), CaptureError> {
    let (mut rest, header) = parse_pcap_header(bytes).map_err(|error| match error {
        nom::Err::Incomplete(_) => CaptureError::TooShort { len: bytes.len() },
        _ => CaptureError::NotACapture { magic },
    })?;
    let link = header.network;
    if !readable(link) {
        return Err(CaptureError::LinkType { link_type: link.0 });
    }
    let nanos = header.is_nanosecond_precision();
    let frame = if header.is_bigendian() {
        parse_pcap_frame_be
    } else {
        parse_pcap_frame
    };
    while !rest.is_empty() {
        let offset = bytes.len() - rest.len();
        let (after, record) = match frame(rest) {
            Ok(parsed) => parsed,
            Err(error) => {
                walked.stop = Some(stop(offset, walked.records, &error));
                return Ok(());
            }
        };
        rest = after;
        let fraction = if nanos {
            Duration::from_nanos(u64::from(record.ts_usec))
        } else {
            Duration::from_micros(u64::from(record.ts_usec))
        };
        let at = Duration::from_secs(u64::from(record.ts_sec)).saturating_add(fraction);
        handle(walked, link, at, record.data);
    }
    Ok(())
}

/// An interface of a pcapng section: its link type and its clock.
#[derive(Clone, Copy)]
struct Interface {
    link: Linktype,
    /// Timestamp units per second.
    resolution: u64,
    /// Seconds added to every timestamp.
    offset: i64,
}

fn walk_pcapng<'a>(
    bytes: &'a [u8],
    walked: &mut Walked,
    handle: &mut impl FnMut(&mut Walked, Linktype, Duration, &'a [u8]),
) -> Result<(), CaptureError> {
    parse_sectionheaderblock(bytes).map_err(|error| match error {
        nom::Err::Incomplete(_) => CaptureError::TooShort { len: bytes.len() },
        _ => CaptureError::BadSectionHeader,
    })?;
    let mut interfaces: Vec<Interface> = Vec::new();
    let mut big_endian = false;
    let mut rest = bytes;
    while !rest.is_empty() {
        let offset = bytes.len() - rest.len();
        if shorter_than_any_block(rest, big_endian) {
            walked.stop = Some(Stop {
                offset,
                packets: walked.records,
                past_end: false,
            });
            return Ok(());
        }
        let parsed = if big_endian {
            parse_block_be(rest)
        } else {
            parse_block_le(rest)
        };
        let (after, block) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => {
                walked.stop = Some(stop(offset, walked.records, &error));
                return Ok(());
            }
        };
        rest = after;
        let (if_id, ts, data, caplen) = match block {
            Block::SectionHeader(shb) => {
                big_endian = shb.big_endian();
                interfaces.clear();
                continue;
            }
            Block::InterfaceDescription(idb) => {
                interfaces.push(Interface {
                    link: idb.linktype,
                    resolution: idb.ts_resolution().unwrap_or(1_000_000),
                    offset: idb.ts_offset(),
                });
                continue;
            }
            Block::EnhancedPacket(epb) => (
                epb.if_id as usize,
                (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low),
                epb.data,
                epb.caplen as usize,
            ),
            Block::SimplePacket(spb) => (0, 0, spb.data, spb.origlen as usize),
            _ => continue,
        };
        let data = &data[..caplen.min(data.len())];
        let Some(interface) = interfaces.get(if_id).copied() else {
            walked.records += 1;
            walked.skipped.link_type += 1;
            continue;
        };
        handle(walked, interface.link, interface.time(ts), data);
    }
    Ok(())
}

/// Whether the block at the start of `rest` declares a length under the
/// 12 bytes every pcapng block has (its type, its length twice): a
/// malformed block, refused here because `pcap-parser` 0.17 subtracts 12
/// from a length it only checked against the block type's own minimum (4
/// for a process information block), which overflows. A section header
/// block is left to the parser: its length is read in its own byte order,
/// and its minimum is 28.
fn shorter_than_any_block(rest: &[u8], big_endian: bool) -> bool {
    const SECTION_HEADER: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
    let Some((&kind, rest)) = rest.split_first_chunk::<4>() else {
        return false;
    };
    let Some(&len) = rest.first_chunk::<4>() else {
        return false;
    };
    let len = if big_endian {
        u32::from_be_bytes(len)
    } else {
        u32::from_le_bytes(len)
    };
    kind != SECTION_HEADER && len < 12
}

impl Interface {
    fn time(self, ts: u64) -> Duration {
        let resolution = self.resolution.max(1);
        let seconds = (ts / resolution).saturating_add_signed(self.offset);
        let units = u128::from(ts % resolution);
        let nanos = units * 1_000_000_000 / u128::from(resolution);
        Duration::from_secs(seconds).saturating_add(Duration::from_nanos(
            u64::try_from(nanos).unwrap_or(u64::MAX),
        ))
    }
}

fn stop<I>(offset: usize, packets: usize, error: &nom::Err<PcapError<I>>) -> Stop {
    let past_end = matches!(
        error,
        nom::Err::Incomplete(_)
            | nom::Err::Error(PcapError::Incomplete(_) | PcapError::UnexpectedEof)
            | nom::Err::Failure(PcapError::Incomplete(_) | PcapError::UnexpectedEof)
    );
    Stop {
        offset,
        packets,
        past_end,
    }
}

/// Why a record holds no packet the walk hands over.
enum Unread {
    Other,
    Fragment,
    Cut,
}

type Read<'a> = (SocketAddr, SocketAddr, Transport<'a>, bool);

/// The addresses and transport of one link-layer record.
fn transport(link: Linktype, data: &[u8]) -> Result<Read<'_>, Unread> {
    let sliced = match link {
        Linktype::ETHERNET => LaxSlicedPacket::from_ethernet(data).map_err(|_| Unread::Cut)?,
        // The loopback header is the address family, in the capturing
        // host's byte order (NULL) or in network order (LOOP): the IP
        // header's version says the same, in a fixed place.
        Linktype::NULL | Linktype::LOOP => {
            let ip = data.get(4..).ok_or(Unread::Cut)?;
            LaxSlicedPacket::from_ip(ip).map_err(|_| Unread::Other)?
        }
        Linktype::LINUX_SLL | Linktype::LINUX_SLL2 => {
            let cooked = if link == Linktype::LINUX_SLL {
                get_packetdata_linux_sll(data, data.len())
            } else {
                get_packetdata_linux_sll2(data, data.len())
            };
            match cooked {
                Some(PacketData::L3(0x0800 | 0x86dd, ip)) => {
                    LaxSlicedPacket::from_ip(ip).map_err(|_| Unread::Cut)?
                }
                Some(_) => return Err(Unread::Other),
                None => return Err(Unread::Cut),
            }
        }
        _ => LaxSlicedPacket::from_ip(data).map_err(|_| Unread::Other)?,
    };
    let (source, destination, payload): (IpAddr, IpAddr, _) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(ip)) => (
            ip.header().source_addr().into(),
            ip.header().destination_addr().into(),
            ip.payload(),
        ),
        Some(LaxNetSlice::Ipv6(ip)) => (
            ip.header().source_addr().into(),
            ip.header().destination_addr().into(),
            ip.payload(),
        ),
        Some(LaxNetSlice::Arp(_)) => return Err(Unread::Other),
        None => {
            return Err(match sliced.stop_err {
                Some((SliceError::Len(_), _)) => Unread::Cut,
                _ => Unread::Other,
            });
        }
    };
    if payload.fragmented {
        return Err(Unread::Fragment);
    }
    let cut = payload.incomplete;
    let is_transport = matches!(payload.ip_number.0, 6 | 17);
    let (sport, dport, read) = match &sliced.transport {
        Some(TransportSlice::Tcp(tcp)) => (
            tcp.source_port(),
            tcp.destination_port(),
            Transport::Tcp {
                seq: tcp.sequence_number(),
                syn: tcp.syn(),
                ack: tcp.ack(),
                fin: tcp.fin(),
                rst: tcp.rst(),
                payload: tcp.payload(),
            },
        ),
        Some(TransportSlice::Udp(udp)) => (
            udp.source_port(),
            udp.destination_port(),
            Transport::Udp {
                payload: udp.payload(),
            },
        ),
        _ if is_transport => return Err(Unread::Cut),
        _ => return Err(Unread::Other),
    };
    Ok((
        SocketAddr::new(source, sport),
        SocketAddr::new(destination, dport),
        read,
        cut,
    ))
}
