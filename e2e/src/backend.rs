//! Backends on loopback: a TLS server ([`TlsBackend`]) that holds the
//! certificate the proxy must not touch, and a plain TCP server
//! ([`PlainBackend`]). Both record, per accepted connection, the raw bytes
//! received before any processing, so a test can check exactly what the
//! proxy forwarded (the ClientHello, a PROXY header, ...).
//!
//! # The TLS backend's protocol
//!
//! 1. If the connection starts with a PROXY v1/v2 header (the proxy's
//!    `proxy_protocol = "send"`/`"relay"`), it is read and stripped (it stays
//!    in the raw record).
//! 2. The TLS handshake completes (client certificate required in mTLS
//!    mode).
//! 3. The client's first application read is consumed and answered with the
//!    line `backend=<name> alpn=<negotiated or -> sni=<server name or ->\n`
//!    (plus ` proxy=<source ip:port or ->` before the newline when a PROXY
//!    header came). In [`BackendConfig::http`] mode a first message that
//!    looks like an HTTP/1 request is answered with an HTTP/1.1 200 response
//!    whose body is that line, and the connection closes.
//! 4. With [`BackendConfig::big_response`] = N, N bytes of [`pattern`]
//!    follow the line.
//! 5. Every further byte is echoed until the client ends its write side
//!    (close_notify or a TCP FIN); then the backend writes `bye\n`, sends
//!    close_notify and closes.
//!
//! # The plain backend's protocol
//!
//! It writes `backend=<name>\n` on accept ([`PlainBackend::start_speaking_first`])
//! or after the first bytes arrive (those first bytes are consumed), then
//! echoes everything until the client's FIN, then writes `bye\n` and closes.
//! It never strips anything: a PROXY header is echoed like the rest.
//!
//! Two more plain behaviours, for health tests: [`PlainBackend::start_echo`]
//! echoes every byte from the first (a ClientHello comes back as it went),
//! and [`PlainBackend::start_closing`] closes each connection at once,
//! before sending or reading a byte.
//!
//! Each connection is served by its own thread with 30 s idle timeouts; a
//! backend stops on Drop (its sockets are shut down, threads joined within
//! a bound).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustls::{ServerConfig, ServerConnection, StreamOwned};

use crate::certs::{self, Leaf, TestCa};
use crate::testkit;

/// Idle timeout of a backend connection, both directions.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long Drop waits for a backend's threads.
const JOIN_BOUND: Duration = Duration::from_secs(5);

/// Byte `i` of the deterministic big-response pattern.
pub fn pattern_byte(i: usize) -> u8 {
    // 251 is prime, so the pattern does not align with buffer sizes.
    u8::try_from(i % 251).unwrap_or(0)
}

/// The first `len` bytes of the big-response pattern.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(pattern_byte).collect()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A TcpStream whose reads are appended to a shared log; bytes pushed back
/// with [`Recorder::unread`] are served first (and not logged twice).
struct Recorder {
    inner: TcpStream,
    log: Arc<Mutex<Vec<u8>>>,
    pending: Vec<u8>,
}

impl Recorder {
    fn unread(&mut self, bytes: &[u8]) {
        let mut pending = bytes.to_vec();
        pending.extend_from_slice(&self.pending);
        self.pending = pending;
    }

    fn read_exact_raw(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.read_exact(buf)
    }
}

