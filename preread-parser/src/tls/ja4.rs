//! JA4, FoxIO's TLS client fingerprint (BSD-3-Clause; the algorithm is
//! `technical_details/JA4.md` in github.com/FoxIO-LLC/ja4), of a
//! [`ClientHello`] this crate already parsed and validated.
//!
//! Owns: the fingerprint ([`Ja4`], 36 bytes, `a_b_c`), its raw form
//! ([`Ja4Raw`], `ja4_r`), the syntax of a written fingerprint
//! ([`Ja4::parse`]), and what one walk of a hello tells ([`Ja4Facts`]:
//! the `a` section, and what the cache and the hashes read next). Its
//! parts: the cache (`cache`), the hint a parse gives for nothing
//! (`hint`), the extension set (`set`), GREASE a word at a time
//! (`grease`), the lists' text and hashes (`text`). GREASE values (RFC
//! 8701) are skipped everywhere; ciphers and extensions are sorted; `server_name` and ALPN count in the
//! `a` section but are left out of the extension hash; signature
//! algorithms follow the extensions in the client's order.
//!
//! Must never: allocate for a hello of ordinary size (up to 128 ciphers
//! and as many extensions: the lists are sorted on
//! the stack and hashed through a fixed buffer; only a hostile hello with
//! more spills to the heap, so its cost stays O(n log n)), or panic.
//!
//! Written here rather than taken from the `ja4` crates: they parse the
//! packet again and build `String`s, where the router holds the parsed
//! hello already and must decide without allocating. The SHA-256 is
//! `ring`'s, already in the workspace (rustls depends on it) and fast on
//! CPUs with SHA extensions; a second hash implementation would add a crate
//! for nothing.

use core::fmt;

use super::ClientHello;
use super::extensions::{AlpnProtocols, SupportedVersions};

mod cache;
mod grease;
mod hint;
mod set;
mod text;

pub(crate) use set::ExtensionSet;
use text::{FmtSink, Sink, SortedU16, hash12, write_list};

pub use cache::{ENTRIES as JA4_CACHE_ENTRIES, Ja4Cache, Lookup as Ja4Lookup};
pub use hint::SectionHint;

const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_SIGNATURE_ALGORITHMS: u16 = 0x000d;
const EXT_ALPN: u16 = 0x0010;
const EXT_SUPPORTED_VERSIONS: u16 = 0x002b;

/// Length of a fingerprint: `a` (10) `_` `b` (12) `_` `c` (12).
const JA4_LEN: usize = 36;
const A_LEN: usize = 10;
const HASH_HEX_LEN: usize = 12;
const HEX: &[u8; 16] = b"0123456789abcdef";

/// The transport a ClientHello came over: the fingerprint's first letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// TLS over TCP: `t`.
    Tcp,
    /// QUIC (the ClientHello in CRYPTO frames): `q`.
    Quic,
}

impl Transport {
    fn letter(self) -> u8 {
        match self {
            Self::Tcp => b't',
            Self::Quic => b'q',
        }
    }
}

/// What JA4 reads of a ClientHello the parser accepted: its
/// `legacy_version` and, as on the wire, its cipher suites and extensions
/// block. A caller that keeps where these lie in its window (not the
/// borrowed hello) can fingerprint the hello after its decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ja4Input<'a> {
    /// The hello's `legacy_version`.
    pub legacy_version: u16,
    /// [`ClientHello::cipher_suites`].
    pub cipher_suites: &'a [u8],
    /// [`ClientHello::extensions`].
    pub extensions: &'a [u8],
}

impl<'a> From<&ClientHello<'a>> for Ja4Input<'a> {
    fn from(hello: &ClientHello<'a>) -> Self {
        Self {
            legacy_version: hello.legacy_version,
            cipher_suites: hello.cipher_suites,
            extensions: hello.extensions,
        }
    }
}

/// A JA4 fingerprint, such as `t13d1516h2_8daaf6152771_e5627efa2ab1`.
///
/// Computed by [`Ja4::of`], or read from configuration by [`Ja4::parse`];
/// two are equal when their 36 bytes are, and ordered as their bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ja4 {
    text: [u8; JA4_LEN],
}

