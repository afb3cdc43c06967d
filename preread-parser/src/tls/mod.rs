//! The TLS ClientHello as a proxy reads it: record framing, then the body.
//!
//! Owns: [`parse_client_hello`] (and [`parse_client_hello_within`], the same
//! for a caller with a byte cap, and [`parse_client_hello_resuming`], the
//! same again resuming past the records a [`FrameCursor`] already framed),
//! the entry point, [`parse_client_hello_message`] for a hello without a
//! record layer (QUIC's CRYPTO stream), and the types they return. The framing (`record`) is streaming: a window that stops early
//! is [`Parsed::Incomplete`], never an error, unless the bytes already seen
//! can never become a ClientHello. The body (`hello`, `extensions`) is parsed
//! only once framing proved it whole, so any shortfall inside it is a lying
//! length field: [`TlsError::MalformedHandshake`].
//!
//! Must never: allocate when the ClientHello sits in one record, look at bytes
//! after the ClientHello's last record (they belong to the application and
//! are forwarded untouched), or panic.

mod alert;
mod dedup;
mod error;
mod extensions;
mod forbidden;
mod hello;
mod ja4;
mod record;

use core::num::NonZeroUsize;

pub use alert::{AlertDescription, FIRST_FLIGHT_VERSION};
pub use error::{HandshakeFault, RecordFault, TlsError};
pub use extensions::{AlpnProtocols, EchKind, SupportedVersions};
pub use ja4::{
    JA4_CACHE_ENTRIES, Ja4, Ja4Cache, Ja4Facts, Ja4FormatError, Ja4Input, Ja4Lookup, Ja4Raw,
    SectionHint, Transport,
};
pub use record::FrameCursor;

/// Largest TLS record payload a peer may send (RFC 8446 §5.1, 2^14).
pub const MAX_RECORD_LEN: usize = 16384;

/// Length of a TLS record header: type (1), version (2), length (2).
pub const RECORD_HEADER_LEN: usize = 5;

/// Length of a handshake message header: type (1), length (3).
pub const HANDSHAKE_HEADER_LEN: usize = 4;

/// Outcome of a parse that did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// The whole ClientHello is in the window.
    Complete(ClientHello<'a>),
    /// More bytes are needed; the window so far is a valid prefix.
    Incomplete(Needed),
}

/// How many more bytes an incomplete window needs, at least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needed {
    /// The framing does not tell yet.
    Unknown,
    /// At least this many further bytes are needed before the ClientHello
    /// can be complete. An error may still be detected sooner: the bound
    /// is about completion, not about every possible verdict.
    AtLeast(NonZeroUsize),
}

impl Needed {
    pub(crate) fn at_least(n: usize) -> Self {
        NonZeroUsize::new(n).map_or(Self::Unknown, Self::AtLeast)
    }

    /// This count lowered to what `limit` leaves a window of `have` bytes
    /// (at least 1): still a lower bound, and one that takes the window
    /// past `limit` only when it is already at it.
    pub(crate) fn within(self, have: usize, limit: usize) -> Self {
        let room = limit.saturating_sub(have).max(1);
        match self {
            Self::AtLeast(n) => Self::at_least(n.get().min(room)),
            Self::Unknown => Self::Unknown,
        }
    }
}

/// A ClientHello that framing and body validation both accepted.
///
/// Every slice borrows the window (or, for a ClientHello split over several
/// records, the scratch buffer given to [`parse_client_hello`]).
///
/// `#[non_exhaustive]`: later versions may read more of the hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientHello<'a> {
    /// `legacy_version` of the ClientHello body (0x0303 for TLS 1.2 and 1.3).
    pub legacy_version: u16,
    /// The `cipher_suites` vector's body as on the wire (u16 values, GREASE
    /// included): what [`Ja4`] hashes.
    pub cipher_suites: &'a [u8],
    /// The extensions block as on the wire (without its u16 length), every
    /// extension in the client's order; empty when the hello has none.
    pub extensions: &'a [u8],
    /// The `host_name` of `server_name`, exactly as sent (not normalized):
    /// 1 to 255 bytes of printable ASCII.
    pub server_name: Option<&'a [u8]>,
    /// The ALPN offer, in the client's preference order, when the extension is present.
    pub alpn: Option<AlpnProtocols<'a>>,
    /// The `supported_versions` offer, when present.
    pub supported_versions: Option<SupportedVersions<'a>>,
    /// The `encrypted_client_hello` extension's type, when present.
    pub ech: Option<EchKind>,
    /// The `signature_algorithms` extension's data as on the wire (not
    /// validated: JA4 reads it), empty when absent.
    pub signature_algorithms: &'a [u8],
    /// The extension types, GREASE aside, for JA4 ([`Ja4Facts::of_hello`]).
    pub(crate) extension_set: ja4::ExtensionSet,
    /// Offset in the window just past the last record that carries the
    /// ClientHello: what follows is application data.
    pub end: usize,
    /// How many TLS records carry the ClientHello.
    pub records: usize,
    /// Length of the handshake message, its 4-byte header included.
    pub handshake_len: usize,
}

/// Parses the ClientHello at the start of `window` (which must begin with
/// the first TLS record: strip a PROXY header before calling).
///
/// Call with the whole window received so far, from its first byte, every
/// time more bytes arrive. `scratch` is used only when the handshake message
/// spans several records; it is cleared first and may be reused across calls.
pub fn parse_client_hello<'a>(
    window: &'a [u8],
    scratch: &'a mut Vec<u8>,
) -> Result<Parsed<'a>, TlsError> {
    parse_client_hello_within(window, usize::MAX, scratch)
}

