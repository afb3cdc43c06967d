//! The names of enumerated settings (`load_balancing`, `proxy_protocol`,
//! `reject_with`, a health check's `kind`): one table per setting that the config file, the command
//! line and the printed lists all read, so their spellings cannot drift.
//!
//! Owns: each value's name (the config's snake_case, which `--help`, `cluster
//! list` and messages show) and the other spellings accepted for it: the
//! command line's kebab-case and Sōzu's upper-case names. Must never: know
//! where a setting is written; the config loader and the CLI say that.

use crate::proto;

/// One value of a setting: the name it is shown with, and the other
/// spellings accepted for it.
#[derive(Debug, Clone, Copy)]
pub struct Spelling<T: 'static> {
    /// The value.
    pub value: T,
    /// The config's spelling, shown everywhere.
    pub name: &'static str,
    /// Also accepted, wherever the setting is written.
    pub aliases: &'static [&'static str],
}

/// `load_balancing` / `--load-balancing`.
pub const LOAD_BALANCING: &[Spelling<proto::LoadBalancing>] = &[
    Spelling {
        value: proto::LoadBalancing::RoundRobin,
        name: "round_robin",
        aliases: &["round-robin", "ROUND_ROBIN"],
    },
    Spelling {
        value: proto::LoadBalancing::Random,
        name: "random",
        aliases: &["RANDOM"],
    },
    Spelling {
        value: proto::LoadBalancing::LeastConnections,
        name: "least_connections",
        aliases: &["least-connections", "LEAST_LOADED"],
    },
    Spelling {
        value: proto::LoadBalancing::PowerOfTwo,
        name: "power_of_two",
        aliases: &["power-of-two", "POWER_OF_TWO"],
    },
];

/// `proxy_protocol` / `--proxy-protocol`.
pub const PROXY_PROTOCOL: &[Spelling<proto::ProxyProtocol>] = &[
    Spelling {
        value: proto::ProxyProtocol::None,
        name: "none",
        aliases: &[],
    },
    Spelling {
        value: proto::ProxyProtocol::Send,
        name: "send",
        aliases: &[],
    },
    Spelling {
        value: proto::ProxyProtocol::Relay,
        name: "relay",
        aliases: &[],
    },
];

/// `reject_with` / `--reject-with`.
pub const REJECT_WITH: &[Spelling<proto::RejectWith>] = &[
    Spelling {
        value: proto::RejectWith::Alert,
        name: "alert",
        aliases: &[],
    },
    Spelling {
        value: proto::RejectWith::Close,
        name: "close",
        aliases: &[],
    },
    Spelling {
        value: proto::RejectWith::Reset,
        name: "reset",
        aliases: &[],
    },
    Spelling {
        value: proto::RejectWith::Drop,
        name: "drop",
        aliases: &[],
    },
];

/// A listener's or a cluster's `protocol` / `--protocol`.
pub const PROTOCOL: &[Spelling<proto::ListenerProtocol>] = &[
    Spelling {
        value: proto::ListenerProtocol::Tcp,
        name: "tcp",
        aliases: &["TCP"],
    },
    Spelling {
        value: proto::ListenerProtocol::Quic,
        name: "quic",
        aliases: &["QUIC"],
    },
];

/// `health_check = { kind }` / `--health-check`.
pub const HEALTH_CHECK_KIND: &[Spelling<proto::HealthCheckKind>] = &[
    Spelling {
        value: proto::HealthCheckKind::Tcp,
        name: "tcp",
        aliases: &[],
    },
    Spelling {
        value: proto::HealthCheckKind::Tls,
        name: "tls",
        aliases: &[],
    },
];

/// The value written `text` (its name or an alias, exactly).
#[must_use]
pub fn parse<T: Copy>(table: &[Spelling<T>], text: &str) -> Option<T> {
    table
        .iter()
        .find(|spelling| spelling.name == text || spelling.aliases.contains(&text))
        .map(|spelling| spelling.value)
}

/// The name `value` is shown with.
#[must_use]
pub fn name_of<T: Copy + PartialEq>(table: &[Spelling<T>], value: T) -> Option<&'static str> {
    table
        .iter()
        .find(|spelling| spelling.value == value)
        .map(|spelling| spelling.name)
}

