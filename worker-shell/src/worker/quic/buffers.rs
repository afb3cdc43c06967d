//! The kernel buffers of the QUIC sockets: how many datagrams wait for
//! the worker while it has no core.
//!
//! Owns: asking for [`LISTENER_BUFFER`] (receive and send) on a listener
//! socket, and saying what the kernel gave, and for [`FLOW_BUFFER`]
//! (receive) on a flow's socket towards its backend. Must never: fail a socket
//! for a smaller buffer (it works, it only holds less), or lower one.
//!
//! Why: one listener socket carries every client's datagrams in and every
//! backend's datagrams out. With Linux's default of 208 KiB
//! (`net.core.rmem_default`), about 90 datagrams of 1,200 bytes fit; a
//! worker without a core for a few milliseconds on a busy machine drops
//! what arrives past them (`RcvbufErrors`, doc/performance.md, "QUIC
//! relay"). QUIC servers size their sockets in megabytes for that reason.
//! The kernel caps `SO_RCVBUF`/`SO_SNDBUF` at `net.core.rmem_max`/
//! `wmem_max`; a process with `CAP_NET_ADMIN` may go past the cap with
//! `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`, which is tried when the plain option
//! gave less. A buffer is a ceiling, not an allocation: memory is taken
//! only by datagrams waiting, within the kernel's `net.ipv4.udp_mem`.

use std::io;
use std::os::fd::AsRawFd;

/// What a listener socket asks for, each way.
pub(super) const LISTENER_BUFFER: usize = 4 << 20;
/// What a flow's socket towards its backend asks for, to receive (the
/// backend's datagrams of one flow).
pub(super) const FLOW_BUFFER: usize = 1 << 20;

/// A socket buffer: receive or send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    Receive,
    Send,
}

impl Way {
    /// The option, and the one that passes the sysctl's cap.
    fn options(self) -> (libc::c_int, libc::c_int) {
        match self {
            Self::Receive => (libc::SO_RCVBUF, libc::SO_RCVBUFFORCE),
            Self::Send => (libc::SO_SNDBUF, libc::SO_SNDBUFFORCE),
        }
    }

    /// The sysctl that caps it, for an operator's message.
    pub(super) fn sysctl(self) -> &'static str {
        match self {
            Self::Receive => "net.core.rmem_max",
            Self::Send => "net.core.wmem_max",
        }
    }
}

/// Asks for `wanted` bytes of `way` buffer on `socket`: the plain option,
/// then the forced one if the kernel gave less. Returns what the socket
/// holds now (the kernel's figure, which counts its own overhead: Linux
/// reports twice what was set). Never lowers a buffer already larger.
pub(super) fn widen(socket: &impl AsRawFd, way: Way, wanted: usize) -> io::Result<usize> {
    let (plain, forced) = way.options();
    let before = get(socket, plain)?;
    if before >= wanted {
        return Ok(before);
    }
    // A failure of either set leaves the buffer as it was: what the
    // socket has is reported below.
    let _ = set(socket, plain, wanted);
    let got = get(socket, plain)?;
    if got >= wanted {
        return Ok(got);
    }
    // EPERM without CAP_NET_ADMIN: the capped size stays.
    let _ = set(socket, forced, wanted);
    get(socket, plain)
}

/// Asks for `wanted` bytes of receive buffer on a flow's socket, with
/// one call: the kernel caps it at `net.core.rmem_max` (a flow carries
/// one client's datagrams: the listener's checks and warning are not
/// repeated per flow).
pub(super) fn ask_receive(socket: &impl AsRawFd, wanted: usize) -> io::Result<()> {
    set(socket, libc::SO_RCVBUF, wanted)
}

fn set(socket: &impl AsRawFd, option: libc::c_int, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is the caller's open socket for the whole
    // call; the option value points to a live `c_int` whose size is passed
    // with it, and the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get(socket: &impl AsRawFd, option: libc::c_int) -> io::Result<usize> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the descriptor is the caller's open socket for the whole
    // call; the kernel writes at most `len` bytes to the live `c_int` and
    // its size back to `len`, both ours for the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw mut value).cast(),
            &raw mut len,
        )
    };
    if rc == 0 {
        Ok(usize::try_from(value).unwrap_or(0))
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use super::{Way, ask_receive, get, widen};

    #[test]
    fn a_socket_gets_at_least_the_default_and_is_never_lowered() {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
        for way in [Way::Receive, Way::Send] {
            let before = get(&socket, way.options().0).expect("the option reads");
            let got = widen(&socket, way, 4 << 20).expect("the option sets");
            assert!(got >= before, "{way:?}: {got} < {before}");
            assert_eq!(widen(&socket, way, 4096).expect("reads"), got);
        }
    }

    #[test]
    fn a_flows_ask_within_the_cap_is_granted() {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
        ask_receive(&socket, 64 << 10).expect("the option sets");
        let got = get(&socket, Way::Receive.options().0).expect("reads");
        assert!(got >= 64 << 10, "{got}");
    }

    #[test]
    fn a_size_within_the_kernels_cap_is_granted() {
        // 64 KiB is under every Linux's default cap (`rmem_max`,
        // `wmem_max`); the kernel reports it doubled.
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback socket");
        socket2::SockRef::from(&socket)
            .set_recv_buffer_size(4096)
            .expect("a small buffer");
        let got = widen(&socket, Way::Receive, 64 << 10).expect("the option sets");
        assert!(got >= 64 << 10, "{got}");
    }
}
