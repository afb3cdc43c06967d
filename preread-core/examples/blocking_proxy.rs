//! An SNI proxy in one file: `preread-core` inside a plain blocking
//! `std::net` accept loop, one thread per connection.
//!
//! ```text
//! cargo run -p preread-core --example blocking_proxy -- \
//!     127.0.0.1:8443 example.com=127.0.0.1:9001 '*.example.org=127.0.0.1:9002'
//! ```
//!
//! `--help` prints the usage ([`USAGE`]).
//!
//! Each connection is read until the core decides. A routed connection is
//! connected to the route's backend, the whole window is replayed to it
//! (the backend's TLS server sees the ClientHello as the client sent it),
//! and bytes are then relayed both ways until each side closes. A refused
//! connection is closed, and the reason is printed.
//!
//! This is the embedding, not the preread proxy: no PROXY header, no
//! default cluster, no alerts, no metrics, no reload. Those live in the
//! `preread` binary, around the same core.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use preread_core::pattern::validate_sni_pattern;
use preread_core::routes::{AlpnSet, ClusterId, RouteTable};
use preread_core::window::read_budget;
use preread_core::{Input, Output, PrereadConfig, RejectReason, Route, SniPrereadCore};

/// The listener's routes, and where each cluster's (one) backend listens.
#[derive(Debug)]
struct Proxy {
    config: PrereadConfig,
    backends: HashMap<ClusterId, SocketAddr>,
}

impl Proxy {
    /// Routes from `PATTERN=BACKEND` arguments. The backend address doubles
    /// as the cluster name.
    fn from_routes<'a>(routes: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut table = RouteTable::new();
        let mut backends = HashMap::new();
        for route in routes {
            let (pattern, backend) = route
                .split_once('=')
                .ok_or_else(|| format!("route `{route}`: write PATTERN=BACKEND"))?;
            let pattern =
                validate_sni_pattern(pattern).map_err(|e| format!("route `{route}`: {e}"))?;
            let address: SocketAddr = backend
                .parse()
                .map_err(|e| format!("route `{route}`: backend `{backend}`: {e}"))?;
            let cluster = ClusterId::from(backend);
            table
                .insert(pattern, AlpnSet::Any, cluster.clone())
                .map_err(|e| format!("route `{route}`: {e}"))?;
            backends.insert(cluster, address);
        }
        Ok(Self {
            config: PrereadConfig::new(table),
            backends,
        })
    }
}

/// Accepts `connections` connections (or runs forever with `usize::MAX`),
/// each served on a thread of its own; returns once those threads ended.
fn serve(listener: &TcpListener, proxy: &Proxy, connections: usize) -> io::Result<()> {
    thread::scope(|scope| {
        for client in listener.incoming().take(connections) {
            let client = client?;
            scope.spawn(move || {
                let peer = client
                    .peer_addr()
                    .map_or_else(|e| e.to_string(), |a| a.to_string());
                match handle(proxy, client) {
                    Ok(line) => println!("{peer}: {line}"),
                    Err(error) => println!("{peer}: {error}"),
                }
            });
        }
        Ok(())
    })
}

/// One connection: preread, then relay or close. Returns what happened.
fn handle(proxy: &Proxy, client: TcpStream) -> io::Result<String> {
    let (window, decision) = preread(&proxy.config, &client)?;
    let route = match decision {
        Ok(route) => route,
        Err(reason) => return Ok(format!("refused: {reason}")),
    };
    let backend = proxy
        .backends
        .get(&route.cluster)
        .ok_or_else(|| io::Error::other(format!("no backend for cluster {}", route.cluster)))?;
    let line = describe(&route, backend);
    client.set_read_timeout(None)?;
    let mut upstream = TcpStream::connect(backend)?;
    // The backend gets everything the client sent, ClientHello first.
    upstream.write_all(&window[route.content_offset..])?;
    relay(client, upstream)?;
    Ok(line)
}

/// Where a connection goes, or why it is refused.
type Decision = Result<Arc<Route>, RejectReason>;

