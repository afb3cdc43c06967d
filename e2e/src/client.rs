//! Clients on loopback: real TLS clients (rustls, trusting
//! [`TestCa::shared`]) and raw byte senders for captured ClientHellos,
//! garbage and slow clients. Every operation is bounded: connects, reads
//! and writes have timeouts, loops have counts.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};

use crate::certs::{self, Leaf, TestCa};

/// Default bound of a connect, and of each read or write.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most [`read_line`] reads before giving up on a newline.
pub const MAX_LINE: usize = 64 * 1024;
/// The most [`read_to_close`] keeps.
pub const MAX_READ: usize = 256 * 1024 * 1024;

/// A TLS client stream over TCP (blocking).
pub type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// How a TLS client behaves.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// The SNI to send; `None`: no SNI extension (the certificate is then
    /// verified against 127.0.0.1, which every harness server cert holds).
    pub sni: Option<String>,
    /// ALPN offer, in order; empty: no ALPN extension.
    pub alpn: Vec<String>,
    /// The client certificate to present when asked (mTLS).
    pub client_cert: Option<Leaf>,
    /// Offer TLS 1.2 only.
    pub tls12_only: bool,
    /// Raw bytes written before the ClientHello (a PROXY header for an
    /// `expect_proxy` listener).
    pub prefix: Vec<u8>,
    /// Write the handshake `per_write` bytes at a time with `pause` before
    /// each write (a slow client). The total time is the caller's bound.
    pub drip: Option<(usize, Duration)>,
    /// The first application message [`tls_request`] sends.
    pub message: Vec<u8>,
    /// Bound of the connect and of each read and write.
    pub timeout: Duration,
}

