//! Where the kernel dropped datagrams during a run: the `drops` column of
//! `/proc/net/udp` (each socket's own count of datagrams it had no room
//! for, `RcvbufErrors` in `/proc/net/snmp` but per socket), summed by the
//! part of the relay the socket belongs to. Per socket, not the machine's
//! totals: other processes on a shared machine drop datagrams too.
//!
//! Only IPv4 (the bench uses 127.0.0.1). Sockets are told apart by their
//! ports: a client socket is connected to the proxy's port, the proxy's
//! listener is bound to it, a proxy's backend socket is connected to the
//! backend's port, the backend is bound to it.

use std::collections::HashMap;
use std::fmt;

/// The drops of every IPv4 UDP socket now, by inode.
#[derive(Debug, Default, Clone)]
pub(crate) struct Snapshot(HashMap<u64, Socket>);

#[derive(Debug, Clone, Copy)]
struct Socket {
    local_port: u16,
    remote_port: u16,
    drops: u64,
}

impl Snapshot {
    /// Reads `/proc/net/udp` (empty if it cannot be read).
    pub(crate) fn now() -> Self {
        let text = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
        Self(text.lines().skip(1).filter_map(parse).collect())
    }

    /// The drops since `before`, by part, for a relay at `proxy_port` in
    /// front of a backend at `backend_port`. A socket opened since counts
    /// all of its drops; one closed since is not seen (read before the
    /// sockets close).
    pub(crate) fn since(&self, before: &Snapshot, proxy_port: u16, backend_port: u16) -> Drops {
        let mut drops = Drops::default();
        for (inode, socket) in &self.0 {
            let earlier = before.0.get(inode).map_or(0, |s| s.drops);
            let n = socket.drops.saturating_sub(earlier);
            if socket.remote_port == proxy_port {
                drops.clients += n;
            } else if socket.local_port == proxy_port {
                drops.listener += n;
            } else if socket.remote_port == backend_port {
                drops.backend_sockets += n;
            } else if socket.local_port == backend_port {
                drops.backend += n;
            }
        }
        drops
    }
}

/// One line of `/proc/net/udp`: `sl local rem st queues tr retrnsmt uid
/// timeout inode ref pointer drops`, addresses as `HEXIP:HEXPORT`.
fn parse(line: &str) -> Option<(u64, Socket)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let port = |field: &str| {
        let (_, port) = field.split_once(':')?;
        u16::from_str_radix(port, 16).ok()
    };
    let socket = Socket {
        local_port: port(fields.get(1)?)?,
        remote_port: port(fields.get(2)?)?,
        drops: fields.get(12)?.parse().ok()?,
    };
    Some((fields.get(9)?.parse().ok()?, socket))
}

/// Datagrams the kernel dropped, by the socket that had no room.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Drops {
    /// The generator's client sockets (the replies).
    pub(crate) clients: u64,
    /// The proxy's listener (client to proxy).
    pub(crate) listener: u64,
    /// The proxy's sockets towards the backend (the backend's replies).
    pub(crate) backend_sockets: u64,
    /// The echo backend's socket.
    pub(crate) backend: u64,
}

impl fmt::Display for Drops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} / {} / {} / {}",
            self.clients, self.listener, self.backend_sockets, self.backend
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_proc_net_udp_gives_its_ports_inode_and_drops() {
        let line = "  42: 0100007F:A1B2 0100007F:0FA0 01 00000000:00000000 00:00000000 00000000     0        0 987654 2 0000000000000000 17";
        let (inode, socket) = parse(line).expect("a well-formed line");
        assert_eq!(inode, 987_654);
        assert_eq!(socket.local_port, 0xA1B2);
        assert_eq!(socket.remote_port, 4000);
        assert_eq!(socket.drops, 17);
    }

    #[test]
    fn drops_are_counted_since_the_earlier_snapshot_by_part() {
        let socket = |local_port, remote_port, drops| Socket {
            local_port,
            remote_port,
            drops,
        };
        let before = Snapshot(HashMap::from([
            (1, socket(5000, 0, 3)),
            (2, socket(6000, 0, 0)),
        ]));
        let after = Snapshot(HashMap::from([
            (1, socket(5000, 0, 10)),
            (2, socket(6000, 0, 4)),
            (3, socket(40000, 5000, 2)),
            (4, socket(40001, 6000, 5)),
            (5, socket(40002, 7000, 99)),
        ]));
        let drops = after.since(&before, 5000, 6000);
        assert_eq!(
            drops,
            Drops {
                clients: 2,
                listener: 7,
                backend_sockets: 5,
                backend: 4,
            }
        );
    }
}
