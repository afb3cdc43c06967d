//! One scrape of the metrics endpoint, from its accept to its close: read
//! the request head, ask the command socket for the series, write the
//! answer, and linger so the close does not destroy it.
//!
//! Owns: the HTTP/1.x exchange of one connection and its deadline: each
//! connection has [`REQUEST_DEADLINE`] from its accept to the end of its
//! answer: reading the head, asking the command socket and writing the
//! answer all take from that one budget. Of it, the head has
//! [`HEAD_DEADLINE`]: a client still sending its head then is closed, so a
//! dripping client holds a serving thread for at most that, and a scrape
//! queued behind as many of them as there are threads and places in the
//! queue still has most of its budget when it is served. It asks the
//! command socket for `QueryMetrics`, like any client, so the metrics it
//! serves are exactly those of `preread metrics get`, from whichever
//! process holds the command socket path.
//!
//! The request head is parsed by `httparse` (hyper's parser). No HTTP
//! server crate serves here: the maintained ones run on an async runtime
//! (hyper, axum), which this synchronous binary does not have, or, like
//! `tiny_http`, bound reads but not a whole request, which is what let one
//! dripping client hold the endpoint.
//!
//! Must never: hold a connection past its deadline, or read a request head
//! larger than `MAX_REQUEST` bytes.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use command::channel::{BlockingChannel, ChannelError, MAX_ANSWER_LEN};
use command::proto::{self, request::RequestType, response_content::ContentType};

use super::{MAX_SCRAPES_IN_FLIGHT, MAX_WAITING};
use preread_worker::metrics::exposition::{self, Format};

/// From a connection's accept to the end of its answer.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// From a connection's accept to the end of its request head, which a
/// scraper sends at once: a client still sending it by then is closed, so
/// it holds a serving thread for this long at most. A head that came in
/// whole while the connection waited for a thread is still served.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);

/// The shortest wait of a read: bytes already received are taken even
/// once the head's deadline has passed.
const MIN_READ_WAIT: Duration = Duration::from_millis(1);

/// Largest request head read before answering 431.
const MAX_REQUEST: usize = 8 * 1024;

/// Header lines parsed before answering 431.
const MAX_HEADERS: usize = 64;

/// After an answer, how long unread input is still drained (at most
/// `DISCARD_ON_CLOSE` bytes), so the close is not a reset that destroys the
/// answer before the client reads it (a 431 leaves much unread).
const LINGER: Duration = Duration::from_millis(200);

/// Bytes of unread input drained after an answer.
const DISCARD_ON_CLOSE: usize = 64 * 1024;

/// Of the deadline, kept for writing the answer after the command socket's
/// query (a 503 if the query ran out of time).
const ANSWER_RESERVE: Duration = Duration::from_millis(250);

/// Answers 503 without waiting: a fresh socket's send buffer takes it.
pub(super) fn refuse_busy(mut stream: TcpStream) {
    if stream.set_nonblocking(true).is_ok() {
        let body = format!(
            "{MAX_SCRAPES_IN_FLIGHT} scrapes in flight and {MAX_WAITING} waiting: try again\n"
        );
        let _ = stream.write(response_bytes("503 Service Unavailable", PLAIN, &body).as_slice());
    }
}

/// Why the series could not be had from the command socket: the body of
/// the 503 that answers the scrape.
#[derive(Debug)]
enum QueryError {
    /// The request's deadline passed before the command socket answered.
    Deadline(io::Error),
    /// The command socket could not be reached or did not answer.
    Channel(ChannelError),
    /// It answered, but not with metrics.
    NotMetrics(String),
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Deadline(error) => write!(f, "{error}"),
            Self::Channel(error) => write!(f, "the command socket: {error}"),
            Self::NotMetrics(message) => {
                write!(f, "the proxy did not answer with metrics: {message}")
            }
        }
    }
}

/// Time left before `deadline`, or a timeout error once it passed.
fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the request's {REQUEST_DEADLINE:?} are over"),
        ))
    } else {
        Ok(left)
    }
}

/// What the request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// More bytes are needed.
    Partial,
    /// A whole head: its method, path and `Accept` header.
    Complete {
        method: String,
        path: String,
        accept: Option<String>,
    },
    /// Not HTTP/1.x.
    Malformed,
    /// Over `MAX_HEADERS` header lines.
    TooManyHeaders,
}

fn parse_head(bytes: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => Head::Complete {
            method: request.method.unwrap_or_default().to_owned(),
            path: request.path.unwrap_or_default().to_owned(),
            accept: request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("accept"))
                .map(|h| String::from_utf8_lossy(h.value).into_owned()),
        },
        Ok(httparse::Status::Partial) => Head::Partial,
        Err(httparse::Error::TooManyHeaders) => Head::TooManyHeaders,
        Err(_) => Head::Malformed,
    }
}

