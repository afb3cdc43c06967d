//! The stable codes of config, state-file and command validation: `E`
//! codes refuse, `W` codes warn.
//!
//! Owns: [`ErrorCode`] (one variant per rule), its string code (`E101`,
//! `W001`…), whether it is a warning, and the operator-facing
//! [`Explanation`] printed by `preread explain CODE`, with the section of
//! `doc/configure.md` that documents the rule. Must never: renumber or
//! reuse a code: scripts, documents and controllers match on them. A
//! retired rule keeps its number, unused.

mod explanation;
mod explanations;

pub use explanation::Explanation;

preread_core::stable_names! {
    /// One validation rule, with a stable code (see [`ErrorCode::as_str`]):
    /// an error refuses, a warning ([`ErrorCode::is_warning`]) is printed
    /// and the value accepted.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    #[non_exhaustive]
    pub enum ErrorCode {
        /// The config file is not valid TOML, or a value has the wrong type.
        InvalidToml => "E001",
        /// A key the config file format does not know.
        UnknownKey => "E002",
        /// A config value of the right type but outside what is accepted.
        InvalidValue => "E003",
        /// The saved state file holds a line that is not a valid request.
        StateFileCorrupt => "E010",
        /// The saved state file was written by an incompatible version.
        StateFileVersion => "E011",
        /// The saved state file could not be read or written.
        StateFileIo => "E012",
        /// The saved state file's trailer is missing or does not match what
        /// precedes it: the file was cut short, altered or damaged.
        StateFileIntegrity => "E013",
        /// The saved state file holds no routing while the config declares
        /// some, and `empty_saved_state` does not say which one to boot from.
        StateFileEmpty => "E014",
        /// The journal beside the saved state file is damaged before its last
        /// record, or records are missing between the snapshot and it.
        StateJournalCorrupt => "E015",
        /// An address that is not `ip:port` with a non-zero port.
        InvalidAddress => "E101",
        /// `sni_preread_max_bytes` below the 5 bytes of a TLS record header.
        PrereadMaxBytesTooSmall => "E102",
        /// A timeout of 0 where a positive value is required.
        InvalidTimeout => "E103",
        /// `server_first_timeout` on a listener without `default_cluster`.
        ServerFirstWithoutDefaultCluster => "E104",
        /// A listener added again with other settings.
        ListenerConflict => "E105",
        /// A frontend on an address where no listener is declared.
        UnknownListener => "E106",
        /// A setting of the other protocol's listeners (`expect_proxy` on a
        /// QUIC listener, `max_flows` on a TCP one...).
        ListenerProtocolSetting => "E107",
        /// An `allow` or `deny` entry that is not a CIDR prefix.
        InvalidAccessPrefix => "E120",
        /// A `connection_rate_per_ip` that is not a rate.
        InvalidConnectionRate => "E121",
        /// An `ipv6_prefix` past 128.
        InvalidIpv6Prefix => "E122",
        /// A `deny_ja4` entry that is not a JA4 fingerprint.
        InvalidJa4 => "E125",
        /// A frontend's `sni` is not a valid pattern.
        InvalidSniPattern => "E201",
        /// A frontend's `alpn` list is not valid.
        InvalidAlpn => "E202",
        /// Two frontends of one `(address, sni)` list the same ALPN protocol.
        AlpnProtocolTaken => "E203",
        /// A frontend `(address, sni, alpn)` that already exists with another
        /// cluster or other tags.
        FrontendConflict => "E204",
        /// A catch-all frontend (no SNI) and SNI frontends on one listener.
        CatchAllMixedWithSni => "E205",
        /// A second catch-all frontend on one listener.
        MultipleCatchAll => "E206",
        /// A frontend with an ALPN list but no SNI.
        AlpnWithoutSni => "E207",
        /// A `relay` cluster reached through a listener without `expect_proxy`.
        RelayWithoutExpectProxy => "E208",
        /// A frontend or `default_cluster` that joins a listener and a cluster
        /// of different protocols (TCP and QUIC).
        ProtocolMismatch => "E209",
        /// An empty, over-long or non-printable cluster or backend id.
        InvalidId => "E301",
        /// A reference to a cluster that does not exist.
        UnknownCluster => "E302",
        /// A cluster added again with other settings.
        ClusterConflict => "E303",
        /// A backend id already used by another backend.
        DuplicateBackendId => "E304",
        /// A backend added again with another address, weight or backup flag.
        BackendConflict => "E305",
        /// A QUIC cluster with a setting only TCP backends have
        /// (`proxy_protocol`, `health_check`).
        QuicClusterSetting => "E306",
        /// Removing, updating or (de)activating something that does not exist.
        NotFound => "E401",
        /// Removing something that other objects still reference.
        InUse => "E402",
        /// A request that does not change the routing state, sent where only
        /// state changes are applied.
        UnsupportedRequest => "E403",
        /// A route source's fragment declares a cluster that the config file or
        /// another fragment already declares.
        ClusterDeclaredElsewhere => "E501",
        /// A Docker label of preread's that does not parse.
        InvalidLabel => "E502",
        /// Containers that share one label name disagree on a cluster setting.
        LabelsDisagree => "E503",
        /// A fragment's `*:PORT` listener matches several listeners.
        AmbiguousListenerPort => "E504",
        /// A TLS file of `[sources.etcd]` that cannot be read, or holds no
        /// PEM certificate or key.
        EtcdTlsFile => "E505",
        /// `sni_preread_timeout` or `server_first_timeout` under 50 ms.
        PrereadTimeoutShort => "W001",
        /// `front_timeout` or `back_timeout` over a day.
        InactivityTimeoutLong => "W002",
        /// `connect_timeout` over a minute.
        ConnectTimeoutLong => "W003",
        /// A bare integer of seconds that reads like milliseconds.
        SecondsLikeMilliseconds => "W004",
        /// `sni_preread_max_bytes` too small for a post-quantum ClientHello.
        PrereadCapSmall => "W005",
        /// A cluster whose every backend has weight 0.
        NoBackendCanServe => "W006",
    }
    /// Every code, in code order.
    pub const ALL;
}