impl ClientOptions {
    /// `sni` ("" for none) and an ALPN offer; other fields default.
    pub fn new(sni: &str, alpn: &[&str]) -> Self {
        Self {
            sni: (!sni.is_empty()).then(|| sni.to_owned()),
            alpn: alpn.iter().map(|p| (*p).to_owned()).collect(),
            client_cert: None,
            tls12_only: false,
            prefix: Vec::new(),
            drip: None,
            message: b"hello\n".to_vec(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Presents `leaf` when the server asks for a certificate.
    #[must_use]
    pub fn client_cert(mut self, leaf: &Leaf) -> Self {
        self.client_cert = Some(leaf.clone());
        self
    }

    /// Offers TLS 1.2 only.
    #[must_use]
    pub fn tls12_only(mut self) -> Self {
        self.tls12_only = true;
        self
    }

    /// Writes `bytes` raw before the ClientHello.
    #[must_use]
    pub fn prefix(mut self, bytes: &[u8]) -> Self {
        self.prefix = bytes.to_vec();
        self
    }

    /// Drips the handshake: `per_write` bytes, `pause` before each write.
    #[must_use]
    pub fn drip(mut self, per_write: usize, pause: Duration) -> Self {
        self.drip = Some((per_write.max(1), pause));
        self
    }

    /// Sets the first application message.
    #[must_use]
    pub fn message(mut self, bytes: &[u8]) -> Self {
        self.message = bytes.to_vec();
        self
    }

    /// Sets the I/O bound.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// What a TLS request through the proxy saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOutcome {
    /// DNS names of the server's certificate: which backend answered.
    pub dns_names: Vec<String>,
    /// The negotiated ALPN protocol.
    pub alpn: Option<String>,
    /// The negotiated version, e.g. `TLSv1_3`.
    pub version: String,
    /// The backend's first line, without its newline.
    pub line: String,
    /// What came after the first line until the backend closed (`bye\n`,
    /// preceded by the big response if any).
    pub tail: Vec<u8>,
    /// The backend ended with close_notify (not a bare FIN or a reset).
    pub clean_close: bool,
}

impl TlsOutcome {
    /// A `key=value` field of the first line (`backend`, `alpn`, `sni`,
    /// `proxy`).
    pub fn field(&self, key: &str) -> Option<&str> {
        line_field(&self.line, key)
    }

    /// The `backend=` field of the first line.
    pub fn backend(&self) -> Option<&str> {
        self.field("backend")
    }
}

/// A `key=value` field of a space-separated line.
pub fn line_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// Connects with a bound and sets read/write timeouts and TCP_NODELAY.
pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, String> {
    let stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .and_then(|()| stream.set_nodelay(true))
        .map_err(|e| format!("set socket options: {e}"))?;
    Ok(stream)
}

/// A full request: handshake with `sni` ("" for none) offering `alpn`,
/// send `hello\n`, read the backend's first line, end the write side and
/// read until the backend closes. `Err` carries the failing step and the
/// TLS or I/O error (a refused handshake, a bad certificate, a close).
pub fn tls_request(
    addr: SocketAddr,
    sni: &str,
    alpn: &[&str],
    client_cert: Option<&Leaf>,
) -> Result<TlsOutcome, String> {
    let mut options = ClientOptions::new(sni, alpn);
    options.client_cert = client_cert.cloned();
    tls_request_with(addr, &options)
}

/// [`tls_request`] with every option.
pub fn tls_request_with(addr: SocketAddr, options: &ClientOptions) -> Result<TlsOutcome, String> {
    let mut stream = tls_client_with(addr, options)?;
    stream
        .write_all(&options.message)
        .and_then(|()| stream.flush())
        .map_err(|e| format!("write first message: {e}"))?;
    let line = read_line(&mut stream).map_err(|e| format!("read first line: {e}"))?;
    let dns_names = stream
        .conn
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| certs::dns_names(leaf))
        .unwrap_or_default();
    let alpn = stream
        .conn
        .alpn_protocol()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    let version = stream
        .conn
        .protocol_version()
        .map_or_else(|| "-".to_owned(), |v| format!("{v:?}"));
    // Best effort: a backend that already closed (HTTP mode, a refusal)
    // makes the shutdown fail, and what it sent is still to be read.
    let _ = half_close(&mut stream);
    let (tail, clean_close) = read_tls_to_close(&mut stream, options.timeout);
    Ok(TlsOutcome {
        dns_names,
        alpn,
        version,
        line,
        tail,
        clean_close,
    })
}

/// A TLS stream after a completed handshake, for streaming tests.
pub fn tls_client(addr: SocketAddr, sni: &str, alpn: &[&str]) -> Result<TlsStream, String> {
    tls_client_with(addr, &ClientOptions::new(sni, alpn))
}

/// [`tls_client`] with every option (the `message` is not sent).
pub fn tls_client_with(addr: SocketAddr, options: &ClientOptions) -> Result<TlsStream, String> {
    let alpn: Vec<&str> = options.alpn.iter().map(String::as_str).collect();
    let config = certs::client_config(
        TestCa::shared(),
        &alpn,
        options.client_cert.as_ref(),
        options.tls12_only,
    );
    let server_name = match &options.sni {
        Some(name) => {
            ServerName::try_from(name.clone()).map_err(|e| format!("bad SNI {name:?}: {e}"))?
        }
        None => ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
    };
    let mut conn =
        ClientConnection::new(config, server_name).map_err(|e| format!("client setup: {e}"))?;
    let mut tcp = connect(addr, options.timeout)?;
    if !options.prefix.is_empty() {
        tcp.write_all(&options.prefix)
            .map_err(|e| format!("write prefix: {e}"))?;
    }
    let deadline = Instant::now() + options.timeout.saturating_mul(3);
    // Each complete_io round is bounded by the socket timeouts; the count
    // and the deadline bound the whole handshake.
    for _ in 0..10_000 {
        if !conn.is_handshaking() {
            return Ok(StreamOwned::new(conn, tcp));
        }
        if Instant::now() > deadline {
            break;
        }
        let result = match options.drip {
            Some((per_write, pause)) => conn.complete_io(&mut Drip {
                inner: &mut tcp,
                per_write,
                pause,
            }),
            None => conn.complete_io(&mut tcp),
        };
        match result {
            Ok((0, 0)) if conn.is_handshaking() => {
                return Err("handshake: connection closed by peer".to_owned());
            }
            Ok(_) => {}
            Err(err) => return Err(format!("handshake: {err}")),
        }
    }
    Err("handshake: did not finish in time".to_owned())
}

/// Writes at most `per_write` bytes per call, sleeping `pause` before each.
struct Drip<'a> {
    inner: &'a mut TcpStream,
    per_write: usize,
    pause: Duration,
}

impl Read for Drip<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}

impl Write for Drip<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        std::thread::sleep(self.pause);
        let n = buf.len().min(self.per_write);
        self.inner.write(&buf[..n])
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Reads up to and including a newline (at most [`MAX_LINE`] bytes) and
/// returns the line without it. Bounded by the stream's read timeout.
pub fn read_line(reader: &mut impl Read) -> Result<String, String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < MAX_LINE {
        match reader.read(&mut byte) {
            Ok(0) => {
                return Err(format!(
                    "closed before a newline (got {:?})",
                    String::from_utf8_lossy(&line)
                ));
            }
            Ok(_) if byte[0] == b'\n' => return Ok(String::from_utf8_lossy(&line).into_owned()),
            Ok(_) => line.push(byte[0]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err.to_string()),
        }
    }
    Err(format!("no newline in {MAX_LINE} bytes"))
}

/// Ends the client's write side: close_notify, then a TCP FIN. Reading
/// goes on (the backend answers `bye\n`).
pub fn half_close(stream: &mut TlsStream) -> Result<(), String> {
    stream.conn.send_close_notify();
    stream
        .flush()
        .map_err(|e| format!("send close_notify: {e}"))?;
    stream
        .sock
        .shutdown(Shutdown::Write)
        .map_err(|e| format!("shutdown write: {e}"))
}

fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// Reads a TLS stream until the peer closes or `timeout` passes. Returns
/// the bytes and whether the peer closed with close_notify. A bare FIN, a
/// reset or a timeout gives `false`.
pub fn read_tls_to_close(stream: &mut TlsStream, timeout: Duration) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while out.len() < MAX_READ {
        let Some(left) = remaining(deadline) else {
            return (out, false);
        };
        let _ = stream.sock.set_read_timeout(Some(left));
        match stream.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return (out, false),
        }
    }
    (out, false)
}

/// How a raw read of a peer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// A clean FIN (`read` gave 0).
    Eof,
    /// `read` failed with this kind (a reset: `ConnectionReset`).
    Error(io::ErrorKind),
    /// Nothing more within the timeout, and no close (or [`MAX_READ`]).
    Timeout,
}

/// Reads a TCP stream until the peer closes or `timeout` passes: what it
/// sent, and how it ended.
pub fn read_until_end(stream: &mut TcpStream, timeout: Duration) -> (Vec<u8>, End) {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while out.len() < MAX_READ {
        let Some(left) = remaining(deadline) else {
            return (out, End::Timeout);
        };
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut buf) {
            Ok(0) => return (out, End::Eof),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return (out, End::Timeout);
            }
            Err(err) => return (out, End::Error(err.kind())),
        }
    }
    (out, End::Timeout)
}

/// Reads a TCP stream until the peer closes (FIN or reset: `true`) or
/// `timeout` passes (`false`).
pub fn read_to_close(stream: &mut TcpStream, timeout: Duration) -> (Vec<u8>, bool) {
    let (out, end) = read_until_end(stream, timeout);
    (out, end != End::Timeout)
}

/// Connects, sends `bytes` (a captured ClientHello, garbage, ...) without
/// ending the write side, and reads until the peer closes or `read_timeout`
/// passes: `(received, closed)`. A write refused because the peer already
/// closed is not an error (reading then reports the close). `Err` when the
/// connect fails (within 2 s; at once for a closed loopback port).
pub fn raw_exchange(
    addr: SocketAddr,
    bytes: &[u8],
    read_timeout: Duration,
) -> Result<(Vec<u8>, bool), String> {
    let mut stream = connect(addr, Duration::from_secs(2))?;
    let _ = stream.write_all(bytes);
    Ok(read_to_close(&mut stream, read_timeout))
}

/// Connects and sends `bytes` `per_write` at a time, sleeping `pause`
/// before each write (TCP_NODELAY set, so each write is its own segment);
/// returns the open stream for the test to go on (e.g. [`read_to_close`]).
/// The total time, about `len / per_write * pause`, is the caller's bound.
/// `Err` when the connect or a write fails (with the count sent).
pub fn drip(
    addr: SocketAddr,
    bytes: &[u8],
    per_write: usize,
    pause: Duration,
) -> Result<TcpStream, String> {
    let mut stream = connect(addr, DEFAULT_TIMEOUT)?;
    let mut sent = 0;
    for chunk in bytes.chunks(per_write.max(1)) {
        std::thread::sleep(pause);
        stream
            .write_all(chunk)
            .map_err(|e| format!("drip: write failed after {sent} bytes: {e}"))?;
        sent += chunk.len();
    }
    Ok(stream)
}

/// A PROXY protocol v1 header (`PROXY TCP4|TCP6 src dst sport dport\r\n`).
pub fn proxy_v1(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let family = if source.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {family} {} {} {} {}\r\n",
        source.ip(),
        destination.ip(),
        source.port(),
        destination.port()
    )
    .into_bytes()
}

/// A PROXY protocol v2 header, command PROXY over TCP, no TLVs. Both
/// addresses must be of one family.
///
/// # Panics
/// When the families differ.
pub fn proxy_v2(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let mut header = b"\r\n\r\n\x00\r\nQUIT\n".to_vec();
    header.push(0x21); // version 2, PROXY
    match (source, destination) {
        (SocketAddr::V4(src), SocketAddr::V4(dst)) => {
            header.push(0x11);
            header.extend_from_slice(&12u16.to_be_bytes());
            header.extend_from_slice(&src.ip().octets());
            header.extend_from_slice(&dst.ip().octets());
            header.extend_from_slice(&src.port().to_be_bytes());
            header.extend_from_slice(&dst.port().to_be_bytes());
        }
        (SocketAddr::V6(src), SocketAddr::V6(dst)) => {
            header.push(0x21);
            header.extend_from_slice(&36u16.to_be_bytes());
            header.extend_from_slice(&src.ip().octets());
            header.extend_from_slice(&dst.ip().octets());
            header.extend_from_slice(&src.port().to_be_bytes());
            header.extend_from_slice(&dst.port().to_be_bytes());
        }
        _ => panic!("proxy_v2: source and destination of different families"),
    }
    header
}