/// Reads until the head is whole, malformed or over [`MAX_REQUEST`]. Once
/// `deadline` has passed, one last read takes what is already waiting.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> io::Result<Head> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; MAX_REQUEST];
    let mut last = false;
    loop {
        if last {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the request head took over {HEAD_DEADLINE:?}"),
            ));
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        last = wait.is_zero();
        stream.set_read_timeout(Some(wait.max(MIN_READ_WAIT)))?;
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        head.extend_from_slice(chunk.get(..n).unwrap_or_default());
        match parse_head(&head) {
            Head::Partial if head.len() >= MAX_REQUEST => return Ok(Head::TooManyHeaders),
            Head::Partial => {}
            done => return Ok(done),
        }
    }
}

/// The `Content-Type` of an answer that is not metrics.
const PLAIN: &str = "text/plain; charset=utf-8";

fn response_bytes(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Writes the whole answer before the deadline, then closes gracefully.
fn answer(stream: &mut TcpStream, deadline: Instant, status: &str, body: &str) -> io::Result<()> {
    answer_as(stream, deadline, status, PLAIN, body)
}

/// [`answer`] with its `Content-Type`.
fn answer_as(
    stream: &mut TcpStream,
    deadline: Instant,
    status: &str,
    content_type: &str,
    body: &str,
) -> io::Result<()> {
    let bytes = response_bytes(status, content_type, body);
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        stream.set_write_timeout(Some(left(deadline)?))?;
        match stream.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    linger(stream, deadline.min(Instant::now() + LINGER));
    Ok(())
}

/// Sends the FIN, then reads and drops what the client still sends until
/// it closes, `until`, or [`DISCARD_ON_CLOSE`] bytes.
fn linger(stream: &mut TcpStream, until: Instant) {
    if stream.shutdown(std::net::Shutdown::Write).is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < DISCARD_ON_CLOSE {
        let Ok(wait) = left(until) else {
            return;
        };
        if stream.set_read_timeout(Some(wait)).is_err() {
            return;
        }
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

pub(super) fn serve(
    mut stream: TcpStream,
    accepted: Instant,
    command_socket: &Path,
) -> io::Result<()> {
    let deadline = accepted + REQUEST_DEADLINE;
    let (method, path, accept) = match read_head(&mut stream, accepted + HEAD_DEADLINE)? {
        Head::Complete {
            method,
            path,
            accept,
        } => (method, path, accept),
        Head::TooManyHeaders => {
            return answer(
                &mut stream,
                deadline,
                "431 Request Header Fields Too Large",
                "",
            );
        }
        Head::Malformed | Head::Partial => {
            return answer(&mut stream, deadline, "400 Bad Request", "not HTTP/1.x\n");
        }
    };
    if method != "GET" {
        return answer(
            &mut stream,
            deadline,
            "405 Method Not Allowed",
            "GET /metrics only\n",
        );
    }
    if path != "/metrics" {
        return answer(&mut stream, deadline, "404 Not Found", "GET /metrics\n");
    }
    let format = Format::negotiate(accept.as_deref());
    match query_series(
        command_socket,
        deadline.checked_sub(ANSWER_RESERVE).unwrap_or(deadline),
    ) {
        Ok(series) => {
            let body = exposition::render(&series, format);
            answer_as(
                &mut stream,
                deadline,
                "200 OK",
                format.content_type(),
                &body,
            )
        }
        Err(error) => answer(
            &mut stream,
            deadline,
            "503 Service Unavailable",
            &format!("{error}\n"),
        ),
    }
}

fn query_series(
    command_socket: &Path,
    deadline: Instant,
) -> Result<Vec<proto::MetricSeries>, QueryError> {
    let time_left = || left(deadline).map_err(QueryError::Deadline);
    let mut channel = BlockingChannel::connect(command_socket, time_left()?)
        .map_err(QueryError::Channel)?
        .with_max_frame_len(MAX_ANSWER_LEN);
    let request = proto::Request {
        request_type: Some(RequestType::QueryMetrics(proto::QueryMetrics {
            series_only: true,
        })),
    };
    channel.set_timeout(time_left()?);
    channel.send(&request).map_err(QueryError::Channel)?;
    channel.set_timeout(time_left()?);
    let response = channel.recv().map_err(QueryError::Channel)?;
    match response.content.and_then(|c| c.content_type) {
        Some(ContentType::Metrics(report)) => Ok(report.series),
        _ => Err(QueryError::NotMetrics(response.message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_parsed_whole_or_asked_for_more() {
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Head::Complete {
                method: "GET".into(),
                path: "/metrics".into(),
                accept: None,
            }
        );
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\naccept: application/openmetrics-text\r\n\r\n"),
            Head::Complete {
                method: "GET".into(),
                path: "/metrics".into(),
                accept: Some("application/openmetrics-text".into()),
            }
        );
        assert_eq!(parse_head(b"GET /metrics HTTP/1.1\r\nHo"), Head::Partial);
        assert_eq!(parse_head(b"G"), Head::Partial);
        assert_eq!(parse_head(b"\x16\x03\x01\x00\x05hello"), Head::Malformed);
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "A: b\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(parse_head(many.as_bytes()), Head::TooManyHeaders);
    }

    #[test]
    fn the_deadline_is_an_error_once_over() {
        assert!(left(Instant::now() + Duration::from_secs(1)).is_ok());
        let over = left(Instant::now()).unwrap_err();
        assert_eq!(over.kind(), io::ErrorKind::TimedOut);
    }
}