impl Read for Recorder {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.pending.is_empty() {
            let n = buf.len().min(self.pending.len());
            buf[..n].copy_from_slice(&self.pending[..n]);
            self.pending.drain(..n);
            return Ok(n);
        }
        let n = self.inner.read(buf)?;
        lock(&self.log).extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl Write for Recorder {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

type Handler = Arc<dyn Fn(Recorder) -> Result<(), String> + Send + Sync>;

#[derive(Default)]
struct Shared {
    connections: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
    accepted: AtomicUsize,
    errors: Mutex<Vec<String>>,
    /// Clones of the open connections' sockets, by accept index, so Drop
    /// can unblock their threads.
    streams: Mutex<Vec<(usize, TcpStream)>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// The accept loop and per-connection threads shared by both backends.
struct Server {
    name: String,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    fn start(name: &str, bind: SocketAddr, handler: Handler) -> io::Result<Self> {
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::default());
        let accept = {
            let stop = Arc::clone(&stop);
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("backend-{name}"))
                .spawn(move || accept_loop(&listener, &stop, &shared, &handler))?
        };
        Ok(Self {
            name: name.to_owned(),
            addr,
            stop,
            shared,
            accept: Some(accept),
        })
    }

    fn connections(&self) -> Vec<Vec<u8>> {
        lock(&self.shared.connections)
            .iter()
            .map(|log| lock(log).clone())
            .collect()
    }

    fn errors(&self) -> Vec<String> {
        lock(&self.shared.errors).clone()
    }

    fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

fn accept_loop(listener: &TcpListener, stop: &AtomicBool, shared: &Arc<Shared>, handler: &Handler) {
    // Bounded by the stop flag: Drop sets it and connects once to wake us.
    for incoming in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = incoming else {
            // EMFILE and the like: do not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let id = shared.accepted.fetch_add(1, Ordering::SeqCst);
        let log = Arc::new(Mutex::new(Vec::new()));
        lock(&shared.connections).push(Arc::clone(&log));
        let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
        let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
        let _ = stream.set_nodelay(true);
        if let Ok(clone) = stream.try_clone() {
            lock(&shared.streams).push((id, clone));
        }
        let recorder = Recorder {
            inner: stream,
            log,
            pending: Vec::new(),
        };
        let handler = Arc::clone(handler);
        let worker_shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("backend-conn".to_owned())
            .spawn(move || {
                if let Err(err) = handler(recorder) {
                    lock(&worker_shared.errors).push(err);
                }
                lock(&worker_shared.streams).retain(|(other, _)| *other != id);
            });
        if let Ok(handle) = spawned {
            let mut workers = lock(&shared.workers);
            workers.retain(|h| !h.is_finished());
            workers.push(handle);
        }
    }
    // Stopped means refusing connections at once.
    let _ = testkit::shut(listener);
}

fn join_bounded(handle: JoinHandle<()>, deadline: Instant, what: &str) {
    // Polls is_finished: std has no join with a timeout.
    while !handle.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if handle.is_finished() {
        let _ = handle.join();
    } else {
        eprintln!("e2e: {what} did not stop in time; detached");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        let deadline = Instant::now() + JOIN_BOUND;
        if let Some(accept) = self.accept.take() {
            join_bounded(
                accept,
                deadline,
                &format!("backend {} accept loop", self.name),
            );
        }
        for (_, stream) in lock(&self.shared.streams).drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let workers: Vec<_> = lock(&self.shared.workers).drain(..).collect();
        for worker in workers {
            join_bounded(
                worker,
                deadline,
                &format!("backend {} connection", self.name),
            );
        }
    }
}

/// What a [`TlsBackend`] is: its name, certificate names and options.
#[derive(Clone, Debug)]
pub struct BackendConfig {
    /// Reported as `backend=<name>`.
    pub name: String,
    /// DNS names of its certificate (`*.x` wildcards allowed).
    pub dns_names: Vec<String>,
    /// ALPN protocols it accepts, in its preference order; empty: no ALPN.
    pub alpn: Vec<String>,
    /// Require a client certificate signed by the shared CA.
    pub client_auth: bool,
    /// After the first line, send this many bytes of [`pattern`].
    pub big_response: Option<usize>,
    /// Answer a first message that looks like HTTP/1 with an HTTP response
    /// (for curl demos).
    pub http: bool,
}

impl BackendConfig {
    /// A backend named `name` with a certificate for `dns_names`, no ALPN,
    /// no client auth.
    pub fn new(name: &str, dns_names: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            dns_names: dns_names.iter().map(|n| (*n).to_owned()).collect(),
            alpn: Vec::new(),
            client_auth: false,
            big_response: None,
            http: false,
        }
    }

    /// Sets the accepted ALPN protocols (server preference order).
    #[must_use]
    pub fn alpn(mut self, protocols: &[&str]) -> Self {
        self.alpn = protocols.iter().map(|p| (*p).to_owned()).collect();
        self
    }

    /// Requires a client certificate (mTLS).
    #[must_use]
    pub fn client_auth(mut self, required: bool) -> Self {
        self.client_auth = required;
        self
    }

    /// Sends `len` pattern bytes after the first line.
    #[must_use]
    pub fn big_response(mut self, len: usize) -> Self {
        self.big_response = Some(len);
        self
    }

    /// Answers HTTP/1 requests with an HTTP response.
    #[must_use]
    pub fn http(mut self, enabled: bool) -> Self {
        self.http = enabled;
        self
    }
}

/// A TLS backend on loopback; see the module documentation.
pub struct TlsBackend {
    config: BackendConfig,
    leaf: Leaf,
    server: Server,
}

impl fmt::Debug for TlsBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsBackend")
            .field("name", &self.config.name)
            .field("addr", &self.server.addr)
            .finish_non_exhaustive()
    }
}