/// Reads until the core decides: the whole window after every read, a
/// timeout when the deadline passes, a close when the client leaves.
fn preread(config: &PrereadConfig, mut client: &TcpStream) -> io::Result<(Vec<u8>, Decision)> {
    let mut core = SniPrereadCore::new();
    let mut window = vec![0; config.max_bytes];
    let mut len = 0;
    loop {
        let now = Instant::now();
        // Before the first byte the core has no deadline yet: a silent
        // client gets the same time as a slow one.
        let due = core.deadline().unwrap_or(now + config.timeout);
        client.set_read_timeout(Some(
            due.saturating_duration_since(now)
                .max(Duration::from_millis(1)),
        ))?;
        let budget = read_budget(config.max_bytes, len);
        let input = match client.read(&mut window[len..len + budget]) {
            Ok(0) => Input::FrontClosed,
            Ok(read) => {
                len += read;
                Input::Bytes {
                    buf: &window[..len],
                    now: Instant::now(),
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Input::Timeout {
                    now: Instant::now(),
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => Input::FrontClosed,
        };
        let decision = match core.handle_input(config, input) {
            Output::NeedMore { .. } => continue,
            Output::Routed(route) => Ok(route),
            Output::Reject(reason) => Err(reason),
        };
        window.truncate(len);
        return Ok((window, decision));
    }
}

/// Copies each direction until its sender closes, then closes it on the
/// other side, so that a half-close travels through.
fn relay(client: TcpStream, upstream: TcpStream) -> io::Result<()> {
    let (client_rx, upstream_rx) = (client.try_clone()?, upstream.try_clone()?);
    thread::scope(|scope| {
        let up = scope.spawn(|| copy_then_shutdown(client_rx, &upstream));
        let down = copy_then_shutdown(upstream_rx, &client);
        let up = up
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("relay thread panicked")));
        down.and(up)
    })
}

fn copy_then_shutdown(mut from: TcpStream, mut to: &TcpStream) -> io::Result<()> {
    let copied = io::copy(&mut from, &mut to);
    // The peer may be gone already; the copy's result is the one to report.
    let _ = to.shutdown(Shutdown::Write);
    copied.map(drop)
}

fn describe(route: &Route, backend: &SocketAddr) -> String {
    let sni = route.sni.as_ref().map_or("-", |name| name.as_str());
    let pattern = route
        .matched_sni
        .as_ref()
        .map_or_else(String::new, |p| p.to_string());
    format!("sni {sni} matched {pattern} -> {backend}")
}

const USAGE: &str = "\
usage: blocking_proxy LISTEN PATTERN=BACKEND...

An SNI proxy on std::net: accepts on LISTEN (ip:port), reads each
connection's ClientHello without terminating TLS, and relays it to the
BACKEND (ip:port) of the PATTERN that matches its SNI: an exact name,
*.example.org (one label) or **.example.org (any depth), the most specific
winning. A connection no pattern matches is closed, and the reason printed.

example:
  blocking_proxy 127.0.0.1:8443 example.com=127.0.0.1:9001 '*.example.org=127.0.0.1:9002'";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Invocation<'a> {
    /// `-h` or `--help`: the usage on stdout, success.
    Help,
    /// Serve on `listen` with these `PATTERN=BACKEND` routes.
    Serve {
        listen: &'a str,
        routes: &'a [String],
    },
    /// Nothing to listen on: the usage on stderr, status 2.
    Usage,
}

