//! "What did this client send?": `preread-parser` alone, on a socket.
//!
//! ```text
//! cargo run -p preread-parser --example what_did_it_send -- 127.0.0.1:8443
//! curl -k --resolve example.com:8443:127.0.0.1 https://example.com:8443/
//! ```
//!
//! Listens on the given address and, for each connection, reads until the
//! first bytes are a whole ClientHello (after a PROXY v1/v2 header, if one
//! comes first), or can never become one. It then prints what the client
//! offered, or which rule its bytes broke, and closes the connection. It
//! never answers the client, so the client reports a failed handshake.

use std::fmt::Write as _;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use preread_parser::proxy::{
    Addresses, ProxyHeader, ProxyParsed, V1_SIGNATURE, V2_SIGNATURE, parse_proxy_header,
};
use preread_parser::tls::{ClientHello, MAX_RECORD_LEN, Parsed, parse_client_hello};

/// Enough for a PROXY header and a ClientHello of several records.
const MAX_WINDOW: usize = 4 * MAX_RECORD_LEN;

/// How long a client may take to send its ClientHello.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the bytes so far amount to.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// A valid prefix: read more.
    NeedMore,
    /// The report to print: a whole ClientHello, or why there is none.
    Done(String),
}

/// Examines the whole window received so far.
fn examine(window: &[u8], scratch: &mut Vec<u8>) -> Verdict {
    let proxied =
        matches!(window.first(), Some(&b) if b == V1_SIGNATURE[0] || b == V2_SIGNATURE[0]);
    let (header, tls) = if proxied {
        match parse_proxy_header(window) {
            Ok(ProxyParsed::Complete(header)) => (Some(header), &window[header.len()..]),
            Ok(ProxyParsed::Incomplete(_)) => return Verdict::NeedMore,
            Err(error) => return Verdict::Done(format!("not a PROXY header: {error}")),
        }
    } else {
        (None, window)
    };
    let mut report = header.map(describe_proxy).unwrap_or_default();
    match parse_client_hello(tls, scratch) {
        Ok(Parsed::Complete(hello)) => describe_hello(&mut report, &hello, tls.len()),
        Ok(Parsed::Incomplete(_)) => return Verdict::NeedMore,
        Err(error) => report.push_str(&format!("no ClientHello: {error}")),
    }
    Verdict::Done(report)
}

fn describe_proxy(header: ProxyHeader<'_>) -> String {
    let endpoints = match header.addresses() {
        Addresses::Inet {
            source,
            destination,
            ..
        } => format!("from {source} to {destination}"),
        Addresses::Unix { .. } => "for a UNIX socket".to_owned(),
        Addresses::Unspecified => "without addresses".to_owned(),
    };
    format!(
        "PROXY v{} header, {} bytes, {endpoints}\n",
        header.version(),
        header.len()
    )
}

fn describe_hello(report: &mut String, hello: &ClientHello<'_>, received: usize) {
    let records = if hello.records == 1 {
        "record"
    } else {
        "records"
    };
    let name = hello.server_name.map_or_else(
        || "(none)".to_owned(),
        |name| name.escape_ascii().to_string(),
    );
    let alpn = hello.alpn.map_or_else(
        || "(none)".to_owned(),
        |offer| {
            let names: Vec<String> = offer.iter().map(|p| p.escape_ascii().to_string()).collect();
            names.join(", ")
        },
    );
    let versions = hello.supported_versions.map_or_else(
        || "(none)".to_owned(),
        |offer| {
            offer
                .iter()
                .map(version_name)
                .collect::<Vec<_>>()
                .join(", ")
        },
    );
    let ech = hello.ech.map_or("(none)", |kind| kind.as_str());
    // `write!` into a String cannot fail.
    let _ = write!(
        report,
        "ClientHello in {} {records}, {} bytes\n\
         server_name: {name}\n\
         alpn: {alpn}\n\
         supported_versions: {versions}\n\
         encrypted_client_hello: {ech}\n\
         bytes after the hello: {}",
        hello.records,
        hello.end,
        received - hello.end,
    );
}

fn version_name(version: u16) -> String {
    let name = match version {
        0x0304 => "TLS 1.3",
        0x0303 => "TLS 1.2",
        0x0302 => "TLS 1.1",
        0x0301 => "TLS 1.0",
        // RFC 8701: both bytes 0x?a, equal.
        v if v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff => "GREASE",
        _ => "unknown",
    };
    format!("0x{version:04x} ({name})")
}

/// Reads from `client` until [`examine`] has a report, the client stops,
/// or the window is full.
fn read_report(mut client: &TcpStream) -> io::Result<String> {
    client.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut window = Vec::new();
    let mut scratch = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        let stopped = match client.read(&mut chunk) {
            Ok(0) => "closed",
            Ok(read) => {
                window.extend_from_slice(&chunk[..read]);
                if let Verdict::Done(report) = examine(&window, &mut scratch) {
                    return Ok(report);
                }
                if window.len() < MAX_WINDOW {
                    continue;
                }
                "filled the window"
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                "went quiet"
            }
            Err(e) => return Err(e),
        };
        return Ok(format!(
            "the client {stopped} after {} bytes, before a whole ClientHello",
            window.len()
        ));
    }
}

