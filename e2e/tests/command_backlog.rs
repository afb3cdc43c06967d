//! The command socket's listen backlog fits its client cap (issue 28): 256
//! clients that connect without waiting (a non-blocking connect, as a
//! client with a connect timeout does) while the command thread accepts
//! nothing are all queued, none refused with `EAGAIN`, and all served once
//! it accepts again. The proxy is held with `SIGSTOP` while they connect,
//! so every connect is pending at once: what the backlog holds is tested,
//! not a race with the accept loop.
//!
//! Build the binary first: `cargo build -p proxy-shell`. Loopback and a
//! Unix socket only; every wait is bounded.

use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

use command::channel::BlockingChannel;
use command::proto::{self, request::RequestType};
use e2e::proxy::ConfigBuilder;
use e2e::testkit::start;
use socket2::{Domain, SockAddr, Socket, Type};

/// The documented cap (doc/configure.md §4.3, "At most 256 clients").
const CLIENTS: usize = 256;

/// Bound of one client's exchange once the proxy runs again.
const T: Duration = Duration::from_secs(20);

/// Resumes the stopped proxy when dropped, a failed assertion included.
struct Stopped(u32);

impl Stopped {
    fn stop(pid: u32) -> Self {
        let pid_t = libc::pid_t::try_from(pid).expect("a pid");
        // SAFETY: kill(2) with a pid of a child this test started.
        assert_eq!(unsafe { libc::kill(pid_t, libc::SIGSTOP) }, 0, "SIGSTOP");
        Self(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.0) {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}

#[test]
fn two_hundred_fifty_six_clients_connecting_at_once_are_all_served() {
    let proxy = start(&ConfigBuilder::new().listener("main", &[]).build());
    let address = SockAddr::unix(proxy.socket_path()).expect("the socket's address");
    let stopped = Stopped::stop(proxy.pid());
    let mut connected = Vec::new();
    let mut refused = Vec::new();
    for n in 0..CLIENTS {
        let socket = Socket::new(Domain::UNIX, Type::STREAM, None).expect("a socket");
        socket.set_nonblocking(true).expect("non-blocking");
        match socket.connect(&address) {
            Ok(()) => connected.push(socket),
            Err(e) => refused.push(format!("client {n}: {e}")),
        }
    }
    drop(stopped);
    assert!(
        refused.is_empty(),
        "{} of {CLIENTS} connects refused: {:?}",
        refused.len(),
        refused.first()
    );
    let clients: Vec<_> = connected
        .into_iter()
        .map(|socket| {
            thread::spawn(move || -> Result<(), String> {
                let stream = UnixStream::from(std::os::fd::OwnedFd::from(socket));
                let mut channel =
                    BlockingChannel::from_stream(stream, T).map_err(|e| e.to_string())?;
                let request = proto::Request {
                    request_type: Some(RequestType::Status(proto::Status {})),
                };
                channel.send(&request).map_err(|e| e.to_string())?;
                let answer = channel.recv().map_err(|e| e.to_string())?;
                if answer.status == proto::ResponseStatus::Ok as i32 {
                    Ok(())
                } else {
                    Err(format!("{} {}", answer.error_code, answer.message))
                }
            })
        })
        .collect();
    let failed: Vec<String> = clients
        .into_iter()
        .filter_map(|client| match client.join() {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(_) => Some("a client thread panicked".to_owned()),
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {CLIENTS} not served: {:?}",
        failed.len(),
        failed.first()
    );
}