impl TlsBackend {
    /// Starts a backend on 127.0.0.1 and a free port.
    ///
    /// # Panics
    /// When no port can be bound.
    pub fn start(config: BackendConfig) -> Self {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), config)
            .unwrap_or_else(|err| panic!("start a TLS backend: {err}"))
    }

    /// Starts a backend on `addr` (port 0: a free one), certificate signed
    /// by [`TestCa::shared`].
    pub fn start_on(addr: SocketAddr, config: BackendConfig) -> io::Result<Self> {
        Self::start_with_ca(addr, config, TestCa::shared())
    }

    /// Starts a backend on `addr` with a certificate signed by `ca` (client
    /// certificates are verified against `ca` too).
    pub fn start_with_ca(addr: SocketAddr, config: BackendConfig, ca: &TestCa) -> io::Result<Self> {
        let names: Vec<&str> = config.dns_names.iter().map(String::as_str).collect();
        let leaf = ca.server_cert(&names);
        Self::serve(addr, config, leaf, Some(ca))
    }

    /// Starts a backend on `addr` presenting `leaf`, made elsewhere (a
    /// backend in a process of its own); `config.client_auth` is not
    /// honoured, as there is no CA to verify with.
    pub fn start_with_leaf(
        addr: SocketAddr,
        config: BackendConfig,
        leaf: Leaf,
    ) -> io::Result<Self> {
        Self::serve(addr, config, leaf, None)
    }

    fn serve(
        addr: SocketAddr,
        config: BackendConfig,
        leaf: Leaf,
        client_ca: Option<&TestCa>,
    ) -> io::Result<Self> {
        let alpn: Vec<&str> = config.alpn.iter().map(String::as_str).collect();
        let client_ca = client_ca.filter(|_| config.client_auth);
        let server_config = certs::server_config(&leaf, &alpn, client_ca);
        let settings = Arc::new(TlsSettings {
            name: config.name.clone(),
            server_config,
            big_response: config.big_response,
            http: config.http,
        });
        let handler: Handler = Arc::new(move |recorder| serve_tls(&settings, recorder));
        let server = Server::start(&config.name, addr, handler)?;
        Ok(Self {
            config,
            leaf,
            server,
        })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Its configuration.
    pub fn config(&self) -> &BackendConfig {
        &self.config
    }

    /// Its certificate and key.
    pub fn leaf(&self) -> &Leaf {
        &self.leaf
    }

    /// The raw bytes received so far, one entry per accepted connection, in
    /// accept order.
    pub fn connections(&self) -> Vec<Vec<u8>> {
        self.server.connections()
    }

    /// How many connections it accepted.
    pub fn accepted(&self) -> usize {
        self.server.accepted()
    }

    /// Errors of finished connections (failed handshakes, resets), in
    /// order of completion.
    pub fn errors(&self) -> Vec<String> {
        self.server.errors()
    }
}

struct TlsSettings {
    name: String,
    server_config: Arc<ServerConfig>,
    big_response: Option<usize>,
    http: bool,
}

/// Reads a PROXY v1/v2 header if the stream starts with one; returns its
/// source address ("-" for LOCAL/UNKNOWN), or None when there is none.
fn strip_proxy_header(rec: &mut Recorder) -> Result<Option<String>, String> {
    let mut first = [0u8; 1];
    let n = rec
        .read(&mut first)
        .map_err(|e| format!("read first byte: {e}"))?;
    if n == 0 {
        return Ok(None);
    }
    match first[0] {
        0x0d => {
            let mut head = [0u8; 15];
            rec.read_exact_raw(&mut head)
                .map_err(|e| format!("read PROXY v2 header: {e}"))?;
            if head[..11] != *b"\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a" {
                return Err("bad PROXY v2 signature".to_owned());
            }
            let family = head[12];
            let len = usize::from(u16::from_be_bytes([head[13], head[14]]));
            let mut body = vec![0u8; len];
            rec.read_exact_raw(&mut body)
                .map_err(|e| format!("read PROXY v2 addresses: {e}"))?;
            let local = head[11] & 0x0f == 0;
            let source = match family >> 4 {
                1 if !local && len >= 12 => {
                    let ip = std::net::Ipv4Addr::new(body[0], body[1], body[2], body[3]);
                    let port = u16::from_be_bytes([body[8], body[9]]);
                    SocketAddr::from((ip, port)).to_string()
                }
                2 if !local && len >= 36 => {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(&body[..16]);
                    let port = u16::from_be_bytes([body[32], body[33]]);
                    SocketAddr::from((std::net::Ipv6Addr::from(octets), port)).to_string()
                }
                _ => "-".to_owned(),
            };
            Ok(Some(source))
        }
        b'P' => {
            let mut line = vec![b'P'];
            let mut byte = [0u8; 1];
            while !line.ends_with(b"\r\n") {
                if line.len() > 107 {
                    return Err("PROXY v1 header longer than 107 bytes".to_owned());
                }
                rec.read_exact_raw(&mut byte)
                    .map_err(|e| format!("read PROXY v1 header: {e}"))?;
                line.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&line);
            let fields: Vec<&str> = text.trim_end().split(' ').collect();
            let source = match fields.as_slice() {
                ["PROXY", "TCP4" | "TCP6", src, _dst, sport, _dport] => {
                    if src.contains(':') {
                        format!("[{src}]:{sport}")
                    } else {
                        format!("{src}:{sport}")
                    }
                }
                _ => "-".to_owned(),
            };
            Ok(Some(source))
        }
        _ => {
            rec.unread(&first);
            Ok(None)
        }
    }
}

