//! The command socket's client connections: accept (with the peer check
//! and the cap on clients), read requests one at a time per client, write
//! answers, close, and close the clients the server waited on too long.
//!
//! Owns: each client's channel, whether it waits for an answer, and the
//! bounds of what one client can make the proxy hold. A client is served
//! in order: its next request is taken only once the previous one was
//! answered. Once its unread answers reach [`MAX_QUEUED_ANSWER_BYTES`],
//! nothing more is read from it until it reads (its requests wait in its
//! own socket buffer, so its writes block: backpressure). A client the
//! server waits on (for a whole request, or for it to read its answers
//! below the cap) is closed after `command_client_timeout`; a client over
//! [`MAX_COMMAND_CLIENTS`] is answered `E_BUSY` and closed at once.
//!
//! Must never: block on a client, or read from a client whose answers are
//! over the cap.

use std::io::{self, Read, Write};
use std::time::Instant;

use command::channel::{
    ChannelError, DEFAULT_MAX_FRAME_LEN, ReadOutcome, encode_frame, failure_response,
};
use command::proto;
use mio::{Events, Interest, Token};

use super::channel_mio::MioChannel;
use super::responses::failure;
use super::socket::{self, MAX_COMMAND_CLIENTS};
use super::{CommandServer, FINAL_FLUSH, MAX_CLIENT_KEY};
use preread_worker::answer_code::AnswerCode;

/// Bytes of unread input discarded before closing a client after a frame
/// error, so the close does not turn into a reset that loses the answer.
const DISCARD_ON_CLOSE: usize = 1 << 16;

/// Unread answer bytes past which a client's requests are no longer taken
/// until it reads. One more answer can be queued on top (a request taken
/// below the cap is answered), so a client holds at most this plus one
/// frame of output, and one frame of input in its decoder.
pub const MAX_QUEUED_ANSWER_BYTES: usize = 256 * 1024;

/// One client, as the jobs waiting for it know it: its slab key and a
/// serial, so an answer never reaches a later client of the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct ClientRef {
    key: usize,
    serial: u64,
}

impl ClientRef {
    pub(super) fn new(key: usize, serial: u64) -> Self {
        Self { key, serial }
    }

    /// What the coordinator knows the client by: serials are never reused.
    pub(super) fn serial(self) -> u64 {
        self.serial
    }
}

#[derive(Debug)]
pub(super) struct Client {
    channel: MioChannel,
    serial: u64,
    /// A request of this client is being served: take no other.
    busy: bool,
    /// The socket may hold bytes not read yet (a readable edge, or a read
    /// that paused).
    may_read: bool,
    /// Close once the queued answers are written; read nothing more.
    closing: bool,
    /// Why this client may not command the proxy: its first request is
    /// answered with this, then it is closed.
    refused: Option<String>,
    /// Since when the server waits on this client: its accept, or its last
    /// request taken, answer queued, or answers read down below the cap.
    /// Only counts while it is not busy.
    waiting_since: Instant,
}

