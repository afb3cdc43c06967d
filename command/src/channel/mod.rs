//! Length-prefixed protobuf frames over a Unix stream: the transport of the
//! command socket.
//!
//! A frame is a 4-byte big-endian payload length followed by that many bytes
//! of one protobuf message (a [`Request`](crate::proto::Request) from client
//! to proxy, a [`Response`] back). The length is capped
//! ([`DEFAULT_MAX_FRAME_LEN`] unless configured), and the cap is enforced as
//! soon as a length header is complete, so a peer can never make either side
//! buffer a huge frame.
//!
//! Owns: the frame format, the sans-io [`FrameDecoder`], the blocking client
//! end ([`BlockingChannel`], used by the CLI), the sans-io server end
//! ([`ServerEnd`], which the proxy's command server feeds from its own event
//! loop), and the FAILURE answer to a frame that could not be read
//! ([`failure_response`]).
//!
//! Must never: interpret or apply a request, validate its content, know an
//! event loop (the control-plane types serve any loop; the proxy's mio
//! adapter is `control-shell/src/server/channel_mio.rs`), own a listener, or
//! keep a connection alive after a frame error: once a frame is bad the byte
//! stream has lost its framing and the only safe move is to answer (best
//! effort) and close.
//!
//! Layout: `frame` holds the wire format and the decoder, `blocking` the
//! client end, `server_end` the server end; this file holds what they share
//! (limits, error codes, [`ChannelError`]) and the FAILURE answer.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::proto::{Response, ResponseStatus};

mod blocking;
mod frame;
mod server_end;
#[cfg(test)]
mod tests;

pub use blocking::BlockingChannel;
pub use frame::{FrameDecoder, encode_frame};
pub use server_end::{ReadOutcome, ServerEnd};

/// Bytes of the big-endian length header in front of every payload.
pub const HEADER_LEN: usize = 4;

/// Default cap on a frame's payload: 1 MiB. Far above any request, and
/// enough for the listings of a large configuration.
pub const DEFAULT_MAX_FRAME_LEN: usize = 1 << 20;

/// Cap on one answer the server writes: 64 MiB. An answer is only built
/// for a request, one at a time per client, so this bounds what one client
/// makes the proxy hold; it is above the request cap because a large
/// proxy's metrics (a series per backend) go past 1 MiB. A client that asks
/// for such an answer raises its own cap to this
/// ([`BlockingChannel::with_max_frame_len`]).
pub const MAX_ANSWER_LEN: usize = 64 << 20;

/// `error_code` of the FAILURE answer to a frame that could not be read (too
/// large, or not a valid message). Stable: scripts may match on it.
pub const E_CHANNEL_FRAME: &str = "E_CHANNEL_FRAME";

/// `error_code` of a FAILURE built from any other channel error (I/O,
/// timeout, closed peer). Stable: scripts may match on it.
pub const E_CHANNEL_IO: &str = "E_CHANNEL_IO";

/// The header is a `u32`, so no cap can exceed this, whatever is configured.
const MAX_WIRE_LEN: usize = u32::MAX as usize;

/// Consumed bytes are only shifted out of the decoder's buffer once there are
/// at least this many and they are at least half of it, so that many small
/// frames cost O(n) copying in total instead of O(n²).
const COMPACT_MIN: usize = 4096;

/// Same rule for the output buffer of [`ServerEnd`]: flushed bytes are only
/// shifted out when they are many and at least half of it.
const OUT_COMPACT_MIN: usize = 64 * 1024;

/// Bytes asked of the socket per `read` call. Public because it is part of
/// [`ServerEnd`]'s bound: a pause leaves at most one maximal frame and one
/// chunk buffered.
pub const READ_CHUNK: usize = 16 * 1024;

/// Sleep between connect attempts while the listen backlog is full.
const CONNECT_RETRY: Duration = Duration::from_millis(10);

/// What went wrong on the command channel. Every message says what happened
/// and what it means for the connection.
#[derive(Debug)]
#[non_exhaustive]
pub enum ChannelError {
    /// A frame's announced or actual payload length is over the cap. When
    /// reading, the connection must be closed: the stream has lost its
    /// framing.
    FrameTooLarge { len: usize, max: usize },
    /// A whole frame arrived but its payload is not a valid message of the
    /// expected type. The connection must be closed.
    Decode(prost::DecodeError),
    /// Connecting to the command socket failed (no such file, nobody
    /// listening, permission denied...).
    Connect { path: PathBuf, source: io::Error },
    /// The other end did not accept, take or answer in time.
    Timeout,
    /// The other end closed the connection before the exchange finished
    /// (possibly in the middle of a frame).
    Closed,
    /// Any other I/O error on the socket.
    Io(io::Error),
}

impl ChannelError {
    /// Whether this is an error in the bytes the peer sent (too large, or not
    /// decodable): the ones a server answers with [`failure_response`] before
    /// closing. Other errors leave nobody to answer.
    pub fn is_frame_error(&self) -> bool {
        matches!(self, Self::FrameTooLarge { .. } | Self::Decode(_))
    }
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FrameTooLarge { len, max } => write!(
                f,
                "a command frame of {len} bytes is over the {max}-byte limit, so it was \
                 refused (both ends must raise the limit for such messages)"
            ),
            Self::Decode(err) => write!(
                f,
                "a command frame is not a valid protobuf message of the expected type ({err}): \
                 the other end speaks another protocol or version"
            ),
            Self::Connect { path, source } => write!(
                f,
                "cannot connect to the command socket {}: {source} (is the proxy running, and \
                 is this the socket path of its configuration?)",
                path.display()
            ),
            Self::Timeout => f.write_str(
                "timed out on the command socket: the other end did not accept, take or answer \
                 in time (it may be busy or stuck; a longer timeout may help)",
            ),
            Self::Closed => f.write_str(
                "the other end closed the command connection before the exchange finished",
            ),
            Self::Io(err) => write!(f, "I/O error on the command socket: {err}"),
        }
    }
}

impl std::error::Error for ChannelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Decode(err) => Some(err),
            Self::Connect { source, .. } => Some(source),
            Self::Io(err) => Some(err),
            Self::FrameTooLarge { .. } | Self::Timeout | Self::Closed => None,
        }
    }
}

/// The FAILURE answer a server sends before closing a connection whose
/// frame it could not read: the error's text as the message, and
/// [`E_CHANNEL_FRAME`] for a frame error ([`E_CHANNEL_IO`] otherwise).
pub fn failure_response(err: &ChannelError) -> Response {
    let error_code = if err.is_frame_error() {
        E_CHANNEL_FRAME
    } else {
        E_CHANNEL_IO
    };
    Response {
        status: ResponseStatus::Failure as i32,
        message: format!("{err}; the proxy closes this connection"),
        error_code: error_code.to_owned(),
        content: None,
    }
}