impl Ord for Ja4 {
    /// The bytes' order, compared as three big-endian integers: a
    /// `deny_ja4` list is searched by bisection on every fingerprinted
    /// hello, and a byte-wise comparison is a call to `memcmp`.
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.order_key().cmp(&other.order_key())
    }
}

impl PartialOrd for Ja4 {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ja4 {
    /// The fingerprint of `hello` (a [`ClientHello`] or its
    /// [`Ja4Input`]), received over `transport`.
    pub fn of<'a>(hello: impl Into<Ja4Input<'a>>, transport: Transport) -> Self {
        Self::of_facts(&Ja4Facts::of(hello, transport))
    }

    /// The fingerprint of the hello `facts` walked.
    pub fn of_facts(facts: &Ja4Facts<'_>) -> Self {
        let lists = Lists::of(facts);
        let mut text = [b'_'; JA4_LEN];
        text[..A_LEN].copy_from_slice(&lists.a);
        let b_at = A_LEN + 1;
        let c_at = b_at + HASH_HEX_LEN + 1;
        text[b_at..b_at + HASH_HEX_LEN].copy_from_slice(&hash12(|sink| lists.write_b(sink)));
        text[c_at..].copy_from_slice(&hash12(|sink| lists.write_c(sink)));
        Self { text }
    }

    /// The `a` section alone (`t13d1516h2`) of `hello`'s fingerprint: one
    /// walk of its lists, no sort, no hash. A `deny_ja4` list none of
    /// whose entries starts with it cannot hold the fingerprint.
    pub fn section_a_of<'a>(hello: impl Into<Ja4Input<'a>>, transport: Transport) -> [u8; A_LEN] {
        Ja4Facts::of(hello, transport).section_a()
    }

    /// A fingerprint of which only the `a` section is known (the rest
    /// `_`): what the cache keeps of a hello whose full fingerprint no
    /// list wanted. Never returned to a caller.
    pub(crate) fn section_only(a: [u8; A_LEN]) -> Self {
        let mut text = [b'_'; JA4_LEN];
        text[..A_LEN].copy_from_slice(&a);
        Self { text }
    }

    fn order_key(&self) -> (u128, u128, u32) {
        let (first, rest) = self.text.split_at(16);
        let (second, last) = rest.split_at(16);
        let word = |bytes: &[u8]| bytes.try_into().map_or(0, u128::from_be_bytes);
        let tail = last.try_into().map_or(0, u32::from_be_bytes);
        (word(first), word(second), tail)
    }

    /// This fingerprint's `a` section.
    pub fn section_a(&self) -> [u8; A_LEN] {
        let mut a = [0; A_LEN];
        a.copy_from_slice(&self.text[..A_LEN]);
        a
    }

    /// The raw form (`ja4_r`): the `a` section, then the sorted ciphers and
    /// extensions and the signature algorithms, unhashed. It is as long as
    /// the hello's lists, so it is formatted on demand, never stored.
    pub fn raw<'a>(hello: impl Into<Ja4Input<'a>>, transport: Transport) -> Ja4Raw<'a> {
        Ja4Raw {
            hello: hello.into(),
            transport,
        }
    }

    /// Reads a fingerprint as written in a configuration or a log:
    /// `[tqd]` + version + `[di]` + two two-digit counts + two ALPN
    /// characters, `_`, 12 lower-case hex digits, `_`, 12 more.
    pub fn parse(text: &str) -> Result<Self, Ja4FormatError> {
        let bytes = text.as_bytes();
        let Ok(text) = <[u8; JA4_LEN]>::try_from(bytes) else {
            return Err(Ja4FormatError::Length(bytes.len()));
        };
        let bad = |at: usize, expected: &'static str| Ja4FormatError::Character { at, expected };
        if !matches!(text[0], b't' | b'q' | b'd') {
            return Err(bad(0, "t, q or d (the transport)"));
        }
        if !is_version(&text[1..3]) {
            return Err(bad(
                1,
                "a version: 13, 12, 11, 10, s3, s2, d1, d2, d3 or 00",
            ));
        }
        if !matches!(text[3], b'd' | b'i') {
            return Err(bad(3, "d or i (server name present or not)"));
        }
        if let Some(at) = (4..8).find(|&at| !text[at].is_ascii_digit()) {
            return Err(bad(at, "a digit (the cipher and extension counts)"));
        }
        if let Some(at) = (8..10).find(|&at| !text[at].is_ascii_alphanumeric()) {
            return Err(bad(
                at,
                "a letter or digit (the first ALPN's first and last)",
            ));
        }
        for at in [A_LEN, A_LEN + 1 + HASH_HEX_LEN] {
            if text[at] != b'_' {
                return Err(bad(at, "_ (between sections)"));
            }
        }
        let hashes = (A_LEN + 1..JA4_LEN).filter(|&at| text[at] != b'_');
        if let Some(at) = hashes.clone().find(|&at| !is_lower_hex(text[at])) {
            return Err(bad(at, "a lower-case hex digit (the truncated SHA-256)"));
        }
        Ok(Self { text })
    }

    /// The fingerprint as text.
    pub fn as_str(&self) -> &str {
        // Every byte comes from an ASCII table or passed `parse`.
        core::str::from_utf8(&self.text).unwrap_or_default()
    }
}

