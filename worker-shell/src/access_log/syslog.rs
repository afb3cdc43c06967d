//! Access-log lines as RFC 5424 syslog messages, one datagram each, to a
//! local daemon's Unix socket (`/dev/log`) or a server over UDP.
//!
//! Owns: the message header (facility `local0`, severity `info`, the
//! session's close time, this host's name, APP-NAME `preread`, PROCID the
//! pid, MSGID `access`, no structured data; the formatting is the
//! `syslog_fmt` crate's) and the datagram socket, reconnected once when a
//! local daemon restarted under it. Must never: split a line over two
//! datagrams, or put a byte outside printable ASCII in a header field.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;

use command::config::SyslogTarget;
use syslog_fmt::v5424::{Config, Formatter, Timestamp};
use syslog_fmt::{Facility, Severity};

use super::Line;
use super::line::rfc3339_millis;

/// RFC 5424's limit on HOSTNAME.
const MAX_HOSTNAME: usize = 255;

#[derive(Debug)]
enum Socket {
    Unix(UnixDatagram),
    Udp(UdpSocket),
}

/// A connected syslog target.
#[derive(Debug)]
pub(super) struct SyslogSink {
    target: SyslogTarget,
    socket: Socket,
    formatter: Formatter,
    /// Reused for each message.
    buf: Vec<u8>,
}

impl SyslogSink {
    /// Connects to `target`: a Unix socket nobody listens on fails here.
    pub(super) fn open(target: &SyslogTarget) -> io::Result<Self> {
        let host = hostname();
        let pid = std::process::id().to_string();
        let formatter = Config {
            facility: Facility::Local0,
            hostname: host.as_deref(),
            app_name: Some("preread"),
            proc_id: Some(&pid),
        }
        .into_formatter();
        Ok(Self {
            target: target.clone(),
            socket: connect(target)?,
            formatter,
            buf: Vec::with_capacity(512),
        })
    }

    /// Where it sends.
    pub(super) fn target(&self) -> &SyslogTarget {
        &self.target
    }

    /// Sends `line` as one message. A local daemon that restarted (its
    /// socket refuses, or is gone) is connected to again, once, for it.
    pub(super) fn send(&mut self, line: &Line) -> io::Result<()> {
        self.buf.clear();
        let at = rfc3339_millis(line.at);
        self.formatter.write_without_data(
            &mut self.buf,
            Severity::Info,
            Timestamp::PreformattedStr(&at),
            line.text.as_str(),
            Some("access"),
        )?;
        match self.send_buf() {
            Err(e) if matches!(self.socket, Socket::Unix(_)) && is_stale(&e) => {
                self.reconnect()?;
                self.send_buf()
            }
            sent => sent,
        }
    }

    /// A new socket to the same target; the old one stays on failure.
    pub(super) fn reconnect(&mut self) -> io::Result<()> {
        self.socket = connect(&self.target)?;
        Ok(())
    }

    fn send_buf(&self) -> io::Result<()> {
        let sent = match &self.socket {
            Socket::Unix(socket) => socket.send(&self.buf)?,
            Socket::Udp(socket) => socket.send(&self.buf)?,
        };
        if sent < self.buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("syslog took {sent} of a {}-byte message", self.buf.len()),
            ));
        }
        Ok(())
    }
}

fn connect(target: &SyslogTarget) -> io::Result<Socket> {
    match target {
        SyslogTarget::Unix(path) => {
            let socket = UnixDatagram::unbound()?;
            socket.connect(path)?;
            Ok(Socket::Unix(socket))
        }
        SyslogTarget::Udp(server) => {
            let any: SocketAddr = match server {
                SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
                SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
            };
            let socket = UdpSocket::bind(any)?;
            socket.connect(server)?;
            Ok(Socket::Udp(socket))
        }
    }
}

/// The errors of a Unix socket whose daemon went away or restarted.
fn is_stale(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::NotConnected | io::ErrorKind::NotFound
    )
}

/// This host's name as RFC 5424 takes it (printable ASCII, at most 255
/// bytes); `None` (written `-`) when it has none such.
fn hostname() -> Option<String> {
    let name = hostname::get().ok()?.into_string().ok()?;
    let usable = !name.is_empty()
        && name.len() <= MAX_HOSTNAME
        && name.bytes().all(|b| b.is_ascii_graphic());
    usable.then_some(name)
}

#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::os::unix::net::UnixDatagram;
    use std::path::Path;
    use std::time::{Duration, Instant, UNIX_EPOCH};

    use command::config::SyslogTarget;

    use super::{Line, SyslogSink};

    /// The first space-separated fields of a message, and its MSG (after
    /// the UTF-8 BOM RFC 5424 puts before a UTF-8 MSG).
    fn split(message: &[u8]) -> (Vec<String>, String) {
        let text = String::from_utf8_lossy(message).into_owned();
        let (head, msg) = text.split_once('\u{feff}').unwrap_or((&text, ""));
        let fields = head.split_whitespace().map(str::to_owned).collect();
        (fields, msg.to_owned())
    }

    /// Closes `daemon` and returns once its socket is gone: a process
    /// that another test of this binary forks (`mkfifo`) holds a copy of
    /// every descriptor until it execs, and a socket a copy holds still
    /// takes datagrams, which would then never reach the new daemon. A
    /// probe connected to it is refused once it is gone (bounded: 10 s).
    fn gone(daemon: UnixDatagram, path: &Path) -> std::io::Result<()> {
        let probe = UnixDatagram::unbound()?;
        probe.connect(path)?;
        probe.set_nonblocking(true)?;
        drop(daemon);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match probe.send(b"") {
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Ok(()),
                _ if Instant::now() >= deadline => {
                    return Err(std::io::Error::other(
                        "the old daemon's socket outlived 10 s",
                    ));
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    #[test]
    fn a_line_is_one_rfc5424_datagram_and_survives_a_daemon_restart() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("log");
        let daemon = UnixDatagram::bind(&path)?;
        daemon.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut sink = SyslogSink::open(&SyslogTarget::Unix(path.clone()))?;
        let line = Line {
            at: UNIX_EPOCH + Duration::from_millis(1_709_210_096_789),
            text: "ts=2024-02-29T12:34:56.789Z outcome=routed".to_owned(),
        };
        sink.send(&line)?;
        let mut buf = [0u8; 2048];
        let n = daemon.recv(&mut buf)?;
        let (fields, msg) = split(&buf[..n]);
        // <local0 * 8 + info>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID SD
        assert_eq!(fields[0], "<134>1");
        assert_eq!(fields[1], "2024-02-29T12:34:56.789Z");
        assert_eq!(
            fields[3..],
            ["preread", &std::process::id().to_string(), "access", "-"]
        );
        assert_eq!(msg, line.text);

        // The daemon restarts: its socket goes away, a new one takes the
        // path.
        gone(daemon, &path)?;
        std::fs::remove_file(&path)?;
        let daemon = UnixDatagram::bind(&path)?;
        daemon.set_read_timeout(Some(Duration::from_secs(5)))?;
        sink.send(&line)?;
        let n = daemon.recv(&mut buf)?;
        assert_eq!(split(&buf[..n]).1, line.text);
        Ok(())
    }

    #[test]
    fn nobody_listening_fails_at_open() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let missing = SyslogTarget::Unix(dir.path().join("no-daemon"));
        assert!(SyslogSink::open(&missing).is_err());
        Ok(())
    }
}