/// A string as a TOML file writes it: in double quotes, with `"`, `\`
/// and control characters escaped. Messages show values this way, never
/// as Rust's debug form.
#[must_use]
pub fn quoted(text: &str) -> String {
    let mut shown = String::with_capacity(text.len() + 2);
    shown.push('"');
    for c in text.chars() {
        match c {
            '"' => shown.push_str("\\\""),
            '\\' => shown.push_str("\\\\"),
            '\n' => shown.push_str("\\n"),
            '\t' => shown.push_str("\\t"),
            c if c.is_control() => shown.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => shown.push(c),
        }
    }
    shown.push('"');
    shown
}

/// `"a", "b" or "c"`, then the other spellings, for "use …" messages.
#[must_use]
pub fn accepted<T>(table: &[Spelling<T>]) -> String {
    let names: Vec<String> = table.iter().map(|s| format!("\"{}\"", s.name)).collect();
    let mut shown = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    let aliases: Vec<&str> = table
        .iter()
        .flat_map(|s| s.aliases.iter().copied())
        .collect();
    if !aliases.is_empty() {
        shown.push_str(&format!(" (also written {})", aliases.join(", ")));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spelling names one value, in every table, and each value is
    /// there once: a spelling cannot mean two things.
    #[test]
    fn spellings_are_unambiguous() {
        fn check<T: Copy + PartialEq + core::fmt::Debug>(table: &[Spelling<T>]) {
            let mut seen: Vec<&str> = Vec::new();
            for spelling in table {
                for text in std::iter::once(&spelling.name).chain(spelling.aliases) {
                    assert!(!seen.contains(text), "{text} twice");
                    seen.push(text);
                    assert_eq!(parse(table, text), Some(spelling.value), "{text}");
                }
                assert_eq!(name_of(table, spelling.value), Some(spelling.name));
                let count = table.iter().filter(|s| s.value == spelling.value).count();
                assert_eq!(count, 1, "{:?}", spelling.value);
            }
            assert_eq!(parse(table, "nope"), None);
        }
        check(LOAD_BALANCING);
        check(PROXY_PROTOCOL);
        check(REJECT_WITH);
        check(PROTOCOL);
        check(HEALTH_CHECK_KIND);
    }

    /// Every protobuf value has a spelling, so none is left unnamed.
    #[test]
    fn every_value_is_spelt() {
        for value in 0..8 {
            if let Ok(lb) = proto::LoadBalancing::try_from(value) {
                assert!(name_of(LOAD_BALANCING, lb).is_some(), "{lb:?}");
            }
            if let Ok(pp) = proto::ProxyProtocol::try_from(value) {
                assert!(name_of(PROXY_PROTOCOL, pp).is_some(), "{pp:?}");
            }
            if let Ok(with) = proto::RejectWith::try_from(value) {
                assert!(name_of(REJECT_WITH, with).is_some(), "{with:?}");
            }
            if let Ok(protocol) = proto::ListenerProtocol::try_from(value) {
                assert!(name_of(PROTOCOL, protocol).is_some(), "{protocol:?}");
            }
            if let Ok(kind) = proto::HealthCheckKind::try_from(value) {
                assert!(name_of(HEALTH_CHECK_KIND, kind).is_some(), "{kind:?}");
            }
        }
    }

    #[test]
    fn quoted_is_a_toml_string() {
        assert_eq!(quoted("a b"), "\"a b\"");
        assert_eq!(quoted("é\"\\\n\u{1}"), "\"é\\\"\\\\\\n\\u0001\"");
        let parsed: Result<toml::Table, _> =
            toml::from_str(&format!("k = {}", quoted("é\"\\\n\u{1}")));
        assert_eq!(
            parsed
                .ok()
                .and_then(|t| t.get("k").and_then(|v| v.as_str().map(str::to_owned))),
            Some("é\"\\\n\u{1}".to_owned())
        );
    }

    #[test]
    fn accepted_lists_names_then_aliases() {
        assert_eq!(
            accepted(REJECT_WITH),
            "\"alert\", \"close\", \"reset\" or \"drop\""
        );
        let lb = accepted(LOAD_BALANCING);
        assert!(
            lb.starts_with("\"round_robin\", \"random\", \"least_connections\" or \"power_of_two\" (also written round-robin, ROUND_ROBIN"),
            "{lb}"
        );
    }
}
