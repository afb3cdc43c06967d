//! HTTP/1.1 over a Unix socket for `ureq`: the connector and transport the
//! Docker source talks to the Engine API with.
//!
//! Why `ureq`: it is a maintained, blocking HTTP/1.1 client with a small
//! dependency tree (no async runtime), which fits a source that runs on a
//! thread of its own; its pluggable transport takes a Unix socket in place
//! of TCP, so the HTTP framing (chunked `/events` stream included) stays
//! `ureq`'s. `bollard` would bring tokio and hyper into the proxy for one
//! thread's sake.
//!
//! Owns: opening the socket for each connection `ureq` asks for (the URL's
//! host is ignored), moving bytes with the timeouts `ureq` gives, and a
//! shutdown handle so that [`ureq::Agent::shutdown`] interrupts a read
//! blocked in another thread. Must never: parse HTTP, or block past a
//! timeout `ureq` set.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, ShutdownHandle, Transport,
};
use ureq::{Error, Timeout};

/// Connects every request to the socket at `path`.
#[derive(Debug)]
pub(super) struct UnixConnector {
    pub(super) path: PathBuf,
}

impl Connector for UnixConnector {
    type Out = UnixTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<()>,
    ) -> Result<Option<Self::Out>, Error> {
        let stream = UnixStream::connect(&self.path)?;
        let transport = UnixTransport {
            stream: Arc::new(Shared(stream)),
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
        };
        let handle = Arc::downgrade(&transport.stream);
        (details.register_shutdown)(handle as Weak<dyn ShutdownHandle>)?;
        Ok(Some(transport))
    }
}

/// The socket, shared with the agent's shutdown handle.
struct Shared(UnixStream);

impl ShutdownHandle for Shared {
    fn shutdown(&self) {
        // Already closed or shut down: nothing left to interrupt.
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

/// One connection to the socket.
pub(super) struct UnixTransport {
    stream: Arc<Shared>,
    buffers: LazyBuffers,
}

impl fmt::Debug for UnixTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixTransport").finish_non_exhaustive()
    }
}

/// A timed-out read or write as `ureq` reports it, other errors as they are.
fn io_error(error: io::Error, reason: Timeout) -> Error {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::Timeout(reason),
        _ => Error::Io(error),
    }
}

impl Transport for UnixTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = timeout.for_write();
        let socket = &self.stream.0;
        socket.set_write_timeout(timeout.not_zero().map(|after| *after))?;
        let output = &self.buffers.output()[..amount];
        let mut writer = socket;
        writer
            .write_all(output)
            .map_err(|e| io_error(e, timeout.reason))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        let socket = &self.stream.0;
        socket.set_read_timeout(timeout.not_zero().map(|after| *after))?;
        let input = self.buffers.input_append_buf();
        let mut reader = socket;
        let amount = loop {
            match reader.read(input) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other.map_err(|e| io_error(e, timeout.reason))?,
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // A pooled connection is reusable when reading it would block: no
        // end of stream, no stray bytes.
        let socket = &self.stream.0;
        if socket.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let mut reader = socket;
        let open =
            matches!(reader.read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        socket.set_nonblocking(false).is_ok() && open
    }
}

/// The Unix connector needs no address: every request resolves to a
/// placeholder the connector ignores.
#[derive(Debug)]
pub(super) struct NoResolver;

impl Resolver for NoResolver {
    fn resolve(
        &self,
        _uri: &Uri,
        _config: &Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, Error> {
        let mut addresses = self.empty();
        addresses.push(SocketAddr::from(([127, 0, 0, 1], 0)));
        Ok(addresses)
    }
}
