//! The sans-io routing core of preread: one latched decision per connection
//! from its first bytes.
//!
//! Owns: [`SniPrereadCore`] and its message contract ([`Input`], [`Output`],
//! [`Route`]), the reject taxonomy ([`RejectReason`], [`FallbackReason`]),
//! SNI normalization ([`sni`]), the SNI pattern validator ([`pattern`]),
//! the per-listener route table ([`routes`]), who may connect
//! ([`access`]: address lists, the rate per source), what a ClientHello showed of
//! itself ([`HelloSummary`]), and the preread step
//! ([`step`]): the shell's whole policy around the core, which the worker,
//! the simulation and `preread inspect` all run.
//!
//! Must never: perform I/O, read a clock (`now` is an input), draw
//! randomness or take a lock. That is what lets the simulation, the fuzzers
//! and other proxies drive it exactly as the worker does.
//!
//! # Routes and a decision
//!
//! A listener's routes are a [`routes::RouteTable`] of validated SNI
//! patterns, each with an ALPN set, to cluster names. The table and the
//! listener's limits make a [`PrereadConfig`], handed by reference to every
//! call. In these examples `client_hello(sni, alpn)` returns the bytes of a
//! minimal one-record ClientHello (the layout is spelled out in
//! `preread_parser`'s crate docs).
//!
//! ```
//! # fn client_hello(sni: &str, alpn: &str) -> Vec<u8> {
//! #     let (name, protocol) = (sni.as_bytes(), alpn.as_bytes());
//! #     let mut ext = vec![0, 0];
//! #     ext.extend(((name.len() + 5) as u16).to_be_bytes());
//! #     ext.extend(((name.len() + 3) as u16).to_be_bytes());
//! #     ext.push(0);
//! #     ext.extend((name.len() as u16).to_be_bytes());
//! #     ext.extend(name);
//! #     ext.extend([0, 16]);
//! #     ext.extend(((protocol.len() + 3) as u16).to_be_bytes());
//! #     ext.extend(((protocol.len() + 1) as u16).to_be_bytes());
//! #     ext.push(protocol.len() as u8);
//! #     ext.extend(protocol);
//! #     let mut body = vec![3, 3];
//! #     body.extend([1; 32]);
//! #     body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
//! #     body.extend((ext.len() as u16).to_be_bytes());
//! #     body.extend(ext);
//! #     let mut record = vec![22, 3, 1];
//! #     record.extend(((body.len() + 4) as u16).to_be_bytes());
//! #     record.push(1);
//! #     record.extend(&(body.len() as u32).to_be_bytes()[1..]);
//! #     record.extend(body);
//! #     record
//! # }
//! use std::sync::Arc;
//! use std::time::Instant;
//!
//! use preread_core::pattern::validate_sni_pattern;
//! use preread_core::routes::{AlpnSet, RouteTable};
//! use preread_core::{Input, Output, PrereadConfig, RejectReason, SniPrereadCore};
//!
//! let mut routes = RouteTable::new();
//! routes.insert(validate_sni_pattern("api.example.com")?, AlpnSet::Any, Arc::from("api"))?;
//! let h2 = AlpnSet::protocols(["h2"])?;
//! routes.insert(validate_sni_pattern("*.example.com")?, h2, Arc::from("web-h2"))?;
//! routes.insert(validate_sni_pattern("*.example.com")?, AlpnSet::Any, Arc::from("web"))?;
//! let config = PrereadConfig::new(routes);
//!
//! let decide = |sni: &str, alpn: &str| {
//!     let hello = client_hello(sni, alpn);
//!     let input = Input::Bytes { buf: &hello, now: Instant::now() };
//!     SniPrereadCore::new().handle_input(&config, input)
//! };
//! let Output::Routed(route) = decide("WWW.Example.COM.", "h2") else {
//!     panic!("*.example.com offers h2");
//! };
//! assert_eq!(&*route.cluster, "web-h2");
//! // The name as routed: lowercase, without the trailing dot.
//! assert_eq!(route.sni.as_ref().map(|name| name.as_str()), Some("www.example.com"));
//! assert_eq!(route.matched_alpn.as_deref(), Some(&b"h2"[..]));
//!
//! // The exact name wins over the wildcard; the wildcard's catch-all ALPN
//! // takes what no listed protocol did.
//! assert!(matches!(decide("api.example.com", "h2"), Output::Routed(r) if &*r.cluster == "api"));
//! assert!(matches!(decide("shop.example.com", "http/1.1"), Output::Routed(r) if &*r.cluster == "web"));
//! assert_eq!(decide("example.org", "h2"), Output::Reject(RejectReason::SniUnmatched));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The `Input`/`Output` loop
//!
//! One [`SniPrereadCore`] per connection. After every read, feed it the
//! whole window (from the connection's first byte, never a delta) with the
//! time; when it answers [`Output::NeedMore`], read again or, at its
//! `deadline`, feed [`Input::Timeout`]. The first terminal answer, routed or
//! rejected, is latched: every later input returns it again.
//!
//! ```
//! # fn client_hello(sni: &str, alpn: &str) -> Vec<u8> {
//! #     let (name, protocol) = (sni.as_bytes(), alpn.as_bytes());
//! #     let mut ext = vec![0, 0];
//! #     ext.extend(((name.len() + 5) as u16).to_be_bytes());
//! #     ext.extend(((name.len() + 3) as u16).to_be_bytes());
//! #     ext.push(0);
//! #     ext.extend((name.len() as u16).to_be_bytes());
//! #     ext.extend(name);
//! #     ext.extend([0, 16]);
//! #     ext.extend(((protocol.len() + 3) as u16).to_be_bytes());
//! #     ext.extend(((protocol.len() + 1) as u16).to_be_bytes());
//! #     ext.push(protocol.len() as u8);
//! #     ext.extend(protocol);
//! #     let mut body = vec![3, 3];
//! #     body.extend([1; 32]);
//! #     body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
//! #     body.extend((ext.len() as u16).to_be_bytes());
//! #     body.extend(ext);
//! #     let mut record = vec![22, 3, 1];
//! #     record.extend(((body.len() + 4) as u16).to_be_bytes());
//! #     record.push(1);
//! #     record.extend(&(body.len() as u32).to_be_bytes()[1..]);
//! #     record.extend(body);
//! #     record
//! # }
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//!
//! use preread_core::pattern::validate_sni_pattern;
//! use preread_core::routes::{AlpnSet, RouteTable};
//! use preread_core::{Input, Output, PrereadConfig, RejectReason, SniPrereadCore};
//!
//! let mut routes = RouteTable::new();
//! routes.insert(validate_sni_pattern("**.example.com")?, AlpnSet::Any, Arc::from("web"))?;
//! let mut config = PrereadConfig::new(routes);
//! config.timeout = Duration::from_secs(2);
//!
//! let hello = client_hello("a.b.example.com", "h2");
//! let start = Instant::now();
//! let mut core = SniPrereadCore::new();
//! // The client's hello arrives in three reads.
//! let mut deadline = None;
//! for read_end in [3, 40, hello.len()] {
//!     let now = start + Duration::from_millis(read_end as u64);
//!     match core.handle_input(&config, Input::Bytes { buf: &hello[..read_end], now }) {
//!         Output::NeedMore { deadline: due } => {
//!             // Armed by the first bytes, then never moved.
//!             assert_eq!(*deadline.get_or_insert(due), due);
//!             assert_eq!(due, start + Duration::from_millis(3) + config.timeout);
//!         }
//!         Output::Routed(route) => {
//!             assert_eq!(read_end, hello.len());
//!             // Connect to a backend of `route.cluster`, then write the
//!             // window from `route.content_offset` (past a PROXY header, if
//!             // one came), and relay both ways.
//!             assert_eq!(&*route.cluster, "web");
//!             assert_eq!(route.content_offset, 0);
//!         }
//!         Output::Reject(reason) => panic!("refused: {reason}"),
//!     }
//! }
//! // Decided: later inputs change nothing.
//! assert!(matches!(core.handle_input(&config, Input::FrontClosed), Output::Routed(_)));
//!
//! // A client that stops halfway is refused once its deadline passes.
//! let mut slow = SniPrereadCore::new();
//! let half = Input::Bytes { buf: &hello[..40], now: start };
//! let Output::NeedMore { deadline } = slow.handle_input(&config, half) else {
//!     panic!("half a hello");
//! };
//! assert_eq!(
//!     slow.handle_input(&config, Input::Timeout { now: deadline }),
//!     Output::Reject(RejectReason::Fragmented),
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `examples/blocking_proxy.rs` runs this loop in a complete SNI proxy on
//! blocking `std::net` sockets, one thread per connection.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod access;
mod alpn;
mod config;
mod fingerprint;
mod output;
pub mod pattern;
mod preread;
pub mod quic;
mod reject;
pub mod rng;
pub mod routes;
pub mod sni;
mod stable_names;
pub mod step;
mod summary;
mod verdict;
pub mod window;

pub use alpn::AlpnOffer;
pub use config::{MIN_PREREAD_MAX_BYTES, PrereadConfig};
pub use fingerprint::{DenyJa4, DenyRule, ja4};
pub use output::{Input, Output, Route};
pub use preread::SniPrereadCore;
pub use reject::{FallbackReason, RejectReason};
pub use summary::{HelloSummary, TlsVersion};

/// The README's code blocks, compiled and run as doctests so that the first
/// code a reader copies works.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