/// [`parse_client_hello`] for a caller that holds at most `limit` bytes of
/// the window (`window` itself no longer than that).
///
/// The answer is [`Parsed::Incomplete`] with [`Needed::AtLeast`]`(n)` and
/// `window.len() + n > limit` exactly when the ClientHello cannot end within
/// `limit` bytes: the window is at the limit, or a record length or the
/// handshake length already read announces more (RFC 8446 lets the message
/// span records, so the fewest bytes count a record header per 2^14 bytes
/// still to come). Framing stops at the length that proved it, so the
/// answer is the same however much of the rest has arrived. Otherwise the
/// count is a lower bound no larger than what `limit` leaves.
pub fn parse_client_hello_within<'a>(
    window: &'a [u8],
    limit: usize,
    scratch: &'a mut Vec<u8>,
) -> Result<Parsed<'a>, TlsError> {
    parse_client_hello_resuming(window, limit, &mut FrameCursor::default(), scratch)
}

/// [`parse_client_hello_within`] for a caller that keeps a [`FrameCursor`]
/// per connection: the records framed by earlier calls are not walked
/// again, so a ClientHello in many small records costs each call only the
/// bytes added since the last one, and the whole hello one walk.
///
/// Still call with the whole window from its first byte: the answer is
/// exactly the one [`parse_client_hello_within`] gives for that window.
pub fn parse_client_hello_resuming<'a>(
    window: &'a [u8],
    limit: usize,
    cursor: &mut FrameCursor,
    scratch: &'a mut Vec<u8>,
) -> Result<Parsed<'a>, TlsError> {
    let framed = match record::frame(window, limit, cursor)? {
        record::Framing::Complete(framed) => framed,
        record::Framing::Incomplete(needed) => return Ok(Parsed::Incomplete(needed)),
    };
    let message: &'a [u8] = if framed.records == 1 {
        &window[framed.first_payload..framed.first_payload + framed.handshake_len]
    } else {
        record::reassemble(window, &framed, scratch);
        scratch.as_slice()
    };
    debug_assert_eq!(message.len(), framed.handshake_len);
    let body = hello::parse_body(&message[HANDSHAKE_HEADER_LEN..])?;
    Ok(Parsed::Complete(ClientHello {
        legacy_version: body.legacy_version,
        cipher_suites: body.cipher_suites,
        extensions: body.extensions,
        server_name: body.server_name,
        alpn: body.alpn,
        supported_versions: body.supported_versions,
        ech: body.ech,
        signature_algorithms: body.signature_algorithms,
        extension_set: body.extension_set,
        end: framed.end,
        records: framed.records,
        handshake_len: framed.handshake_len,
    }))
}

/// Parses a ClientHello handshake message carried without a record layer,
/// as QUIC carries it in CRYPTO frames (RFC 9001 §4.1.3): `message` is the
/// contiguous handshake stream from its first byte.
///
/// The answer is [`Parsed::Incomplete`] while `message` is shorter than
/// its header announces; with [`Needed::AtLeast`]`(n)` and
/// `message.len() + n > limit` as soon as the announced length cannot fit
/// within `limit` bytes. A client's Initial CRYPTO stream carries the
/// ClientHello alone, so bytes after it are
/// [`HandshakeFault::TrailingHandshakeData`]. The hello's `end` is its
/// length, header included, and `records` is 0.
pub fn parse_client_hello_message(message: &[u8], limit: usize) -> Result<Parsed<'_>, TlsError> {
    let Some(&msg_type) = message.first() else {
        return Ok(Parsed::Incomplete(Needed::at_least(HANDSHAKE_HEADER_LEN)));
    };
    if msg_type != record::HANDSHAKE_TYPE_CLIENT_HELLO {
        return Err(HandshakeFault::NotClientHello(msg_type).into());
    }
    let [_, a, b, c, ..] = *message else {
        let needed = Needed::at_least(HANDSHAKE_HEADER_LEN - message.len());
        return Ok(Parsed::Incomplete(needed.within(message.len(), limit)));
    };
    let handshake_len =
        HANDSHAKE_HEADER_LEN + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c));
    if message.len() < handshake_len {
        let needed = Needed::at_least(handshake_len - message.len());
        // An announced length past the limit is answered at once, with
        // the count that proves it; below it, the bound stays a lower one.
        return Ok(Parsed::Incomplete(if handshake_len > limit {
            needed
        } else {
            needed.within(message.len(), limit)
        }));
    }
    if message.len() > handshake_len {
        return Err(HandshakeFault::TrailingHandshakeData.into());
    }
    let body = hello::parse_body(&message[HANDSHAKE_HEADER_LEN..])?;
    Ok(Parsed::Complete(ClientHello {
        legacy_version: body.legacy_version,
        cipher_suites: body.cipher_suites,
        extensions: body.extensions,
        server_name: body.server_name,
        alpn: body.alpn,
        supported_versions: body.supported_versions,
        ech: body.ech,
        signature_algorithms: body.signature_algorithms,
        extension_set: body.extension_set,
        end: handshake_len,
        records: 0,
        handshake_len,
    }))
}