impl fmt::Display for Ja4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Ja4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ja4({})", self.as_str())
    }
}

impl core::str::FromStr for Ja4 {
    type Err = Ja4FormatError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

/// Why a written fingerprint is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ja4FormatError {
    /// Not 36 characters long.
    Length(usize),
    /// The character at byte `at` is not what that place holds.
    Character {
        /// Byte offset of the first wrong character.
        at: usize,
        /// What belongs there.
        expected: &'static str,
    },
}

impl fmt::Display for Ja4FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(len) => write!(
                f,
                "a JA4 fingerprint is 36 characters (like t13d1516h2_8daaf6152771_e5627efa2ab1), not {len}"
            ),
            Self::Character { at, expected } => {
                write!(
                    f,
                    "character {} of a JA4 fingerprint must be {expected}",
                    at + 1
                )
            }
        }
    }
}

impl std::error::Error for Ja4FormatError {}

/// The raw fingerprint (`ja4_r`) of one hello, formatted by [`fmt::Display`].
#[derive(Debug, Clone, Copy)]
pub struct Ja4Raw<'h> {
    hello: Ja4Input<'h>,
    transport: Transport,
}

impl fmt::Display for Ja4Raw<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let facts = Ja4Facts::of(self.hello, self.transport);
        let lists = Lists::of(&facts);
        let mut sink = FmtSink { f, result: Ok(()) };
        sink.put(&lists.a);
        sink.put(b"_");
        lists.write_b(&mut sink);
        sink.put(b"_");
        lists.write_c(&mut sink);
        sink.result
    }
}

fn is_grease(value: u16) -> bool {
    value & 0x0f0f == 0x0a0a && value >> 8 == value & 0xff
}

fn is_lower_hex(byte: u8) -> bool {
    byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)
}

fn is_version(code: &[u8]) -> bool {
    matches!(
        code,
        b"13" | b"12" | b"11" | b"10" | b"s3" | b"s2" | b"d1" | b"d2" | b"d3" | b"00"
    )
}

fn version_code(version: u16) -> &'static [u8; 2] {
    match version {
        0x0304 => b"13",
        0x0303 => b"12",
        0x0302 => b"11",
        0x0301 => b"10",
        0x0300 => b"s3",
        0x0002 => b"s2",
        0xfeff => b"d1",
        0xfefd => b"d2",
        0xfefc => b"d3",
        _ => b"00",
    }
}

fn u16_pairs(list: &[u8]) -> impl Iterator<Item = u16> + '_ {
    list.chunks_exact(2)
        .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
}

