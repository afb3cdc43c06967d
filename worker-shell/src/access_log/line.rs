//! One access-log line: the fields of a closed session and their two
//! spellings, logfmt and JSON.
//!
//! Owns: the line format of doc/configure.md (keys and their order, quoting,
//! absent values) and the timestamp format (RFC 3339, UTC, milliseconds,
//! by the `time` crate's calendar). Must never: print a value the reader
//! could mistake for a key, or a raw control byte from the wire.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use command::config::AccessLogFormat;
use preread_core::HelloSummary;
use preread_parser::quic::Version;
use preread_parser::tls::{EchKind, Ja4};
use serde_json::{Map, Value};
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

use crate::vocabulary::Outcome;

/// One closed session.
#[derive(Debug, Clone)]
pub struct AccessLogEntry<'a> {
    pub ts: SystemTime,
    pub listener: SocketAddr,
    pub client: SocketAddr,
    pub sni: Option<&'a str>,
    pub alpn: Option<&'a str>,
    pub cluster: Option<&'a str>,
    pub backend: Option<&'a str>,
    pub outcome: Outcome,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration_ms: u64,
    pub preread_ms: Option<u64>,
    /// The client address of the inbound PROXY header, when the listener
    /// expects one and it gave one: the real client behind a load balancer.
    pub proxy_client: Option<SocketAddr>,
    /// What the ClientHello showed of itself, once one was parsed whole:
    /// `ech`, `tls_version` and `hello_bytes`.
    pub hello: Option<HelloSummary>,
    /// The ClientHello's JA4 fingerprint.
    pub ja4: Option<Ja4>,
    /// The access rule that refused the connection (`listener_deny`,
    /// `cluster_rate`…); the key is written only when one did.
    pub rule: Option<&'a str>,
    /// A QUIC flow's own fields; `None` for a TCP session.
    pub quic: Option<QuicLog>,
}

/// What a QUIC flow's line adds: `protocol=quic`, its version and its
/// datagrams both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicLog {
    /// The version its Initials were read with, once one opened.
    pub version: Option<Version>,
    pub datagrams_in: u64,
    pub datagrams_out: u64,
}

impl QuicLog {
    fn fields(&self) -> [(&'static str, Option<String>); 4] {
        let version = self.version.map(|v| match v {
            Version::V1 => "v1",
            Version::V2 => "v2",
        });
        [
            ("protocol", Some("quic".to_owned())),
            ("quic_version", version.map(str::to_owned)),
            ("datagrams_in", Some(self.datagrams_in.to_string())),
            ("datagrams_out", Some(self.datagrams_out.to_string())),
        ]
    }
}

impl AccessLogEntry<'_> {
    /// The line, without its newline, keys in doc/configure.md's order:
    /// the twelve base keys, then `proxy_client`, `ech`, `tls_version`,
    /// `hello_bytes`, `ja4` and `rule`.
    pub fn format(&self, format: AccessLogFormat) -> String {
        let ts = rfc3339_millis(self.ts);
        let texts = [
            ("ts", Some(ts)),
            ("listener", Some(self.listener.to_string())),
            ("client", Some(self.client.to_string())),
            ("sni", self.sni.map(str::to_owned)),
            ("alpn", self.alpn.map(str::to_owned)),
            ("cluster", self.cluster.map(str::to_owned)),
            ("backend", self.backend.map(str::to_owned)),
            ("outcome", Some(self.outcome.to_string())),
        ];
        let numbers = [
            ("bytes_in", Some(self.bytes_in)),
            ("bytes_out", Some(self.bytes_out)),
            ("duration_ms", Some(self.duration_ms)),
            ("preread_ms", self.preread_ms),
        ];
        let proxy_client = self.proxy_client.map(|a| a.to_string());
        let hello = self.hello.as_ref();
        let tails = [
            ("proxy_client", proxy_client),
            (
                "ech",
                hello.map(|h| h.ech.map_or("absent", EchKind::as_str).to_owned()),
            ),
            ("tls_version", hello.map(|h| h.version.to_string())),
        ];
        let hello_bytes = hello.map(|h| h.len as u64);
        match format {
            AccessLogFormat::Logfmt => {
                let mut line = String::with_capacity(256);
                for (key, value) in texts {
                    logfmt_pair(&mut line, key, value.as_deref());
                }
                for (key, value) in numbers {
                    logfmt_pair(&mut line, key, value.map(|n| n.to_string()).as_deref());
                }
                for (key, value) in tails {
                    logfmt_pair(&mut line, key, value.as_deref());
                }
                let bytes = hello_bytes.map(|n| n.to_string());
                logfmt_pair(&mut line, "hello_bytes", bytes.as_deref());
                logfmt_pair(&mut line, "ja4", self.ja4.as_ref().map(Ja4::as_str));
                if let Some(rule) = self.rule {
                    logfmt_pair(&mut line, "rule", Some(rule));
                }
                for (key, value) in self.quic.iter().flat_map(QuicLog::fields) {
                    logfmt_pair(&mut line, key, value.as_deref());
                }
                line
            }
            AccessLogFormat::Json => {
                let mut object = Map::new();
                for (key, value) in texts {
                    object.insert(key.into(), value.map_or(Value::Null, Value::String));
                }
                for (key, value) in numbers {
                    object.insert(key.into(), value.map_or(Value::Null, Value::from));
                }
                for (key, value) in tails {
                    object.insert(key.into(), value.map_or(Value::Null, Value::String));
                }
                object.insert(
                    "hello_bytes".into(),
                    hello_bytes.map_or(Value::Null, Value::from),
                );
                let ja4 = self.ja4.as_ref().map(Ja4::as_str);
                object.insert("ja4".into(), ja4.map_or(Value::Null, Value::from));
                if let Some(rule) = self.rule {
                    object.insert("rule".into(), Value::String(rule.to_owned()));
                }
                if let Some(quic) = &self.quic {
                    object.insert("protocol".into(), Value::from("quic"));
                    let version = quic.fields()[1].1.clone();
                    object.insert(
                        "quic_version".into(),
                        version.map_or(Value::Null, Value::String),
                    );
                    object.insert("datagrams_in".into(), Value::from(quic.datagrams_in));
                    object.insert("datagrams_out".into(), Value::from(quic.datagrams_out));
                }
                Value::Object(object).to_string()
            }
        }
    }
}