/// Reports on `connections` connections, one after the other.
fn serve(listener: &TcpListener, connections: usize, out: &mut impl Write) -> io::Result<()> {
    for client in listener.incoming().take(connections) {
        let client = client?;
        let peer = client.peer_addr()?;
        let report = read_report(&client).unwrap_or_else(|error| format!("read failed: {error}"));
        writeln!(out, "{peer}:")?;
        for line in report.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let Some(listen) = std::env::args().nth(1) else {
        eprintln!("usage: what_did_it_send LISTEN_ADDRESS");
        return ExitCode::from(2);
    };
    let listener = match TcpListener::bind(&listen) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("what_did_it_send: listen on {listen}: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("listening on {listen}");
    match serve(&listener, usize::MAX, &mut io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("what_did_it_send: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo test` runs these (`test = true` in Cargo.toml): the tool above,
/// on loopback.
#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    /// A minimal one-record ClientHello naming `sni`, offering `alpn` and
    /// TLS 1.3 with 1.2.
    fn client_hello(sni: &str, alpn: &[&str]) -> Vec<u8> {
        let name = sni.as_bytes();
        let mut ext = vec![0, 0];
        ext.extend(((name.len() + 5) as u16).to_be_bytes());
        ext.extend(((name.len() + 3) as u16).to_be_bytes());
        ext.push(0);
        ext.extend((name.len() as u16).to_be_bytes());
        ext.extend(name);
        let list: Vec<u8> = alpn
            .iter()
            .flat_map(|p| [&[p.len() as u8][..], p.as_bytes()].concat())
            .collect();
        ext.extend([0, 16]);
        ext.extend(((list.len() + 2) as u16).to_be_bytes());
        ext.extend((list.len() as u16).to_be_bytes());
        ext.extend(list);
        ext.extend([0x00, 0x2b, 0, 5, 4, 0x03, 0x04, 0x03, 0x03]);
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

    /// Sends each of `clients` (a list of writes) to the tool, and returns
    /// what it printed.
    fn run(clients: &[Vec<Vec<u8>>]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let address = listener.local_addr().expect("address");
        let mut out = Vec::new();
        thread::scope(|scope| {
            let tool = scope.spawn(|| serve(&listener, clients.len(), &mut out));
            for writes in clients {
                let mut client = TcpStream::connect(address).expect("connect");
                client
                    .set_read_timeout(Some(READ_TIMEOUT))
                    .expect("timeout");
                for write in writes {
                    client.write_all(write).expect("write");
                    thread::sleep(Duration::from_millis(10));
                }
                client
                    .shutdown(std::net::Shutdown::Write)
                    .expect("half-close");
                // The tool closes once it has reported: nothing comes back.
                let mut answer = Vec::new();
                client.read_to_end(&mut answer).expect("read to the close");
                assert!(answer.is_empty(), "{answer:?}");
            }
            tool.join().expect("tool thread").expect("serve");
        });
        String::from_utf8(out).expect("UTF-8 report")
    }

    fn without_peers(report: &str) -> Vec<&str> {
        report
            .lines()
            .filter(|line| line.starts_with("  "))
            .collect()
    }

    #[test]
    fn reports_what_a_client_offered() {
        let hello = client_hello("www.example.com", &["h2", "http/1.1"]);
        let header = b"PROXY TCP4 192.0.2.7 198.51.100.1 51234 443\r\n";
        let proxied = [&header[..], &hello].concat();
        let report = run(&[
            vec![hello[..7].to_vec(), hello[7..].to_vec()],
            vec![proxied[..30].to_vec(), proxied[30..].to_vec()],
        ]);
        let hello_lines = [
            format!("  ClientHello in 1 record, {} bytes", hello.len()),
            "  server_name: www.example.com".to_owned(),
            "  alpn: h2, http/1.1".to_owned(),
            "  supported_versions: 0x0304 (TLS 1.3), 0x0303 (TLS 1.2)".to_owned(),
            "  encrypted_client_hello: (none)".to_owned(),
            "  bytes after the hello: 0".to_owned(),
        ];
        let mut expected = hello_lines.to_vec();
        expected.push(format!(
            "  PROXY v1 header, {} bytes, from 192.0.2.7:51234 to 198.51.100.1:443",
            header.len()
        ));
        expected.extend(hello_lines);
        assert_eq!(without_peers(&report), expected, "{report}");
        assert_eq!(
            report
                .lines()
                .filter(|l| l.starts_with("127.0.0.1:"))
                .count(),
            2,
            "{report}"
        );
    }

    #[test]
    fn reports_why_there_is_no_client_hello() {
        let hello = client_hello("www.example.com", &["h2"]);
        let report = run(&[
            vec![b"GET / HTTP/1.1\r\n\r\n".to_vec()],
            vec![hello[..hello.len() - 1].to_vec()],
            vec![b"PROXY TCP5 x\r\n".to_vec()],
        ]);
        assert_eq!(
            without_peers(&report),
            [
                "  no ClientHello: not a TLS handshake record".to_owned(),
                format!(
                    "  the client closed after {} bytes, before a whole ClientHello",
                    hello.len() - 1
                ),
                "  not a PROXY header: malformed PROXY v1 line: protocol is not TCP4, TCP6 or UNKNOWN"
                    .to_owned(),
            ],
            "{report}"
        );
    }

    #[test]
    fn names_grease_and_unknown_versions() {
        assert_eq!(version_name(0x0304), "0x0304 (TLS 1.3)");
        assert_eq!(version_name(0x7a7a), "0x7a7a (GREASE)");
        assert_eq!(version_name(0x7a8a), "0x7a8a (unknown)");
    }
}