/// The extensions of a block the parser already walked, in order.
fn extensions(mut block: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    core::iter::from_fn(move || {
        let (header, rest) = block.split_at_checked(4)?;
        let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let (data, rest) = rest.split_at_checked(len)?;
        block = rest;
        Some((u16::from_be_bytes([header[0], header[1]]), data))
    })
}

/// The `supported_signature_algorithms` list of a `signature_algorithms`
/// extension (its data, empty when absent); the router does not validate
/// this extension, so a list that overruns it is cut to what is there.
fn signature_algorithms(data: &[u8]) -> &[u8] {
    let Some((declared, list)) = data.split_first_chunk::<2>() else {
        return &[];
    };
    let declared = usize::from(u16::from_be_bytes(*declared));
    &list[..declared.min(list.len())]
}

/// What the `a` section is made of, gathered in one walk of the
/// non-GREASE extensions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct AFacts<'h> {
    legacy_version: u16,
    /// Every extension, `server_name` and ALPN included.
    extension_count: usize,
    has_server_name: bool,
    signature_algorithms: &'h [u8],
    supported_versions: Option<SupportedVersions<'h>>,
    alpn: Option<AlpnProtocols<'h>>,
}

impl<'h> AFacts<'h> {
    /// One non-GREASE extension.
    fn see(&mut self, ext_type: u16, data: &'h [u8]) {
        self.extension_count += 1;
        match ext_type {
            EXT_SERVER_NAME => self.has_server_name = true,
            // The parser validated both lists before accepting the hello.
            EXT_ALPN => self.alpn = super::extensions::alpn(data).ok(),
            EXT_SIGNATURE_ALGORITHMS => self.signature_algorithms = signature_algorithms(data),
            EXT_SUPPORTED_VERSIONS => {
                self.supported_versions = super::extensions::supported_versions(data).ok();
            }
            _ => {}
        }
    }

    /// The version JA4 reports: the highest non-GREASE
    /// `supported_versions` entry, else `legacy_version`.
    fn version(&self) -> u16 {
        reported_version(self.supported_versions, self.legacy_version)
    }

    /// The `a` section of a hello with these facts and `ciphers`.
    fn section_a(&self, transport: Transport, ciphers: &[u8]) -> [u8; A_LEN] {
        let version = self.version();
        let mut a = [0; A_LEN];
        a[0] = transport.letter();
        a[1..3].copy_from_slice(version_code(version));
        a[3] = if self.has_server_name { b'd' } else { b'i' };
        a[4..6].copy_from_slice(&two_digits(grease::count_non_grease(ciphers)));
        a[6..8].copy_from_slice(&two_digits(self.extension_count));
        a[8..10].copy_from_slice(&alpn_chars(self.alpn));
        a
    }
}

/// The GREASE-free lists of one hello, sorted where JA4 sorts them.
struct Lists<'h> {
    ciphers: SortedU16,
    /// Extensions minus `server_name` and ALPN.
    hashed_extensions: SortedU16,
    facts: AFacts<'h>,
    /// The `a` section, whose cipher count is of the list as sent.
    a: [u8; A_LEN],
}

impl<'h> Lists<'h> {
    fn of(walked: &Ja4Facts<'h>) -> Self {
        let mut lists = Self {
            ciphers: SortedU16::new(),
            hashed_extensions: SortedU16::new(),
            facts: walked.facts,
            a: walked.section_a(),
        };
        u16_pairs(walked.input.cipher_suites)
            .filter(|&c| !is_grease(c))
            .for_each(|c| lists.ciphers.insert(c));
        lists.ciphers.finish();
        let hashed = |&t: &u16| !matches!(t, EXT_SERVER_NAME | EXT_ALPN);
        if walked.set.is_exact() {
            // Already in order: `finish` finds the one run.
            walked
                .set
                .ascending()
                .filter(hashed)
                .for_each(|t| lists.hashed_extensions.insert(t));
        } else {
            extensions(walked.input.extensions)
                .map(|(ext_type, _)| ext_type)
                .filter(|&t| !is_grease(t))
                .filter(hashed)
                .for_each(|t| lists.hashed_extensions.insert(t));
        }
        lists.hashed_extensions.finish();
        lists
    }

