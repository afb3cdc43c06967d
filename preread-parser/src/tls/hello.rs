//! The ClientHello body (RFC 8446 §4.1.2), parsed with nom's complete
//! combinators: framing already proved the body whole, so running out of
//! bytes means a length field lied.
//!
//! Owns: the fixed fields, the extensions block walk, duplicate extension
//! detection, and the order of faults: every length is decoded before a
//! field's forbidden value is reported, as a server decodes a message
//! before it judges it. Must never: look past the body it is given.

use nom::bytes::complete::take;
use nom::multi::length_data;
use nom::number::complete::{be_u8, be_u16};
use nom::{IResult, Parser};

use super::HandshakeFault;
use super::dedup::ExtensionTypeSet;
use super::extensions::{self, AlpnProtocols, EchKind, SupportedVersions};
use super::forbidden::Forbidden;
use super::ja4::ExtensionSet;

const RANDOM_LEN: usize = 32;
const MAX_SESSION_ID_LEN: usize = 32;

const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_SIGNATURE_ALGORITHMS: u16 = 0x000d;
const EXT_ALPN: u16 = 0x0010;
const EXT_SUPPORTED_VERSIONS: u16 = 0x002b;
const EXT_ENCRYPTED_CLIENT_HELLO: u16 = 0xfe0d;

/// What the proxy keeps of a ClientHello body.
#[derive(Debug, Default)]
pub(super) struct Body<'a> {
    pub(super) legacy_version: u16,
    pub(super) cipher_suites: &'a [u8],
    pub(super) extensions: &'a [u8],
    pub(super) server_name: Option<&'a [u8]>,
    pub(super) alpn: Option<AlpnProtocols<'a>>,
    pub(super) supported_versions: Option<SupportedVersions<'a>>,
    pub(super) ech: Option<EchKind>,
    /// For JA4, gathered on this walk so that it needs none of its own.
    pub(super) signature_algorithms: &'a [u8],
    pub(super) extension_set: ExtensionSet,
}

/// The fault as nom's error type, private so that the public
/// [`HandshakeFault`] implements no trait of nom's: a nom upgrade stays
/// invisible to callers. A combinator's own failure is a length that ran
/// past the body.
#[derive(Debug)]
struct Fault(HandshakeFault);

impl<I> nom::error::ParseError<I> for Fault {
    fn from_error_kind(_input: I, _kind: nom::error::ErrorKind) -> Self {
        Self(HandshakeFault::Truncated)
    }

    fn append(_input: I, _kind: nom::error::ErrorKind, other: Self) -> Self {
        other
    }
}

type Res<'a, O> = IResult<&'a [u8], O, Fault>;

fn fail<T>(fault: HandshakeFault) -> Result<T, nom::Err<Fault>> {
    Err(nom::Err::Failure(Fault(fault)))
}

fn fixed_fields(input: &[u8]) -> Res<'_, (u16, &[u8])> {
    let (input, legacy_version) = be_u16(input)?;
    let (input, _random) = take(RANDOM_LEN).parse(input)?;
    let (input, session_id) = length_data(be_u8).parse(input)?;
    if session_id.len() > MAX_SESSION_ID_LEN {
        return fail(HandshakeFault::SessionIdTooLong);
    }
    let (input, cipher_suites) = length_data(be_u16).parse(input)?;
    if cipher_suites.is_empty() || cipher_suites.len() % 2 != 0 {
        return fail(HandshakeFault::BadCipherSuites);
    }
    let (input, compression_methods) = length_data(be_u8).parse(input)?;
    if compression_methods.is_empty() {
        return fail(HandshakeFault::NoCompressionMethod);
    }
    Ok((input, (legacy_version, cipher_suites)))
}

fn extension(input: &[u8]) -> Res<'_, (u16, &[u8])> {
    let (input, ext_type) = be_u16(input)?;
    let (input, data) = length_data(be_u16).parse(input)?;
    Ok((input, (ext_type, data)))
}

/// Parses a whole ClientHello body (the handshake message minus its header).
pub(super) fn parse_body(body: &[u8]) -> Result<Body<'_>, HandshakeFault> {
    let flatten = |err: nom::Err<Fault>| match err {
        nom::Err::Error(Fault(fault)) | nom::Err::Failure(Fault(fault)) => fault,
        nom::Err::Incomplete(_) => HandshakeFault::Truncated,
    };
    let (rest, (legacy_version, cipher_suites)) = fixed_fields(body).map_err(flatten)?;
    let mut hello = Body {
        legacy_version,
        cipher_suites,
        ..Body::default()
    };
    // A ClientHello without an extensions block is legal (TLS 1.2 and older).
    if rest.is_empty() {
        return Ok(hello);
    }
    let (mut block, declared) = be_u16(rest).map_err(flatten)?;
    if usize::from(declared) != block.len() {
        return Err(HandshakeFault::ExtensionsLengthMismatch);
    }
    hello.extensions = block;
    let mut seen = ExtensionTypeSet::new();
    let mut forbidden = Forbidden::default();
    while !block.is_empty() {
        let (after, (ext_type, data)) = extension(block).map_err(flatten)?;
        if !seen.insert(ext_type) {
            forbidden.note(HandshakeFault::DuplicateExtension(ext_type))?;
        }
        match ext_type {
            EXT_SERVER_NAME => {
                if let Some(name) = forbidden.check(extensions::server_name(data))? {
                    hello.server_name = name;
                }
            }
            EXT_ALPN => hello.alpn = Some(extensions::alpn(data)?),
            EXT_SUPPORTED_VERSIONS => {
                hello.supported_versions = Some(extensions::supported_versions(data)?);
            }
            EXT_ENCRYPTED_CLIENT_HELLO => {
                hello.ech = forbidden.check(extensions::ech(data))?;
            }
            EXT_SIGNATURE_ALGORITHMS => hello.signature_algorithms = data,
            _ => {}
        }
        block = after;
    }
    hello.extension_set = ExtensionSet::from_seen(seen.low(), seen.low_len(), seen.listed());
    forbidden.or(hello)
}