/// Reads and drops until EOF or an error, at most 5 s and 1 MiB.
fn drain_until_eof(stream: &mut TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = [0u8; 4096];
    for _ in 0..256 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn looks_like_http(first: &[u8]) -> bool {
    const METHODS: [&[u8]; 6] = [
        b"GET ",
        b"HEAD ",
        b"POST ",
        b"PUT ",
        b"DELETE ",
        b"OPTIONS ",
    ];
    METHODS.iter().any(|m| first.starts_with(m))
}

fn is_eof(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
    )
}

fn serve_tls(settings: &TlsSettings, mut rec: Recorder) -> Result<(), String> {
    let proxy = strip_proxy_header(&mut rec)?;
    let conn = ServerConnection::new(Arc::clone(&settings.server_config))
        .map_err(|e| format!("{}: new connection: {e}", settings.name))?;
    let mut tls = StreamOwned::new(conn, rec);
    let mut buf = vec![0u8; 16 * 1024];
    let first = match tls.read(&mut buf) {
        Ok(n) => n,
        Err(err) if is_eof(&err) && !tls.conn.is_handshaking() => 0,
        Err(err) => return Err(format!("{}: handshake or first read: {err}", settings.name)),
    };
    if first == 0 {
        // The client closed without a message.
        return Ok(());
    }
    let alpn = tls.conn.alpn_protocol().map_or_else(
        || "-".to_owned(),
        |p| String::from_utf8_lossy(p).into_owned(),
    );
    let sni = tls.conn.server_name().unwrap_or("-").to_owned();
    let proxy_field = proxy.map(|src| format!(" proxy={src}")).unwrap_or_default();
    let line = format!(
        "backend={} alpn={alpn} sni={sni}{proxy_field}\n",
        settings.name
    );
    let io_err = |what: &str, e: io::Error| format!("{}: {what}: {e}", settings.name);
    if settings.http && looks_like_http(&buf[..first]) {
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{line}",
            line.len()
        );
        tls.write_all(response.as_bytes())
            .map_err(|e| io_err("write HTTP response", e))?;
        tls.conn.send_close_notify();
        tls.flush().map_err(|e| io_err("flush", e))?;
        let _ = tls.sock.inner.shutdown(Shutdown::Write);
        // Let the client close first: closing with its close_notify unread
        // would reset the connection and could destroy the response.
        drain_until_eof(&mut tls.sock.inner);
        return Ok(());
    }
    tls.write_all(line.as_bytes())
        .map_err(|e| io_err("write first line", e))?;
    if let Some(len) = settings.big_response {
        let mut sent = 0;
        while sent < len {
            let chunk: Vec<u8> = (sent..len.min(sent + 16 * 1024))
                .map(pattern_byte)
                .collect();
            tls.write_all(&chunk)
                .map_err(|e| io_err("write big response", e))?;
            sent += chunk.len();
        }
    }
    tls.flush().map_err(|e| io_err("flush", e))?;
    // Echo until the client's write side ends; bounded by IO_TIMEOUT idle.
    loop {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                tls.write_all(&buf[..n]).map_err(|e| io_err("echo", e))?;
                tls.flush().map_err(|e| io_err("flush", e))?;
            }
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(io_err("echo read", err)),
        }
    }
    tls.write_all(b"bye\n")
        .map_err(|e| io_err("write bye", e))?;
    tls.conn.send_close_notify();
    tls.flush().map_err(|e| io_err("flush", e))?;
    let _ = tls.sock.inner.shutdown(Shutdown::Write);
    Ok(())
}