/// Appends ` key=value` (no leading space for the first pair); an absent
/// value is `-`.
fn logfmt_pair(line: &mut String, key: &str, value: Option<&str>) {
    if !line.is_empty() {
        line.push(' ');
    }
    line.push_str(key);
    line.push('=');
    match value {
        None => line.push('-'),
        Some(value) => logfmt_value(line, value),
    }
}

/// A value bare when it is plain printable ASCII, else quoted with escapes.
/// Empty and `-` are quoted too, so they never read as "absent".
fn logfmt_value(line: &mut String, value: &str) {
    let bare = !value.is_empty()
        && value != "-"
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '=' | '\\'));
    if bare {
        line.push_str(value);
        return;
    }
    line.push('"');
    for c in value.chars() {
        match c {
            '"' => line.push_str("\\\""),
            '\\' => line.push_str("\\\\"),
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            '\t' => line.push_str("\\t"),
            // ALPN comes off the wire: no raw control byte reaches the log.
            c if c.is_control() => {
                let _ = write!(line, "\\u{:04x}", u32::from(c));
            }
            c => line.push(c),
        }
    }
    line.push('"');
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (RFC 3339, UTC); times before 1970 count
/// backwards. A clock outside the years ±9999 is shown at the nearest end
/// of that range: a line with an odd time beats no line.
pub fn rfc3339_millis(ts: SystemTime) -> String {
    let nanos = match ts.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => i128::try_from(before.duration().as_nanos()).map_or(i128::MIN, |n| -n),
    };
    let at = OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or_else(|_| {
        let end = if nanos < 0 {
            PrimitiveDateTime::MIN
        } else {
            PrimitiveDateTime::MAX
        };
        end.assume_utc()
    });
    let format =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    at.format(&format).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv6Addr, SocketAddr};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use command::config::AccessLogFormat;
    use preread_core::routes::RouteTable;
    use preread_core::{
        FallbackReason, HelloSummary, Input, PrereadConfig, RejectReason, SniPrereadCore,
    };

    use super::{AccessLogEntry, Ja4, rfc3339_millis};
    use crate::vocabulary::{Outcome, RefuseReason};

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    /// The summary the core makes of a captured Chromium hello: an outer
    /// (GREASE) ECH extension, TLS 1.3 offered, 1921 bytes of records; and
    /// its JA4 (testdata/clienthellos/ja4.jsonl).
    fn chromium() -> (Option<HelloSummary>, Option<Ja4>) {
        let window = include_bytes!("../../../testdata/clienthellos/chromium_a_1.bin");
        let mut core = SniPrereadCore::new();
        let config = PrereadConfig::new(RouteTable::new());
        let input = Input::Bytes {
            buf: window,
            now: Instant::now(),
        };
        let _ = core.handle_input(&config, input);
        (core.hello(), core.ja4(window))
    }

    fn routed() -> AccessLogEntry<'static> {
        AccessLogEntry {
            ts: at(1_709_210_096_789),
            listener: SocketAddr::from(([127, 0, 0, 1], 8443)),
            client: SocketAddr::from((Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7), 50000)),
            sni: Some("a.example.com"),
            alpn: Some("h2"),
            cluster: Some("alpha"),
            backend: Some("alpha-0"),
            outcome: Outcome::Routed,
            bytes_in: 517,
            bytes_out: 4096,
            duration_ms: 1234,
            preread_ms: Some(3),
            proxy_client: None,
            hello: chromium().0,
            ja4: chromium().1,
            rule: None,
            quic: None,
        }
    }

    fn rejected() -> AccessLogEntry<'static> {
        AccessLogEntry {
            sni: None,
            alpn: None,
            cluster: None,
            backend: None,
            outcome: Outcome::Rejected(RejectReason::NotTls),
            bytes_out: 0,
            preread_ms: None,
            proxy_client: Some(SocketAddr::from(([192, 0, 2, 10], 51234))),
            hello: None,
            ja4: None,
            ..routed()
        }
    }

    #[test]
    fn logfmt_lines() {
        assert_eq!(
            routed().format(AccessLogFormat::Logfmt),
            "ts=2024-02-29T12:34:56.789Z listener=127.0.0.1:8443 client=[2001:db8::7]:50000 \
             sni=a.example.com alpn=h2 cluster=alpha backend=alpha-0 outcome=routed \
             bytes_in=517 bytes_out=4096 duration_ms=1234 preread_ms=3 proxy_client=- \
             ech=outer tls_version=1.3 hello_bytes=1921 ja4=t13d1517h2_8daaf6152771_cb7bf5808d99"
        );
        assert_eq!(
            rejected().format(AccessLogFormat::Logfmt),
            "ts=2024-02-29T12:34:56.789Z listener=127.0.0.1:8443 client=[2001:db8::7]:50000 \
             sni=- alpn=- cluster=- backend=- outcome=rejected:not_tls \
             bytes_in=517 bytes_out=0 duration_ms=1234 preread_ms=- proxy_client=192.0.2.10:51234 \
             ech=- tls_version=- hello_bytes=- ja4=-"
        );
    }

    #[test]
    fn json_lines() {
        assert_eq!(
            routed().format(AccessLogFormat::Json),
            r#"{"ts":"2024-02-29T12:34:56.789Z","listener":"127.0.0.1:8443","client":"[2001:db8::7]:50000","sni":"a.example.com","alpn":"h2","cluster":"alpha","backend":"alpha-0","outcome":"routed","bytes_in":517,"bytes_out":4096,"duration_ms":1234,"preread_ms":3,"proxy_client":null,"ech":"outer","tls_version":"1.3","hello_bytes":1921,"ja4":"t13d1517h2_8daaf6152771_cb7bf5808d99"}"#
        );
        assert_eq!(
            rejected().format(AccessLogFormat::Json),
            r#"{"ts":"2024-02-29T12:34:56.789Z","listener":"127.0.0.1:8443","client":"[2001:db8::7]:50000","sni":null,"alpn":null,"cluster":null,"backend":null,"outcome":"rejected:not_tls","bytes_in":517,"bytes_out":0,"duration_ms":1234,"preread_ms":null,"proxy_client":"192.0.2.10:51234","ech":null,"tls_version":null,"hello_bytes":null,"ja4":null}"#
        );
    }

    #[test]
    fn a_hello_without_ech_is_absent_not_unknown() {
        let window = include_bytes!("../../../testdata/clienthellos/curl_tls12.bin");
        let mut core = SniPrereadCore::new();
        let input = Input::Bytes {
            buf: window,
            now: Instant::now(),
        };
        let _ = core.handle_input(&PrereadConfig::new(RouteTable::new()), input);
        let entry = AccessLogEntry {
            hello: core.hello(),
            ..routed()
        };
        let line = entry.format(AccessLogFormat::Logfmt);
        assert!(
            line.contains(" ech=absent tls_version=1.2 hello_bytes=224 "),
            "{line}"
        );
    }

    /// A QUIC flow's line carries the flow's JA4 (`q`, from the hello the
    /// step read in the client's Initials) as a TCP line does.
    #[test]
    fn a_quic_flow_line_carries_its_ja4() {
        use preread_core::quic::{QuicListener, QuicPrereadStep, QuicRejectWith};
        use preread_parser::quic::{Version, client_first_flight};

        let window = include_bytes!("../../../testdata/clienthellos/chromium_a_1.bin");
        let datagrams = client_first_flight(Version::V1, &[7; 8], &[9; 4], &window[5..], 1100);
        let listener =
            QuicListener::new(PrereadConfig::new(RouteTable::new()), QuicRejectWith::Close);
        let now = Instant::now();
        let (mut step, _) = QuicPrereadStep::first(&listener, &datagrams[0], now);
        for datagram in &datagrams[1..] {
            let _ = step.datagram(&listener, datagram, now);
        }
        let ja4 = step.ja4();
        // testdata/clienthellos/ja4.jsonl's value, over QUIC.
        assert_eq!(
            ja4.as_ref().map(Ja4::as_str),
            Some("q13d1517h2_8daaf6152771_cb7bf5808d99")
        );
        let entry = AccessLogEntry {
            hello: step.hello(),
            ja4,
            quic: Some(crate::access_log::QuicLog {
                version: step.version(),
                datagrams_in: datagrams.len() as u64,
                datagrams_out: 1,
            }),
            ..rejected()
        };
        let line = entry.format(AccessLogFormat::Logfmt);
        assert!(
            line.contains(" ja4=q13d1517h2_8daaf6152771_cb7bf5808d99 protocol=quic "),
            "{line}"
        );
        let json = entry.format(AccessLogFormat::Json);
        assert!(
            json.contains(r#""ja4":"q13d1517h2_8daaf6152771_cb7bf5808d99""#),
            "{json}"
        );
    }

    #[test]
    fn a_refusal_by_an_access_rule_names_it_last() {
        let entry = AccessLogEntry {
            outcome: Outcome::Refused(RefuseReason::AccessDenied),
            rule: Some("listener_deny"),
            hello: None,
            ja4: None,
            ..routed()
        };
        let line = entry.format(AccessLogFormat::Logfmt);
        assert!(line.contains(" outcome=refused:access_denied "), "{line}");
        assert!(
            line.ends_with(" hello_bytes=- ja4=- rule=listener_deny"),
            "{line}"
        );
        let json = entry.format(AccessLogFormat::Json);
        assert!(json.contains("\"rule\":\"listener_deny\""), "{json}");
        assert!(!routed().format(AccessLogFormat::Logfmt).contains("rule="));
    }

    #[test]
    fn outcomes_display() {
        let shown = [
            Outcome::Routed,
            Outcome::Fallback(FallbackReason::ServerFirst),
            Outcome::Rejected(RejectReason::TooLarge),
            Outcome::Refused(RefuseReason::PoolExhausted),
        ]
        .map(|outcome| outcome.to_string());
        assert_eq!(
            shown,
            [
                "routed",
                "fallback:server_first",
                "rejected:too_large",
                "refused:pool_exhausted"
            ]
        );
    }

    #[test]
    fn logfmt_quotes_what_could_be_misread() {
        let entry = AccessLogEntry {
            alpn: Some("my proto=\"x\"\\"),
            cluster: Some(""),
            backend: Some("-"),
            sni: Some("ctl\u{1}\n"),
            ..routed()
        };
        let line = entry.format(AccessLogFormat::Logfmt);
        assert!(
            line.contains(r#" sni="ctl\u0001\n" alpn="my proto=\"x\"\\" cluster="" backend="-" "#),
            "{line}"
        );
        let json = entry.format(AccessLogFormat::Json);
        assert!(json.contains(r#""alpn":"my proto=\"x\"\\""#), "{json}");
    }

    #[test]
    fn rfc3339_of_known_instants() {
        let known = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_825_600_001, "2000-02-29T12:00:00.001Z"),
            (1_709_251_199_999, "2024-02-29T23:59:59.999Z"),
            (1_709_251_200_000, "2024-03-01T00:00:00.000Z"),
            (2_147_483_648_000, "2038-01-19T03:14:08.000Z"),
            (4_107_456_000_000, "2100-02-28T00:00:00.000Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        ];
        for (ms, text) in known {
            assert_eq!(rfc3339_millis(at(ms)), text, "{ms}");
        }
        let before = UNIX_EPOCH - Duration::from_millis(1);
        assert_eq!(rfc3339_millis(before), "1969-12-31T23:59:59.999Z");
        // Microseconds are cut, not rounded: the line never runs ahead.
        let late = at(1_000) + Duration::from_micros(999);
        assert_eq!(rfc3339_millis(late), "1970-01-01T00:00:01.000Z");
        assert_eq!(
            rfc3339_millis(at(253_402_300_800_000)),
            "9999-12-31T23:59:59.999Z",
            "past year 9999: the end of the range"
        );
    }
}
