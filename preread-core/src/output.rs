//! The core's message contract: what the shell feeds in, what it gets back.
//!
//! Owns: [`Input`], [`Output`] and [`Route`]. Must never: carry a borrow of
//! the window past the call (outputs are latched and replayed later).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use crate::alpn::AlpnOffer;
use crate::pattern::SniPattern;
use crate::reject::{FallbackReason, RejectReason};
use crate::routes::ClusterId;
use crate::sni::HostName;

/// What happened on the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input<'a> {
    /// The whole window received so far, from the connection's first byte.
    /// Feed it again, whole, after every read that added bytes; never a delta.
    Bytes {
        /// The window.
        buf: &'a [u8],
        /// The current time, from the shell's clock.
        now: Instant,
    },
    /// A timer of the shell fired: the preread deadline, or (before the
    /// client spoke, see [`crate::SniPrereadCore::client_spoke`]) the
    /// listener's server-first timer.
    Timeout {
        /// The current time, from the shell's clock.
        now: Instant,
    },
    /// The client closed (or reset) its side before a decision.
    FrontClosed,
}

/// The core's answer to one input.
///
/// Deliberately not `#[non_exhaustive]`: these three are the whole
/// contract, and an answer an embedder does not handle would be a
/// connection left hanging. A new one would be a breaking change.
#[must_use = "an Output tells the shell what to do with the connection"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Keep reading; call again with the grown window, or with
    /// `Input::Timeout` at `deadline` (absolute; it never moves).
    NeedMore {
        /// When the ClientHello must be complete.
        deadline: Instant,
    },
    /// Connect to a backend of `route.cluster` and replay the window.
    /// Shared, because the latch keeps the decision and hands out the same
    /// one on every later input: a refcount, not a deep copy, and an
    /// `Output` of a few words instead of a few hundred bytes.
    Routed(Arc<Route>),
    /// Close the connection; count it under the reason's metric.
    Reject(RejectReason),
}

impl Output {
    /// Whether this output ends the preread (and is latched).
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Self::NeedMore { .. })
    }
}

/// Where a connection goes and what the core learned on the way.
///
/// `#[non_exhaustive]`: later versions may learn more from a ClientHello;
/// outside the core, start from [`Route::unread`] and set fields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Route {
    /// The cluster whose backends serve the connection.
    pub cluster: ClusterId,
    /// Length of the inbound PROXY header at the start of the window (0
    /// without one): the ClientHello starts here.
    pub content_offset: usize,
    /// Offset in the window just past the ClientHello's last record; `None`
    /// when no ClientHello was parsed (non-TLS or server-first fallback).
    pub hello_end: Option<usize>,
    /// The client address the inbound PROXY header gave, if any.
    pub proxy_source: Option<SocketAddr>,
    /// The normalized SNI, when the client sent one.
    pub sni: Option<HostName>,
    /// The client's ALPN offer, when it sent one.
    pub alpn: Option<AlpnOffer>,
    /// The frontend pattern that matched (`None` for a fallback).
    pub matched_sni: Option<SniPattern>,
    /// The protocol of the client's offer that chose the frontend; `None`
    /// when a frontend without ALPN took the connection, or for a fallback.
    pub matched_alpn: Option<Box<[u8]>>,
    /// Set when the listener's default cluster took a connection that would
    /// otherwise have been refused, and why.
    pub fallback: Option<FallbackReason>,
}

impl Route {
    /// A route to `cluster` decided without a ClientHello: a catch-all
    /// listener, or the server-first fallback. Nothing was parsed, so
    /// nothing but the cluster and the fallback reason is known.
    pub fn unread(cluster: ClusterId, fallback: Option<FallbackReason>) -> Self {
        Self {
            cluster,
            content_offset: 0,
            hello_end: None,
            proxy_source: None,
            sni: None,
            alpn: None,
            matched_sni: None,
            matched_alpn: None,
            fallback,
        }
    }
}
