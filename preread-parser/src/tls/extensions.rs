//! The four ClientHello extensions a router reads: `server_name` (RFC 6066
//! §3), ALPN (RFC 7301 §3.1), `supported_versions` (RFC 8446 §4.2.1) and
//! `encrypted_client_hello` (its type byte only).
//!
//! Owns: the validation rules of each, and borrowing views over their lists.
//! Must never: allocate, or accept a list whose inner length disagrees with
//! the extension length.

use nom::multi::length_data;
use nom::number::complete::{be_u8, be_u16};
use nom::{IResult, Parser};

use super::HandshakeFault;
use super::forbidden::Forbidden;

const NAME_TYPE_HOST_NAME: u8 = 0;
const MAX_HOST_NAME_LEN: usize = 255;

/// Every caller maps a failure to the fault of its own extension, so the
/// combinators carry no error of their own.
type Res<'a, O> = IResult<&'a [u8], O, ()>;

/// Splits `data` into a u16-length-prefixed list that must fill it exactly.
fn exact_list<'a>(data: &'a [u8], prefix: impl Fn(&'a [u8]) -> Res<'a, usize>) -> Option<&'a [u8]> {
    match prefix(data) {
        Ok((list, declared)) if declared == list.len() => Some(list),
        _ => None,
    }
}

fn u16_len(input: &[u8]) -> Res<'_, usize> {
    be_u16(input).map(|(rest, n)| (rest, usize::from(n)))
}

fn u8_len(input: &[u8]) -> Res<'_, usize> {
    be_u8(input).map(|(rest, n)| (rest, usize::from(n)))
}

/// A decoded `host_name` that names a host. A lone "." passes the character
/// rules but names nothing once the trailing dot is stripped, so it is
/// refused here rather than surprising the router.
fn host_name(name: &[u8]) -> Result<&[u8], HandshakeFault> {
    if name.is_empty() {
        return Err(HandshakeFault::EmptyHostName);
    }
    let names_a_host = name != b"."
        && name.len() <= MAX_HOST_NAME_LEN
        && name.iter().all(|&b| b.is_ascii_graphic());
    if names_a_host {
        Ok(name)
    } else {
        Err(HandshakeFault::BadHostName)
    }
}

/// The `host_name` of a `server_name` extension; `None` when the list holds
/// only entries of other name types. Every entry is decoded before a
/// forbidden value in one of them is reported.
pub(super) fn server_name(data: &[u8]) -> Result<Option<&[u8]>, HandshakeFault> {
    let mut list = exact_list(data, u16_len).ok_or(HandshakeFault::BadServerNameList)?;
    if list.is_empty() {
        return Err(HandshakeFault::BadServerNameList);
    }
    let mut found = None;
    let mut forbidden = Forbidden::default();
    while !list.is_empty() {
        let entry: Res<'_, (u8, &[u8])> = (be_u8, length_data(be_u16)).parse(list);
        let (rest, (name_type, name)) = entry.map_err(|_| HandshakeFault::BadServerNameList)?;
        if name_type == NAME_TYPE_HOST_NAME {
            if found.is_some() {
                forbidden.note(HandshakeFault::DuplicateHostName)?;
            }
            if let Some(name) = forbidden.check(host_name(name))? {
                found.get_or_insert(name);
            }
        }
        list = rest;
    }
    forbidden.or(found)
}

/// The ALPN protocol list, each name checked non-empty.
pub(super) fn alpn(data: &[u8]) -> Result<AlpnProtocols<'_>, HandshakeFault> {
    let list = exact_list(data, u16_len).ok_or(HandshakeFault::BadAlpn)?;
    AlpnProtocols::from_list(list).ok_or(HandshakeFault::BadAlpn)
}

/// The `supported_versions` offer of a ClientHello: a u8-length list of u16.
pub(super) fn supported_versions(data: &[u8]) -> Result<SupportedVersions<'_>, HandshakeFault> {
    let list = exact_list(data, u8_len).ok_or(HandshakeFault::BadSupportedVersions)?;
    if list.is_empty() || list.len() % 2 != 0 {
        return Err(HandshakeFault::BadSupportedVersions);
    }
    Ok(SupportedVersions { list })
}

/// The type byte of `encrypted_client_hello`.
pub(super) fn ech(data: &[u8]) -> Result<EchKind, HandshakeFault> {
    match data.first() {
        Some(0) => Ok(EchKind::Outer),
        Some(1) => Ok(EchKind::Inner),
        Some(&other) => Err(HandshakeFault::UnknownEchType(other)),
        None => Err(HandshakeFault::EmptyEch),
    }
}

/// The type of an `encrypted_client_hello` extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EchKind {
    /// An outer ClientHello: the real one is encrypted inside; the visible
    /// `server_name` is the ECH public name.
    Outer,
    /// An inner ClientHello sent in the clear.
    Inner,
}

impl EchKind {
    /// The name `preread inspect` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Outer => "outer",
            Self::Inner => "inner",
        }
    }
}

/// The ALPN offer, borrowed: iterate for the protocol names in the client's
/// preference order. Validated when parsed, so iteration cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlpnProtocols<'a> {
    list: &'a [u8],
}

impl<'a> AlpnProtocols<'a> {
    /// Validates a `ProtocolNameList` body (the ALPN extension without its
    /// u16 length): non-empty, made of non-empty u8-length names that tile
    /// it exactly. Lets a caller keep [`Self::list_bytes`] and iterate later.
    pub fn from_list(list: &'a [u8]) -> Option<Self> {
        if list.is_empty() {
            return None;
        }
        let mut rest = list;
        while !rest.is_empty() {
            let name: Res<'_, &[u8]> = length_data(be_u8).parse(rest);
            let (after, name) = name.ok()?;
            if name.is_empty() {
                return None;
            }
            rest = after;
        }
        Some(Self { list })
    }

    /// The validated list body, as on the wire.
    pub fn list_bytes(&self) -> &'a [u8] {
        self.list
    }

    /// The protocol names, most preferred first.
    pub fn iter(&self) -> AlpnIter<'a> {
        AlpnIter { rest: self.list }
    }
}

impl<'a> IntoIterator for AlpnProtocols<'a> {
    type Item = &'a [u8];
    type IntoIter = AlpnIter<'a>;

    fn into_iter(self) -> AlpnIter<'a> {
        self.iter()
    }
}

/// Iterator over the protocol names of an ALPN offer.
#[derive(Debug, Clone)]
pub struct AlpnIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for AlpnIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (&len, tail) = self.rest.split_first()?;
        let len = usize::from(len);
        let Some(name) = tail.get(..len) else {
            debug_assert!(false, "ALPN list was validated when parsed");
            self.rest = &[];
            return None;
        };
        self.rest = &tail[len..];
        Some(name)
    }
}

/// The `supported_versions` offer, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupportedVersions<'a> {
    list: &'a [u8],
}

impl SupportedVersions<'_> {
    /// The offered versions in the client's order, GREASE values included.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        self.list
            .chunks_exact(2)
            .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
    }
}
