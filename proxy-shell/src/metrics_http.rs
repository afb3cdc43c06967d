//! The optional Prometheus endpoint (`metrics_address`): `GET /metrics`
//! answers the workers' summed metrics in the text exposition format.
//!
//! Owns: a small blocking HTTP/1.x responder on its own thread. It asks
//! the command socket for `QueryMetrics`, like any client, so the metrics it
//! serves are exactly those of `preread metrics get`. Must never: block a
//! worker or the command server, or accept a request larger than
//! `MAX_REQUEST` bytes or slower than `IO_TIMEOUT`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use command::channel::BlockingChannel;
use command::proto::{self, request::RequestType, response_content::ContentType};

use crate::worker::metrics::prometheus_text;

/// Largest request head read before answering 431.
const MAX_REQUEST: usize = 8 * 1024;
/// How long one scrape may take to send its request or read its answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `address` and serves scrapes on a thread of its own.
pub fn spawn(address: SocketAddr, command_socket: PathBuf) -> io::Result<()> {
    let listener = TcpListener::bind(address)?;
    std::thread::Builder::new()
        .name("preread-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => {
                        if let Err(e) = serve(stream, &command_socket) {
                            log::debug!("metrics scrape failed: {e}");
                        }
                    }
                    Err(e) => log::debug!("metrics accept failed: {e}"),
                }
            }
        })?;
    log::info!("metrics on http://{address}/metrics");
    Ok(())
}

/// Reads the request head: everything up to the blank line.
fn read_head(stream: &mut TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() >= MAX_REQUEST {
            return Ok(None);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(head))
}

fn answer(stream: &mut TcpStream, status: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())
}

fn serve(mut stream: TcpStream, command_socket: &PathBuf) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let Some(head) = read_head(&mut stream)? else {
        return answer(&mut stream, "431 Request Header Fields Too Large", "");
    };
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if method != b"GET" {
        return answer(&mut stream, "405 Method Not Allowed", "GET /metrics only\n");
    }
    if path != b"/metrics" {
        return answer(&mut stream, "404 Not Found", "GET /metrics\n");
    }
    match query_totals(command_socket) {
        Ok(text) => answer(&mut stream, "200 OK", &text),
        Err(message) => answer(
            &mut stream,
            "503 Service Unavailable",
            &format!("{message}\n"),
        ),
    }
}

fn query_totals(command_socket: &PathBuf) -> Result<String, String> {
    let mut channel =
        BlockingChannel::connect(command_socket, IO_TIMEOUT).map_err(|e| e.to_string())?;
    let request = proto::Request {
        request_type: Some(RequestType::QueryMetrics(proto::QueryMetrics {})),
    };
    let response = channel
        .request(&request, |_| {})
        .map_err(|e| e.to_string())?;
    match response.content.and_then(|c| c.content_type) {
        Some(ContentType::Metrics(report)) => Ok(prometheus_text(&report.total)),
        _ => Err(format!(
            "the proxy did not answer with metrics: {}",
            response.message
        )),
    }
}
