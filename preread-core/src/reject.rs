//! Why a connection was refused, or why it went to the default cluster.
//!
//! Owns: [`RejectReason`] (the eleven reasons of the architecture, the
//! two of QUIC listeners, and `access_denied`) and
//! [`FallbackReason`], with their stable snake_case names, declared with
//! [`crate::stable_names!`]: a new variant without a name does not compile
//! (the shell's metric names build on them). Must never: share a name between two
//! reasons.

crate::stable_names! {
    /// Why the core refused a connection. Deliberately not `#[non_exhaustive]`:
    /// embedders must handle every reason, and a new one is a breaking change.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum RejectReason {
        /// The first byte is not a TLS handshake record (or the second not major
        /// version 3): a plain-TCP client or an SSLv2-style hello.
        NotTls => "not_tls",
        /// The record layer broke RFC 8446 §5.1: an empty or oversized record, or
        /// a record of another type inside the ClientHello.
        MalformedRecord => "malformed_record",
        /// The first handshake message is not a well-formed ClientHello, or its
        /// `host_name` is not a usable name.
        MalformedHandshake => "malformed_handshake",
        /// The preread deadline passed before the ClientHello was complete.
        Fragmented => "fragmented",
        /// The window reached the byte cap while still incomplete.
        TooLarge => "too_large",
        /// A well-formed ClientHello without a `host_name`.
        NoSni => "no_sni",
        /// No `host_name`, but an `encrypted_client_hello` extension: an ECH
        /// client with no outer name to route on.
        EchOuterAbsent => "ech_outer_absent",
        /// The SNI matched no frontend of the listener.
        SniUnmatched => "sni_unmatched",
        /// The SNI matched, but no frontend of that name accepts the client's ALPN offer.
        AlpnUnmatched => "alpn_unmatched",
        /// The listener expects a PROXY header and the bytes are not a valid one.
        ProxyHeaderInvalid => "proxy_header_invalid",
        /// The client closed before a decision.
        FrontClosed => "front_closed",
        /// QUIC: the client's first Initial packet does not open with the
        /// keys its Destination Connection ID gives (RFC 9001 §5.2).
        QuicUndecryptable => "quic_undecryptable",
        /// QUIC: a version the proxy cannot read (neither v1 nor v2).
        QuicVersion => "quic_version",
        /// An access rule of the listener or of the routed cluster refused
        /// the client (a `deny_ja4` list holds its fingerprint).
        AccessDenied => "access_denied",
    }
    /// Every reason, for tests and metric registration.
    pub const ALL;
}

impl RejectReason {
    /// The fallback this reason turns into when the listener has a
    /// `default_cluster`; `None` for reasons that are never routed anywhere.
    pub fn fallback(self) -> Option<FallbackReason> {
        match self {
            Self::NotTls => Some(FallbackReason::NotTls),
            Self::NoSni => Some(FallbackReason::NoSni),
            Self::SniUnmatched => Some(FallbackReason::SniUnmatched),
            Self::EchOuterAbsent => Some(FallbackReason::EchOuterAbsent),
            Self::MalformedRecord
            | Self::MalformedHandshake
            | Self::Fragmented
            | Self::TooLarge
            | Self::AlpnUnmatched
            | Self::ProxyHeaderInvalid
            | Self::FrontClosed
            | Self::QuicUndecryptable
            | Self::QuicVersion
            | Self::AccessDenied => None,
        }
    }
}

crate::stable_names! {
    /// Why a connection went to the listener's `default_cluster`. Not
    /// `#[non_exhaustive]`, for the reason [`RejectReason`] is not.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum FallbackReason {
        /// The client does not speak TLS.
        NotTls => "not_tls",
        /// A ClientHello without SNI.
        NoSni => "no_sni",
        /// An SNI no frontend matched.
        SniUnmatched => "sni_unmatched",
        /// An ECH ClientHello without an outer SNI.
        EchOuterAbsent => "ech_outer_absent",
        /// The client sent nothing for `server_first_timeout`: a protocol where
        /// the server speaks first (SMTP, many databases).
        ServerFirst => "server_first",
    }
    /// Every fallback reason, for tests and metric registration.
    pub const ALL;
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{FallbackReason, RejectReason};

    #[test]
    fn every_reason_has_a_distinct_name() {
        let rejects: HashSet<_> = RejectReason::ALL.map(RejectReason::as_str).into();
        assert_eq!(rejects.len(), 14);
        let fallbacks: HashSet<_> = FallbackReason::ALL.map(FallbackReason::as_str).into();
        assert_eq!(fallbacks.len(), FallbackReason::ALL.len());
    }

    #[test]
    fn display_is_the_stable_name() {
        for reason in RejectReason::ALL {
            assert_eq!(reason.to_string(), reason.as_str());
        }
        for reason in FallbackReason::ALL {
            assert_eq!(reason.to_string(), reason.as_str());
        }
    }

    #[test]
    fn only_the_four_unrouted_shapes_fall_back() {
        let falling: Vec<_> = RejectReason::ALL
            .into_iter()
            .filter_map(RejectReason::fallback)
            .collect();
        assert_eq!(
            falling,
            [
                FallbackReason::NotTls,
                FallbackReason::NoSni,
                FallbackReason::EchOuterAbsent,
                FallbackReason::SniUnmatched
            ]
        );
    }
}
