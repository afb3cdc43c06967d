//! The command socket file: creating it safely (mode 0600, never over a
//! live proxy or a file that is not a socket), removing it on exit, and the
//! peer credentials of a connected client.
//!
//! Owns: the socket file's lifetime and who may talk to it. Must never:
//! remove a file it did not create, or one another proxy answers on.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use socket2::{Domain, SockAddr, Socket, Type};

/// Command clients connected at once. Past it a new client is answered
/// `E_BUSY` and closed, so stuck clients cannot take every descriptor; far
/// above what operators, scripts and the metrics endpoint open together.
pub const MAX_COMMAND_CLIENTS: usize = 256;

/// Pending connections the command socket queues before `accept`: as many
/// as it serves at once, so that every client under the cap that connects
/// while the command thread is busy (a large answer being built) waits in
/// the queue rather than getting `EAGAIN` from a non-blocking connect.
/// The kernel caps it at `net.core.somaxconn` (4,096 by default).
const BACKLOG: i32 = MAX_COMMAND_CLIENTS as i32;
const _: () = assert!(MAX_COMMAND_CLIENTS <= i32::MAX as usize);

/// The command socket file this process created; removed on drop if it is
/// still the one created (same device and inode: not one that replaced it).
#[derive(Debug)]
pub(crate) struct SocketFile {
    path: PathBuf,
    identity: (u64, u64),
}

fn identity(meta: &fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

impl SocketFile {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the socket file over `path` (an upgrade's successor taking the
    /// command socket path of the process it replaces): one `rename`, so a
    /// client connecting meanwhile reaches one of the two, never neither.
    pub(crate) fn move_over(&mut self, path: &Path) -> io::Result<()> {
        fs::rename(&self.path, path)?;
        self.path = path.to_owned();
        Ok(())
    }
}

/// Where an upgrade's successor binds its command socket until it takes
/// over `path`: beside it, named after the process.
pub(crate) fn successor_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".upgrade-{}", std::process::id()));
    path.with_file_name(name)
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours =
            fs::symlink_metadata(&self.path).is_ok_and(|meta| identity(&meta) == self.identity);
        if ours && let Err(error) = fs::remove_file(&self.path) {
            log::warn!(
                "could not remove the command socket {}: {error}",
                self.path.display()
            );
        }
    }
}

/// Clears the way for a new socket at `path`: nothing there is fine; a
/// socket nobody answers on is stale and removed; a socket a process
/// answers on, or anything that is not a socket, is refused.
fn clear_stale(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket: remove it or choose another command_socket",
                path.display()
            ),
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "another process (a running preread?) answers on the command socket {}: stop \
                 it or choose another command_socket",
                path.display()
            ),
        )),
        Err(_) => {
            log::info!("removing the stale command socket {}", path.display());
            match fs::remove_file(path) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
                _ => Ok(()),
            }
        }
    }
}

/// Creates the listening command socket at `path`, mode 0600 before it
/// listens (no window where another user could connect), non-blocking.
pub(crate) fn bind_command_socket(path: &Path) -> io::Result<(mio::net::UnixListener, SocketFile)> {
    clear_stale(path)?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    socket.bind(&SockAddr::unix(path)?)?;
    let meta = fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .and_then(|()| fs::symlink_metadata(path));
    let meta = match meta {
        Ok(meta) => meta,
        Err(error) => {
            // Just bound, so ours: do not leave a socket with loose rights.
            let _ = fs::remove_file(path);
            return Err(error);
        }
    };
    let file = SocketFile {
        path: path.to_owned(),
        identity: identity(&meta),
    };
    socket.listen(BACKLOG)?;
    let listener = UnixListener::from(std::os::fd::OwnedFd::from(socket));
    listener.set_nonblocking(true)?;
    Ok((mio::net::UnixListener::from_std(listener), file))
}

/// The user id of the process at the other end of a Unix stream
/// (`SO_PEERCRED`).
pub(crate) fn peer_uid(stream: &impl AsRawFd) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .map_err(|_| io::Error::other("ucred size does not fit socklen_t"))?;
    // SAFETY: the fd is a valid socket borrowed for the call; `cred` and
    // `len` are valid for writes and `len` holds the size of `cred`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// The effective user id of this process.
pub(crate) fn own_euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether a client running as `peer` may command a proxy running as `own`:
/// root, or the same user.
pub(crate) fn is_authorized(peer: u32, own: u32) -> bool {
    peer == 0 || peer == own
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_self_only() {
        assert!(is_authorized(0, 1000));
        assert!(is_authorized(1000, 1000));
        assert!(!is_authorized(1001, 1000));
        assert!(is_authorized(0, 0));
        assert!(!is_authorized(1000, 0));
    }

    #[test]
    fn peer_uid_of_a_pair_is_ours() {
        let (a, _b) = UnixStream::pair().expect("pair");
        assert_eq!(peer_uid(&a).expect("peer cred"), own_euid());
    }

    #[test]
    fn refuses_a_regular_file_and_a_live_socket() {
        let dir = tempfile::Builder::new()
            .prefix("preread-socket-")
            .tempdir()
            .expect("temp dir");
        let file = dir.path().join("plain");
        fs::write(&file, b"keep me").expect("write");
        assert!(bind_command_socket(&file).is_err());
        assert_eq!(fs::read(&file).expect("still there"), b"keep me");

        let sock = dir.path().join("live.sock");
        let (listener, guard) = bind_command_socket(&sock).expect("bind");
        assert_eq!(
            fs::metadata(&sock).expect("meta").permissions().mode() & 0o777,
            0o600
        );
        let err = bind_command_socket(&sock).expect_err("live socket refused");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        // A process that died without cleaning up: nobody answers any more,
        // the file is stale and replaced.
        drop(listener);
        std::mem::forget(guard);
        let (_listener2, guard2) = bind_command_socket(&sock).expect("rebind over stale");
        // Someone else's file at the path is left alone.
        fs::remove_file(&sock).expect("remove");
        fs::write(&sock, b"not ours").expect("write");
        drop(guard2);
        assert_eq!(fs::read(&sock).expect("kept"), b"not ours");
    }

    #[test]
    fn a_successor_moves_its_socket_over_the_live_one() {
        let dir = tempfile::Builder::new()
            .prefix("preread-socket-")
            .tempdir()
            .expect("temp dir");
        let path = dir.path().join("cmd.sock");
        let (_old_listener, old) = bind_command_socket(&path).expect("old");
        let beside = successor_path(&path);
        let (new_listener, mut new) = bind_command_socket(&beside).expect("successor");
        new.move_over(&path).expect("rename");
        assert!(!beside.exists());
        // A client of the path reaches the successor.
        let _client = UnixStream::connect(&path).expect("connect");
        let accepted = new_listener.accept();
        assert!(accepted.is_ok(), "{accepted:?}");
        // The old process leaving does not remove the successor's file.
        drop(old);
        assert!(path.exists());
        drop(new);
        assert!(!path.exists());
    }
}
