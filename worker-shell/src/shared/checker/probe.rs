//! One active check of one instance, on a non-blocking socket: a connect,
//! and for a TLS check the ClientHello out and the head of the answer in.
//!
//! Owns: [`Probe`], its stages, and the words of each failure (what
//! `backend list` shows as the last error). Must never: block, read more
//! than the answer's head, or outlive its deadline (the checker ends it
//! then).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use super::hello::{ANSWER_HEAD, Answer, tls_answer};
use crate::shared::shortage::is_local;

/// How a check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Checked {
    Passed,
    /// The backend failed it; the text says how.
    Failed(String),
    /// This host ran short (descriptors, memory, local ports): the backend
    /// was never reached, and is not blamed.
    Local(String),
}

impl Checked {
    /// A socket error of the check, the backend's or this host's.
    fn of_error(context: String, error: &io::Error) -> Self {
        if is_local(error) {
            Self::Local(context)
        } else {
            Self::Failed(context)
        }
    }
}

#[derive(Debug)]
enum Stage {
    Connecting,
    /// Bytes of the ClientHello sent so far.
    Sending(usize),
    /// The answer's head read so far.
    Reading {
        head: [u8; ANSWER_HEAD],
        len: usize,
    },
}

/// A check in flight.
#[derive(Debug)]
pub(super) struct Probe {
    /// The checker's key of the instance checked.
    pub(super) target: usize,
    pub(super) deadline: Instant,
    address: SocketAddr,
    stream: TcpStream,
    /// `None`: a TCP check, done once connected.
    hello: Option<Arc<[u8]>>,
    stage: Stage,
}

impl Probe {
    /// Starts the connect, registered under `token`.
    pub(super) fn start(
        registry: &Registry,
        token: Token,
        target: usize,
        address: SocketAddr,
        hello: Option<Arc<[u8]>>,
        deadline: Instant,
    ) -> io::Result<Self> {
        let mut stream = TcpStream::connect(address)?;
        registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)?;
        Ok(Self {
            target,
            deadline,
            address,
            stream,
            hello,
            stage: Stage::Connecting,
        })
    }

    /// Moves as far as the socket allows; the check's result once known.
    pub(super) fn advance(&mut self) -> Option<Checked> {
        loop {
            match &mut self.stage {
                Stage::Connecting => {
                    // mio: connected once no error is pending and the peer
                    // address is known.
                    let failed = |e: io::Error| {
                        let context = format!("connect to {} failed: {e}", self.address);
                        Some(Checked::of_error(context, &e))
                    };
                    match self.stream.take_error() {
                        Ok(Some(e)) | Err(e) => return failed(e),
                        Ok(None) => {}
                    }
                    match self.stream.peer_addr() {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotConnected => return None,
                        Err(e) => return failed(e),
                    }
                    if self.hello.is_none() {
                        return Some(Checked::Passed);
                    }
                    self.stage = Stage::Sending(0);
                }
                Stage::Sending(sent) => {
                    let Some(hello) = self.hello.as_deref() else {
                        return Some(Checked::Passed);
                    };
                    if *sent >= hello.len() {
                        self.stage = Stage::Reading {
                            head: [0; ANSWER_HEAD],
                            len: 0,
                        };
                        continue;
                    }
                    match self.stream.write(&hello[*sent..]) {
                        Ok(n) => *sent += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            return Some(Checked::Failed(format!("sending the ClientHello: {e}")));
                        }
                    }
                }
                Stage::Reading { head, len } => match self.stream.read(&mut head[*len..]) {
                    Ok(0) => {
                        return Some(Checked::Failed(format!(
                            "closed after the ClientHello without a TLS record ({} byte(s) back)",
                            *len
                        )));
                    }
                    Ok(n) => {
                        *len += n;
                        match tls_answer(&head[..*len]) {
                            Answer::Tls => return Some(Checked::Passed),
                            Answer::NotTls => {
                                return Some(Checked::Failed(format!(
                                    "answered the ClientHello with bytes no TLS server sends \
                                     (first bytes {:02x?})",
                                    &head[..*len]
                                )));
                            }
                            Answer::Incomplete if *len == ANSWER_HEAD => {
                                return Some(Checked::Failed("a truncated TLS record".to_owned()));
                            }
                            Answer::Incomplete => {}
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Some(Checked::Failed(format!("reading the answer: {e}"))),
                },
            }
        }
    }

    /// Why it failed when its deadline came, `timeout` after its start.
    pub(super) fn timed_out(&self, timeout: Duration) -> String {
        match self.stage {
            Stage::Connecting => format!("connect to {} not done within {timeout:?}", self.address),
            Stage::Sending(_) | Stage::Reading { .. } => {
                format!("no TLS answer within {timeout:?}")
            }
        }
    }

    /// Takes the socket out of the checker's poll; it closes when dropped.
    pub(super) fn finish(mut self, registry: &Registry) {
        let _ = registry.deregister(&mut self.stream);
    }
}