    fn write_b(&self, sink: &mut impl Sink) {
        write_list(sink, self.ciphers.as_slice().iter().copied());
    }

    fn write_c(&self, sink: &mut impl Sink) {
        write_list(sink, self.hashed_extensions.as_slice().iter().copied());
        let mut signatures = u16_pairs(self.facts.signature_algorithms)
            .filter(|&s| !is_grease(s))
            .peekable();
        if signatures.peek().is_some() {
            sink.put(b"_");
            write_list(sink, signatures);
        }
    }
}

/// What one walk of a hello's lists tells: its `a` section
/// ([`Self::section_a`], formatted when asked) and, for [`Ja4Cache`], its
/// extension set. On the decision path the walk is the parser's own
/// ([`Self::of_hello`]), and the cache tells from these facts alone
/// whether the hello was seen before, its `a` section with it
/// ([`Ja4Cache::lookup_hello`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ja4Facts<'h> {
    input: Ja4Input<'h>,
    transport: Transport,
    facts: AFacts<'h>,
    set: ExtensionSet,
}

impl<'h> Ja4Facts<'h> {
    /// Walks `hello`'s cipher suites and extensions, GREASE left out.
    pub fn of(hello: impl Into<Ja4Input<'h>>, transport: Transport) -> Self {
        let input = hello.into();
        let mut facts = AFacts {
            legacy_version: input.legacy_version,
            ..AFacts::default()
        };
        let mut set = ExtensionSet::default();
        for (ext_type, data) in extensions(input.extensions) {
            if !is_grease(ext_type) {
                facts.see(ext_type, data);
                set.insert(ext_type);
            }
        }
        Self {
            input,
            transport,
            facts,
            set,
        }
    }

    /// [`Self::of`] a hello the parser returned, without walking its
    /// extensions again: the parser's walk gathered their set, the
    /// signature algorithms, ALPN and `supported_versions` already.
    pub fn of_hello(hello: &ClientHello<'h>, transport: Transport) -> Self {
        let set = hello.extension_set;
        if !set.is_exact() {
            return Self::of(hello, transport);
        }
        let input = Ja4Input::from(hello);
        let facts = AFacts {
            legacy_version: input.legacy_version,
            extension_count: set.len(),
            has_server_name: set.has_low(0),
            signature_algorithms: signature_algorithms(hello.signature_algorithms),
            supported_versions: hello.supported_versions,
            alpn: hello.alpn,
        };
        Self {
            input,
            transport,
            facts,
            set,
        }
    }

    /// The fingerprint's `a` section (`t13d1516h2`).
    pub fn section_a(&self) -> [u8; A_LEN] {
        self.facts
            .section_a(self.transport, self.input.cipher_suites)
    }
}

/// The version JA4 reports: the highest non-GREASE entry of `offer`
/// (0 when all are GREASE), else `legacy_version`. Branch-free per entry:
/// the cache's key computes it on every lookup.
fn reported_version(offer: Option<SupportedVersions<'_>>, legacy_version: u16) -> u16 {
    let Some(offer) = offer else {
        return legacy_version;
    };
    offer.iter().fold(0, |highest, version| {
        let counted = if is_grease(version) { 0 } else { version };
        highest.max(counted)
    })
}

fn two_digits(count: usize) -> [u8; 2] {
    let count = count.min(99) as u8;
    [b'0' + count / 10, b'0' + count % 10]
}

/// First and last character of the first ALPN name; when either is not
/// alphanumeric, the first and last hex digit of the name instead.
fn alpn_chars(alpn: Option<AlpnProtocols<'_>>) -> [u8; 2] {
    let first_name = alpn.and_then(|offer| offer.iter().next());
    let Some((&first, &last)) = first_name.and_then(|name| Some((name.first()?, name.last()?)))
    else {
        return *b"00";
    };
    if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() {
        [first, last]
    } else {
        [HEX[usize::from(first >> 4)], HEX[usize::from(last & 0x0f)]]
    }
}