/// Answers a client over [`MAX_COMMAND_CLIENTS`], best effort: one
/// non-blocking write of a short frame, and the stream is dropped.
fn refuse_busy(stream: &mio::net::UnixStream) {
    let answer = failure(
        AnswerCode::Busy,
        format!(
            "the command socket already serves {MAX_COMMAND_CLIENTS} clients, the most it \
             serves at once; try again once some have closed"
        ),
    );
    if let Ok(frame) = encode_frame(&answer, DEFAULT_MAX_FRAME_LEN) {
        let mut writer = stream;
        let _ = writer.write(&frame);
    }
    // Closed now, whoever else holds a copy (see `close`).
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Reads and drops what the socket still holds, up to a bound.
fn discard_input(stream: &mio::net::UnixStream) {
    let mut sink = [0u8; 4096];
    let mut left = DISCARD_ON_CLOSE;
    let mut reader = stream;
    while left > 0 {
        match reader.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

impl CommandServer {
    /// Accepts every waiting connection.
    pub(super) fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    log::warn!("command socket: accept failed: {error}");
                    return;
                }
            }
        }
    }

    fn admit(&mut self, stream: mio::net::UnixStream) {
        if self.clients.len() >= MAX_COMMAND_CLIENTS {
            refuse_busy(&stream);
            if !self.clients_full {
                self.clients_full = true;
                log::warn!(
                    "command socket: {MAX_COMMAND_CLIENTS} clients connected, the most it \
                     serves at once: new clients are refused (E_BUSY) until some close"
                );
            }
            return;
        }
        self.clients_full = false;
        let mut channel = MioChannel::new(stream);
        let refused = match socket::peer_uid(channel.get_ref()) {
            Ok(uid) if socket::is_authorized(uid, self.own_euid) => None,
            Ok(uid) => Some(format!(
                "user {uid} may not command this proxy (only root and user {} may)",
                self.own_euid
            )),
            Err(error) => Some(format!("cannot check the client's credentials: {error}")),
        };
        if let Some(message) = &refused {
            log::warn!("command socket: refusing a client: {message}");
        }
        let key = self.clients.vacant_key();
        if key >= MAX_CLIENT_KEY {
            log::warn!("command socket: too many clients");
            return;
        }
        if let Err(error) = self.poll.registry().register(
            &mut channel,
            Token(key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            log::warn!("command socket: cannot register a client: {error}");
            return;
        }
        let serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1);
        self.keys.insert(serial, key);
        self.clients.insert(Client {
            channel,
            serial,
            refused,
            busy: false,
            may_read: true,
            closing: false,
            waiting_since: Instant::now(),
        });
        self.woken.push_back(ClientRef { key, serial });
    }

    /// A readiness event on client `key`.
    pub(super) fn client_event(&mut self, key: usize, writable: bool) {
        let Some(client) = self.clients.get_mut(key) else {
            return;
        };
        let who = ClientRef {
            key,
            serial: client.serial,
        };
        // Readable or not, an event may mean input (hang-ups included).
        client.may_read = true;
        if writable && !self.flush(who) {
            return;
        }
        self.pump(who);
    }

    fn client_mut(&mut self, who: ClientRef) -> Option<&mut Client> {
        self.clients
            .get_mut(who.key)
            .filter(|client| client.serial == who.serial)
    }

    /// Marks `who` as waiting for an answer: its next request waits.
    pub(super) fn set_busy(&mut self, who: ClientRef) {
        if let Some(client) = self.client_mut(who) {
            client.busy = true;
        }
    }

    /// Takes and serves `who`'s requests until it waits for an answer, has
    /// nothing more, or is closed.
    pub(super) fn pump(&mut self, who: ClientRef) {
        loop {
            let Some(client) = self.client_mut(who) else {
                return;
            };
            if client.busy || client.closing {
                return;
            }
            // Backpressure: the client reads its answers before it is heard
            // again; the writable event that follows its read pumps it.
            if client.channel.pending_output() >= MAX_QUEUED_ANSWER_BYTES {
                return;
            }
            let taken = client.channel.next_request();
            if matches!(taken, Ok(Some(_))) {
                client.waiting_since = Instant::now();
            }
            match taken {
                Ok(Some(_)) if client.refused.is_some() => {
                    let message = client.refused.take().unwrap_or_default();
                    let _ = client
                        .channel
                        .queue(&failure(AnswerCode::Permission, message));
                    client.closing = true;
                    self.flush(who);
                    return;
                }
                Ok(Some(request)) => {
                    self.handle(who, request);
                    continue;
                }
                Ok(None) => {}
                Err(error) if error.is_frame_error() => {
                    log::warn!("command socket: bad frame from a client: {error}");
                    let _ = client.channel.queue(&failure_response(&error));
                    client.closing = true;
                    self.flush(who);
                    return;
                }
                Err(_) => {
                    // The peer closed in the middle of a frame.
                    self.close(who);
                    return;
                }
            }
            if client.may_read {
                match client.channel.read_ready() {
                    Ok(ReadOutcome::Drained | ReadOutcome::PeerClosed) => client.may_read = false,
                    Ok(ReadOutcome::Paused) => {}
                    Err(error) => {
                        log::debug!("command socket: read failed: {error}");
                        self.close(who);
                        return;
                    }
                }
                continue;
            }
            if client.channel.is_peer_closed() {
                // Every request it sent is answered: close once written.
                client.closing = true;
                self.flush(who);
            }
            return;
        }
    }

    /// Queues `response` for `who` (if still connected), writes what can be
    /// written, and frees it for its next request.
    pub(super) fn respond(&mut self, who: ClientRef, response: &proto::Response) {
        let Some(client) = self.client_mut(who) else {
            return;
        };
        if let Err(error) = client.channel.queue(response) {
            log::warn!("command socket: answer not sent: {error}");
            let _ = client.channel.queue(&failure_response(&error));
        }
        client.waiting_since = Instant::now();
        if client.busy {
            client.busy = false;
            self.woken.push_back(who);
        }
        self.flush(who);
    }

    /// Writes `who`'s queued answers; closes it on a write error, or once
    /// flushed if it is closing. Returns whether it is still open.
    fn flush(&mut self, who: ClientRef) -> bool {
        let Some(client) = self.client_mut(who) else {
            return false;
        };
        let was_over = client.channel.pending_output() >= MAX_QUEUED_ANSWER_BYTES;
        let written = client.channel.write_ready();
        if was_over && client.channel.pending_output() < MAX_QUEUED_ANSWER_BYTES {
            client.waiting_since = Instant::now();
        }
        match written {
            Ok(true) if client.closing => {
                self.close(who);
                false
            }
            Ok(_) => true,
            Err(error) => {
                log::debug!("command socket: write failed: {error}");
                self.close(who);
                false
            }
        }
    }

    fn close(&mut self, who: ClientRef) {
        if self.client_mut(who).is_none() {
            return;
        }
        let mut client = self.clients.remove(who.key);
        self.keys.remove(&who.serial);
        self.inbox.push_back(coordinator::Input::ClientGone {
            client: coordinator::ClientId(who.serial),
        });
        let _ = self.poll.registry().deregister(&mut client.channel);
        discard_input(client.channel.get_ref());
        // The client reads its end now, even while a process this one is
        // starting (an upgrade's successor) holds a copy of the descriptor
        // until its exec: dropping ours alone would close it only then.
        let _ = client.channel.get_ref().shutdown(std::net::Shutdown::Both);
    }

    /// Closes every client the server waited on for `command_client_timeout`
    /// (a partial or missing request, or answers left unread), and returns
    /// when the next one would be due.
    pub(super) fn expire_clients(&mut self, now: Instant) -> Option<Instant> {
        let timeout = self.settings.client_timeout;
        let mut next: Option<Instant> = None;
        let mut expired = Vec::new();
        for (key, client) in &self.clients {
            if client.busy {
                continue;
            }
            let due = client.waiting_since + timeout;
            if due <= now {
                expired.push(ClientRef {
                    key,
                    serial: client.serial,
                });
            } else {
                next = Some(next.map_or(due, |next| next.min(due)));
            }
        }
        if expired.is_empty() {
            return next;
        }
        log::warn!(
            "command socket: closed {} client(s) that sent no whole request, or left their \
             answers unread, for {} s (command_client_timeout)",
            expired.len(),
            timeout.as_secs()
        );
        for who in expired {
            if let Some(client) = self.client_mut(who)
                && client.channel.pending_output() == 0
            {
                // Best effort: one write of a short answer, then the close.
                let _ = client
                    .channel
                    .queue(&failure_response(&ChannelError::Timeout));
                let _ = client.channel.write_ready();
            }
            self.close(who);
        }
        next
    }

    /// At exit: answers the jobs still waiting, then writes what clients
    /// have queued, for at most [`FINAL_FLUSH`].
    pub(super) fn finish_clients(&mut self, events: &mut Events) {
        let unfinished = self.coordinator.close();
        self.perform(unfinished);
        let deadline = std::time::Instant::now() + FINAL_FLUSH;
        loop {
            let keys: Vec<ClientRef> = self
                .clients
                .iter()
                .map(|(key, c)| ClientRef {
                    key,
                    serial: c.serial,
                })
                .collect();
            let mut waiting = false;
            for who in keys {
                if self.flush(who)
                    && self
                        .client_mut(who)
                        .is_some_and(|c| c.channel.pending_output() > 0)
                {
                    waiting = true;
                }
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !waiting || left.is_zero() {
                return;
            }
            if let Err(error) = self.poll.poll(events, Some(left)) {
                if error.kind() != io::ErrorKind::Interrupted {
                    return;
                }
            }
        }
    }
}
