//! The ALPN side of a frontend's key: [`AlpnSet`], the protocol names of
//! a frontend, validated and kept sorted.
//!
//! Owns: [`AlpnSet`], [`ProtocolList`], [`AlpnError`]. Must never: keep a
//! list whose order or duplicates would make two equal sets two keys.

use core::fmt;

/// The longest ALPN protocol name, in bytes (its length is a u8 on the wire).
pub const MAX_PROTOCOL_LEN: usize = 255;

/// The protocol names of one frontend: non-empty, each 1 to 255 bytes, no
/// duplicates, kept sorted so that two lists of the same names are one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProtocolList(pub(super) Box<[Box<[u8]>]>);

impl ProtocolList {
    /// The names, in byte order (not a preference order: the client's offer
    /// decides).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.0.iter().map(|name| &**name)
    }

    pub(super) fn find(&self, offered: &[u8]) -> Option<&[u8]> {
        self.iter().find(|name| *name == offered)
    }
}

/// The ALPN side of a frontend's key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlpnSet {
    /// The frontend lists no ALPN: it matches any offer, including none, that
    /// no frontend listing protocols took.
    Any,
    /// The frontend serves only these protocols.
    Protocols(ProtocolList),
}

impl AlpnSet {
    /// Builds a [`AlpnSet::Protocols`] from a frontend's list, in any order.
    ///
    /// Refuses an empty list (a frontend that wants any ALPN lists none and
    /// is [`AlpnSet::Any`]), an empty or over-long name, and a name listed
    /// twice.
    pub fn protocols<I>(names: I) -> Result<Self, AlpnError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let mut list: Vec<Box<[u8]>> = Vec::new();
        for name in names {
            let name = name.as_ref();
            if name.is_empty() {
                return Err(AlpnError::EmptyProtocol);
            }
            if name.len() > MAX_PROTOCOL_LEN {
                return Err(AlpnError::ProtocolTooLong { len: name.len() });
            }
            list.push(name.into());
        }
        if list.is_empty() {
            return Err(AlpnError::Empty);
        }
        list.sort_unstable();
        let duplicate = list.windows(2).find_map(|pair| match pair {
            [a, b] if a == b => Some(a.clone()),
            _ => None,
        });
        if let Some(protocol) = duplicate {
            return Err(AlpnError::DuplicateProtocol { protocol });
        }
        Ok(Self::Protocols(ProtocolList(list.into_boxed_slice())))
    }
}

/// `any`, or the protocol names such as `[h2, http/1.1]`.
impl fmt::Display for AlpnSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("any"),
            Self::Protocols(list) => {
                f.write_str("[")?;
                for (i, name) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", name.escape_ascii())?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Why a frontend's ALPN list is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AlpnError {
    /// The list is present but empty.
    Empty,
    /// A protocol name of zero bytes.
    EmptyProtocol,
    /// A protocol name longer than [`MAX_PROTOCOL_LEN`].
    ProtocolTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The same protocol twice in one list.
    DuplicateProtocol {
        /// The repeated protocol name.
        protocol: Box<[u8]>,
    },
}

impl fmt::Display for AlpnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str(
                "the ALPN list is empty: remove it to match any offer, or list protocols \
                 such as `h2`",
            ),
            Self::EmptyProtocol => {
                f.write_str("the ALPN list holds an empty protocol name: remove it")
            }
            Self::ProtocolTooLong { len } => write!(
                f,
                "an ALPN protocol name is {len} bytes long: the limit is {MAX_PROTOCOL_LEN}"
            ),
            Self::DuplicateProtocol { protocol } => write!(
                f,
                "the ALPN list names `{}` twice: list it once",
                protocol.escape_ascii()
            ),
        }
    }
}

impl core::error::Error for AlpnError {}
