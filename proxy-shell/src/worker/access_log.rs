//! The access log: one line per closed session, in logfmt or JSON.
//!
//! Owns: the line format of doc/configure.md (keys and their order, quoting,
//! RFC 3339 UTC timestamps with milliseconds) and the sink (stderr, off, or
//! a file opened in append mode). Must never: panic or stop the worker on a
//! write error (a failing log is reported once, then ignored), split a line
//! over several writes (workers share the file; one `O_APPEND` write per line
//! keeps lines whole), or print a value the reader could mistake for a key.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use command::config::{AccessLogFormat, AccessLogTarget};
use log::warn;
use serde_json::{Map, Value};

use super::vocabulary::Outcome;

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
}

impl AccessLogEntry<'_> {
    /// The line, without its newline, keys in doc/configure.md's order, then
    /// this proxy's extensions (`proxy_client`).
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
        match format {
            AccessLogFormat::Logfmt => {
                let mut line = String::with_capacity(256);
                for (key, value) in texts {
                    logfmt_pair(&mut line, key, value.as_deref());
                }
                for (key, value) in numbers {
                    logfmt_pair(&mut line, key, value.map(|n| n.to_string()).as_deref());
                }
                logfmt_pair(&mut line, "proxy_client", proxy_client.as_deref());
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
                object.insert(
                    "proxy_client".into(),
                    proxy_client.map_or(Value::Null, Value::String),
                );
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

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (RFC 3339, UTC). Times before 1970 count
/// backwards; the calendar is the proleptic Gregorian one.
fn rfc3339_millis(ts: SystemTime) -> String {
    let ms: i64 = match ts.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    };
    const DAY_MS: i64 = 86_400_000;
    let (days, in_day) = (ms.div_euclid(DAY_MS), ms.rem_euclid(DAY_MS));
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (in_day / 3_600_000, in_day / 60_000 % 60);
    let (second, milli) = (in_day / 1000 % 60, in_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z")
}

/// (year, month, day) of a count of days since 1970-01-01: Howard Hinnant's
/// `civil_from_days`, on 400-year eras that start on March 1st so the leap
/// day falls at the end of each year.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097; // [0, 146096]
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153; // March is 0
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[derive(Debug)]
enum Sink {
    Off,
    Stderr,
    File(File),
}

/// A worker's access log.
#[derive(Debug)]
pub struct AccessLog {
    sink: Sink,
    format: AccessLogFormat,
    /// The last write failed: stay quiet until one succeeds again.
    failing: bool,
}

impl AccessLog {
    /// Opens the target; a file is created if missing and appended to.
    pub fn open(target: &AccessLogTarget, format: AccessLogFormat) -> io::Result<Self> {
        let sink = match target {
            AccessLogTarget::Off => Sink::Off,
            AccessLogTarget::Stderr => Sink::Stderr,
            AccessLogTarget::File(path) => {
                Sink::File(OpenOptions::new().create(true).append(true).open(path)?)
            }
        };
        Ok(Self {
            sink,
            format,
            failing: false,
        })
    }

    /// Writes one line. A failure is reported once and otherwise ignored:
    /// losing log lines beats losing connections.
    pub fn write(&mut self, entry: &AccessLogEntry<'_>) {
        if matches!(self.sink, Sink::Off) {
            return;
        }
        let mut line = entry.format(self.format);
        line.push('\n');
        let result = match &mut self.sink {
            Sink::Off => Ok(()),
            Sink::Stderr => io::stderr().write_all(line.as_bytes()),
            Sink::File(file) => file.write_all(line.as_bytes()),
        };
        match result {
            Ok(()) => self.failing = false,
            Err(e) if !self.failing => {
                self.failing = true;
                warn!("access log write failed, dropping lines until it works again: {e}");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use command::config::{AccessLogFormat, AccessLogTarget};
    use preread_core::{FallbackReason, RejectReason};

    use super::super::vocabulary::{Outcome, RefuseReason};
    use super::{AccessLog, AccessLogEntry, rfc3339_millis};

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn routed() -> AccessLogEntry<'static> {
        AccessLogEntry {
            ts: at(1_709_210_096_789),
            listener: addr("127.0.0.1:8443"),
            client: addr("[2001:db8::7]:50000"),
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
        }
    }

    fn rejected() -> AccessLogEntry<'static> {
        AccessLogEntry {
            sni: None,
            alpn: None,
            cluster: None,
            backend: None,
            outcome: Outcome::Rejected(RejectReason::NoSni),
            bytes_out: 0,
            preread_ms: None,
            proxy_client: Some(addr("192.0.2.10:51234")),
            ..routed()
        }
    }

    #[test]
    fn logfmt_lines() {
        assert_eq!(
            routed().format(AccessLogFormat::Logfmt),
            "ts=2024-02-29T12:34:56.789Z listener=127.0.0.1:8443 client=[2001:db8::7]:50000 \
             sni=a.example.com alpn=h2 cluster=alpha backend=alpha-0 outcome=routed \
             bytes_in=517 bytes_out=4096 duration_ms=1234 preread_ms=3 proxy_client=-"
        );
        assert_eq!(
            rejected().format(AccessLogFormat::Logfmt),
            "ts=2024-02-29T12:34:56.789Z listener=127.0.0.1:8443 client=[2001:db8::7]:50000 \
             sni=- alpn=- cluster=- backend=- outcome=rejected:no_sni \
             bytes_in=517 bytes_out=0 duration_ms=1234 preread_ms=- proxy_client=192.0.2.10:51234"
        );
    }

    #[test]
    fn json_lines() {
        assert_eq!(
            routed().format(AccessLogFormat::Json),
            r#"{"ts":"2024-02-29T12:34:56.789Z","listener":"127.0.0.1:8443","client":"[2001:db8::7]:50000","sni":"a.example.com","alpn":"h2","cluster":"alpha","backend":"alpha-0","outcome":"routed","bytes_in":517,"bytes_out":4096,"duration_ms":1234,"preread_ms":3,"proxy_client":null}"#
        );
        assert_eq!(
            rejected().format(AccessLogFormat::Json),
            r#"{"ts":"2024-02-29T12:34:56.789Z","listener":"127.0.0.1:8443","client":"[2001:db8::7]:50000","sni":null,"alpn":null,"cluster":null,"backend":null,"outcome":"rejected:no_sni","bytes_in":517,"bytes_out":0,"duration_ms":1234,"preread_ms":null,"proxy_client":"192.0.2.10:51234"}"#
        );
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
        assert_eq!(rfc3339_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(at(951_825_600_001)),
            "2000-02-29T12:00:00.001Z"
        );
        assert_eq!(
            rfc3339_millis(at(1_709_251_199_999)),
            "2024-02-29T23:59:59.999Z"
        );
        assert_eq!(
            rfc3339_millis(at(1_709_251_200_000)),
            "2024-03-01T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339_millis(at(2_147_483_648_000)),
            "2038-01-19T03:14:08.000Z"
        );
        assert_eq!(
            rfc3339_millis(at(4_107_456_000_000)),
            "2100-02-28T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339_millis(at(4_107_542_400_000)),
            "2100-03-01T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339_millis(at(253_402_300_799_999)),
            "9999-12-31T23:59:59.999Z"
        );
        let before = UNIX_EPOCH - Duration::from_millis(1);
        assert_eq!(rfc3339_millis(before), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_file_log_appends_whole_lines() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("access.log");
        let target = AccessLogTarget::File(path.clone());
        for entry in [routed(), rejected()] {
            // Reopened each time: append mode keeps what is there.
            let mut log = AccessLog::open(&target, AccessLogFormat::Json).unwrap();
            log.write(&entry);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                routed().format(AccessLogFormat::Json),
                rejected().format(AccessLogFormat::Json)
            ]
        );
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn open_fails_cleanly_and_off_writes_nothing() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let missing = dir.path().join("no-such-dir").join("access.log");
        assert!(AccessLog::open(&AccessLogTarget::File(missing), AccessLogFormat::Logfmt).is_err());
        let mut off = AccessLog::open(&AccessLogTarget::Off, AccessLogFormat::Logfmt).unwrap();
        off.write(&routed());
        assert!(!off.failing);
    }
}