/// A plain TCP backend on loopback; see the module documentation.
pub struct PlainBackend {
    name: String,
    server: Server,
}

impl fmt::Debug for PlainBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainBackend")
            .field("name", &self.name)
            .field("addr", &self.server.addr)
            .finish_non_exhaustive()
    }
}

impl PlainBackend {
    /// Starts a plain backend on 127.0.0.1 and a free port; it answers
    /// after the client's first bytes.
    ///
    /// # Panics
    /// When no port can be bound.
    pub fn start(name: &str) -> Self {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), name, false)
            .unwrap_or_else(|err| panic!("start a plain backend: {err}"))
    }

    /// Starts a plain backend that greets first (like SMTP), for
    /// `server_first_timeout` tests.
    ///
    /// # Panics
    /// When no port can be bound.
    pub fn start_speaking_first(name: &str) -> Self {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), name, true)
            .unwrap_or_else(|err| panic!("start a plain backend: {err}"))
    }

    /// Starts a backend on 127.0.0.1 that echoes every byte it gets, from
    /// the first, until the client's FIN.
    ///
    /// # Panics
    /// When no port can be bound.
    pub fn start_echo(name: &str) -> Self {
        let handler: Handler = Arc::new(serve_echo);
        Server::start(name, SocketAddr::from(([127, 0, 0, 1], 0)), handler)
            .map(|server| Self {
                name: name.to_owned(),
                server,
            })
            .unwrap_or_else(|err| panic!("start an echo backend: {err}"))
    }

    /// Starts a backend on 127.0.0.1 that closes every connection as soon
    /// as it accepts it, without a byte.
    ///
    /// # Panics
    /// When no port can be bound.
    pub fn start_closing(name: &str) -> Self {
        let handler: Handler = Arc::new(|recorder| {
            drop(recorder);
            Ok(())
        });
        Server::start(name, SocketAddr::from(([127, 0, 0, 1], 0)), handler)
            .map(|server| Self {
                name: name.to_owned(),
                server,
            })
            .unwrap_or_else(|err| panic!("start a closing backend: {err}"))
    }

    /// Starts a plain backend on `addr` (port 0: a free one).
    pub fn start_on(addr: SocketAddr, name: &str, speaks_first: bool) -> io::Result<Self> {
        let line = format!("backend={name}\n");
        let handler: Handler =
            Arc::new(move |recorder| serve_plain(line.as_bytes(), speaks_first, recorder));
        Ok(Self {
            name: name.to_owned(),
            server: Server::start(name, addr, handler)?,
        })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw bytes received so far, one entry per accepted connection.
    pub fn connections(&self) -> Vec<Vec<u8>> {
        self.server.connections()
    }

    /// How many connections it accepted.
    pub fn accepted(&self) -> usize {
        self.server.accepted()
    }

    /// Errors of finished connections.
    pub fn errors(&self) -> Vec<String> {
        self.server.errors()
    }
}

fn serve_echo(mut rec: Recorder) -> Result<(), String> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match rec.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => rec
                .write_all(&buf[..n])
                .map_err(|e| format!("echo backend: echo: {e}"))?,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) if is_eof(&err) => return Ok(()),
            Err(err) => return Err(format!("echo backend: read: {err}")),
        }
    }
}

fn serve_plain(line: &[u8], speaks_first: bool, mut rec: Recorder) -> Result<(), String> {
    let mut buf = vec![0u8; 16 * 1024];
    let io_err = |what: &str, e: io::Error| format!("plain backend: {what}: {e}");
    if speaks_first {
        rec.write_all(line).map_err(|e| io_err("greet", e))?;
    } else {
        match rec.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => rec.write_all(line).map_err(|e| io_err("answer", e))?,
            Err(err) if is_eof(&err) => return Ok(()),
            Err(err) => return Err(io_err("first read", err)),
        }
    }
    loop {
        match rec.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => rec.write_all(&buf[..n]).map_err(|e| io_err("echo", e))?,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) if is_eof(&err) => return Ok(()),
            Err(err) => return Err(io_err("echo read", err)),
        }
    }
    rec.write_all(b"bye\n").map_err(|e| io_err("bye", e))?;
    let _ = rec.inner.shutdown(Shutdown::Write);
    Ok(())
}