impl ErrorCode {
    /// The code for a string such as `"E101"` or `"e101"`; `None` for an
    /// unknown code.
    #[must_use]
    pub fn from_code(code: &str) -> Option<Self> {
        let code = code.trim();
        Self::ALL
            .iter()
            .copied()
            .find(|c| c.as_str().eq_ignore_ascii_case(code))
    }

    /// Whether the code only warns (`W…`): the value is accepted,
    /// but probably not what the operator meant.
    #[must_use]
    pub const fn is_warning(self) -> bool {
        self.as_str().as_bytes()[0] == b'W'
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn codes_are_unique_and_well_formed() {
        let mut seen = BTreeSet::new();
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} used twice");
            assert_eq!(text.len(), 4, "{text}");
            assert!(text.starts_with('E') || text.starts_with('W'), "{text}");
            assert_eq!(code.is_warning(), text.starts_with('W'), "{text}");
            assert!(text[1..].bytes().all(|b| b.is_ascii_digit()), "{text}");
            assert_eq!(code.to_string(), text);
        }
    }

    #[test]
    fn all_is_in_code_order() {
        assert!(
            ErrorCode::ALL
                .windows(2)
                .all(|pair| pair[0].as_str() < pair[1].as_str())
        );
    }

    /// The codes other components and documents already use.
    #[test]
    fn codes_are_stable() {
        for (code, text) in [
            (ErrorCode::InvalidToml, "E001"),
            (ErrorCode::UnknownKey, "E002"),
            (ErrorCode::InvalidValue, "E003"),
            (ErrorCode::StateFileCorrupt, "E010"),
            (ErrorCode::StateFileVersion, "E011"),
            (ErrorCode::StateFileIo, "E012"),
            (ErrorCode::StateFileIntegrity, "E013"),
            (ErrorCode::StateFileEmpty, "E014"),
            (ErrorCode::StateJournalCorrupt, "E015"),
            (ErrorCode::InvalidAddress, "E101"),
            (ErrorCode::PrereadMaxBytesTooSmall, "E102"),
            (ErrorCode::InvalidTimeout, "E103"),
            (ErrorCode::ServerFirstWithoutDefaultCluster, "E104"),
            (ErrorCode::ListenerConflict, "E105"),
            (ErrorCode::UnknownListener, "E106"),
            (ErrorCode::ListenerProtocolSetting, "E107"),
            (ErrorCode::InvalidSniPattern, "E201"),
            (ErrorCode::InvalidAlpn, "E202"),
            (ErrorCode::AlpnProtocolTaken, "E203"),
            (ErrorCode::FrontendConflict, "E204"),
            (ErrorCode::CatchAllMixedWithSni, "E205"),
            (ErrorCode::MultipleCatchAll, "E206"),
            (ErrorCode::AlpnWithoutSni, "E207"),
            (ErrorCode::RelayWithoutExpectProxy, "E208"),
            (ErrorCode::ProtocolMismatch, "E209"),
            (ErrorCode::InvalidId, "E301"),
            (ErrorCode::UnknownCluster, "E302"),
            (ErrorCode::ClusterConflict, "E303"),
            (ErrorCode::DuplicateBackendId, "E304"),
            (ErrorCode::BackendConflict, "E305"),
            (ErrorCode::QuicClusterSetting, "E306"),
            (ErrorCode::NotFound, "E401"),
            (ErrorCode::InUse, "E402"),
            (ErrorCode::UnsupportedRequest, "E403"),
            (ErrorCode::ClusterDeclaredElsewhere, "E501"),
            (ErrorCode::InvalidLabel, "E502"),
            (ErrorCode::LabelsDisagree, "E503"),
            (ErrorCode::AmbiguousListenerPort, "E504"),
            (ErrorCode::EtcdTlsFile, "E505"),
            (ErrorCode::PrereadTimeoutShort, "W001"),
            (ErrorCode::InactivityTimeoutLong, "W002"),
            (ErrorCode::ConnectTimeoutLong, "W003"),
            (ErrorCode::SecondsLikeMilliseconds, "W004"),
            (ErrorCode::PrereadCapSmall, "W005"),
            (ErrorCode::NoBackendCanServe, "W006"),
        ] {
            assert_eq!(code.as_str(), text, "{code:?}");
        }
    }

    #[test]
    fn from_code_round_trips_case_insensitively() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(code.as_str()), Some(code));
            let lower = code.as_str().to_ascii_lowercase();
            assert_eq!(ErrorCode::from_code(&lower), Some(code));
        }
        assert_eq!(ErrorCode::from_code("E999"), None);
        assert_eq!(ErrorCode::from_code(""), None);
        assert_eq!(ErrorCode::from_code("101"), None);
    }

    #[test]
    fn every_code_is_explained() {
        let mut titles = BTreeSet::new();
        for code in ErrorCode::ALL {
            let e = code.explain();
            for (part, text) in [
                ("title", e.title),
                ("meaning", e.meaning),
                ("accepted", e.accepted),
                ("fix", e.fix),
            ] {
                assert!(!text.trim().is_empty(), "{code}: empty {part}");
            }
            assert!(titles.insert(e.title), "{code}: title shared");
            let shown = e.to_string();
            assert!(shown.contains(e.fix), "{code}");
        }
    }

    #[test]
    fn catch_all_explanation_points_at_default_cluster() {
        assert!(
            ErrorCode::CatchAllMixedWithSni
                .explain()
                .fix
                .contains("default_cluster")
        );
    }
}