fn invocation(args: &[String]) -> Invocation<'_> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Invocation::Help;
    }
    match args.split_first() {
        Some((listen, routes)) => Invocation::Serve { listen, routes },
        None => Invocation::Usage,
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (listen, routes) = match invocation(&args) {
        Invocation::Help => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Invocation::Usage => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
        Invocation::Serve { listen, routes } => (listen, routes),
    };
    let proxy = match Proxy::from_routes(routes.iter().map(String::as_str)) {
        Ok(proxy) => proxy,
        Err(message) => {
            eprintln!("blocking_proxy: {message}");
            return ExitCode::from(2);
        }
    };
    let listener = match TcpListener::bind(listen) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!(
                "blocking_proxy: listen on {listen}: {error} (give LISTEN as ip:port; --help for the usage)"
            );
            return ExitCode::FAILURE;
        }
    };
    println!(
        "listening on {listen}, {} routes",
        proxy.config.routes.len()
    );
    match serve(&listener, &proxy, usize::MAX) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("blocking_proxy: accept: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo test` runs these (`test = true` in Cargo.toml): the proxy above,
/// on loopback, between a client and a backend.
#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal one-record ClientHello naming `sni`.
    fn client_hello(sni: &str) -> Vec<u8> {
        let name = sni.as_bytes();
        let mut ext = vec![0, 0];
        ext.extend(((name.len() + 5) as u16).to_be_bytes());
        ext.extend(((name.len() + 3) as u16).to_be_bytes());
        ext.push(0);
        ext.extend((name.len() as u16).to_be_bytes());
        ext.extend(name);
        let mut body = vec![3, 3];
        body.extend([1; 32]);
        body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        body.extend((ext.len() as u16).to_be_bytes());
        body.extend(ext);
        let mut record = vec![22, 3, 1];
        record.extend(((body.len() + 4) as u16).to_be_bytes());
        record.push(1);
        record.extend(&(body.len() as u32).to_be_bytes()[1..]);
        record.extend(body);
        record
    }

    fn loopback() -> TcpListener {
        TcpListener::bind("127.0.0.1:0").expect("bind loopback")
    }

    fn connect(to: &TcpListener) -> TcpStream {
        let stream = TcpStream::connect(to.local_addr().expect("address")).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        stream
    }

    /// The backend receives the client's bytes exactly, ClientHello split
    /// over two writes first; its answer and both closes come back.
    #[test]
    fn routes_replays_the_window_and_relays_both_ways() {
        let backend = loopback();
        let route = format!("*.example.com={}", backend.local_addr().expect("address"));
        let proxy = Proxy::from_routes([route.as_str()]).expect("routes");
        let front = loopback();
        thread::scope(|scope| {
            let server = scope.spawn(|| serve(&front, &proxy, 1));
            let mut client = connect(&front);
            let hello = client_hello("www.example.com");
            client.write_all(&hello[..20]).expect("write");
            thread::sleep(Duration::from_millis(20));
            client.write_all(&hello[20..]).expect("write");
            client.write_all(b"after the hello").expect("write");
            client.shutdown(Shutdown::Write).expect("half-close");

            let (mut upstream, _) = backend.accept().expect("accept");
            upstream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            let mut received = Vec::new();
            upstream
                .read_to_end(&mut received)
                .expect("read to the client's close");
            assert_eq!(received, [&hello[..], b"after the hello"].concat());
            upstream.write_all(b"from the backend").expect("write");
            drop(upstream);

            let mut answer = Vec::new();
            client
                .read_to_end(&mut answer)
                .expect("read to the backend's close");
            assert_eq!(answer, b"from the backend");
            server.join().expect("server thread").expect("serve");
        });
    }

    /// A name no route matches, and bytes that are not TLS: closed without
    /// a byte, and no backend is ever dialled.
    #[test]
    fn refuses_what_the_core_refuses() {
        let backend = loopback();
        let route = format!("example.com={}", backend.local_addr().expect("address"));
        let proxy = Proxy::from_routes([route.as_str()]).expect("routes");
        let front = loopback();
        for (sent, reason) in [
            (client_hello("example.org"), RejectReason::SniUnmatched),
            (b"GET / HTTP/1.1\r\n\r\n".to_vec(), RejectReason::NotTls),
        ] {
            let mut client = connect(&front);
            client.write_all(&sent).expect("write");
            let (accepted, _) = front.accept().expect("accept");
            assert_eq!(
                handle(&proxy, accepted).expect("handle"),
                format!("refused: {reason}")
            );
            let mut answer = Vec::new();
            client.read_to_end(&mut answer).expect("read to the close");
            assert!(answer.is_empty(), "{answer:?}");
        }
        backend.set_nonblocking(true).expect("nonblocking");
        assert_eq!(
            backend.accept().map(drop).map_err(|e| e.kind()),
            Err(ErrorKind::WouldBlock)
        );
    }

    #[test]
    fn help_is_asked_for_anywhere_and_nothing_is_a_usage_error() {
        let args =
            |line: &[&str]| -> Vec<String> { line.iter().map(|a| (*a).to_owned()).collect() };
        assert_eq!(invocation(&args(&["--help"])), Invocation::Help);
        assert_eq!(
            invocation(&args(&["127.0.0.1:8443", "-h"])),
            Invocation::Help
        );
        assert_eq!(invocation(&[]), Invocation::Usage);
        let serve = args(&["127.0.0.1:8443", "a.example=127.0.0.1:9001"]);
        assert_eq!(
            invocation(&serve),
            Invocation::Serve {
                listen: "127.0.0.1:8443",
                routes: &serve[1..]
            }
        );
        assert!(USAGE.starts_with("usage: blocking_proxy LISTEN PATTERN=BACKEND..."));
    }

    /// A client that sends half a hello and waits is refused at the
    /// deadline, not left hanging.
    #[test]
    fn a_stalled_hello_times_out() {
        let mut proxy = Proxy::from_routes([]).expect("routes");
        proxy.config.timeout = Duration::from_millis(100);
        let front = loopback();
        let mut client = connect(&front);
        client
            .write_all(&client_hello("www.example.com")[..30])
            .expect("write");
        let (accepted, _) = front.accept().expect("accept");
        let started = Instant::now();
        assert_eq!(
            handle(&proxy, accepted).expect("handle"),
            "refused: fragmented"
        );
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(90) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    }
}
