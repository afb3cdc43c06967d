//! Zero-copy forwarding with Linux `splice(2)`: one kernel pipe per
//! direction of a piped session, socket → pipe → socket, the bytes never
//! copied into userspace.
//!
//! Owns: the pipe's two descriptors (closed on Drop), the count of bytes
//! sitting in it (`pending`: added by [`SplicePipe::fill_from`], removed by
//! [`SplicePipe::drain_to`] and [`SplicePipe::read_into`]), and the mapping of
//! `splice` results onto `io` semantics: `EAGAIN` is `WouldBlock`, `EINTR` is
//! retried, 0 from a socket is its EOF, `EINVAL`/`ENOSYS` mean "this
//! descriptor cannot splice" ([`is_unsupported`]), and the pipe's size
//! (`F_SETPIPE_SZ`: at creation when `splice_pipe_size` is set, and when a
//! bulk direction grows its pipe, `worker/pipe/grow.rs`): a refused size
//! is not an error, the pipe keeps the size it had and the refusal goes
//! back to the caller to log. Must never: lose count of a byte in the pipe (a FIN is forwarded
//! only once `pending` is 0), or block.
//!
//! Why the size matters: `splice` moves at most a pipe's worth per call,
//! so the kernel's default 64 KiB pipe costs two calls per 64 KiB; a
//! 1 MiB pipe moves up to 16 times more per call (doc/performance.md,
//! "Bulk").
//!
//! The direction logic (what goes first, when to fall back to the copy path)
//! lives with the session (`worker/session.rs`).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `EINTR`s in a row before a `splice` gives up and reports the error.
const EINTR_RETRIES: usize = 64;

/// One kernel pipe, used for one direction of one session.
#[derive(Debug)]
pub struct SplicePipe {
    /// The read end, as a `File` so that the copy fallback reads it with
    /// plain safe `read`.
    read: File,
    write: OwnedFd,
    /// Bytes spliced in and not yet out.
    pending: usize,
    /// The pipe's size in bytes, as the kernel reports it: the most one
    /// `fill_from` asks for.
    capacity: usize,
    /// The size it had before [`SplicePipe::grow`], which
    /// [`SplicePipe::shrink_back`] restores.
    grown_from: Option<usize>,
}

/// `EINVAL` or `ENOSYS` from `splice`: one of the descriptors does not
/// support it (a socket family without `splice_read`, a file opened for
/// append, ...). The direction falls back to the copy path.
pub fn is_unsupported(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS))
}

impl SplicePipe {
    /// A non-blocking, close-on-exec pipe of the kernel's default size, or
    /// resized to `wanted` bytes when asked and the kernel allows it (it
    /// rounds up to a power of two pages). With the pipe comes the
    /// kernel's refusal of that size, if any (`EPERM` past
    /// `/proc/sys/fs/pipe-max-size` or the user's
    /// `fs.pipe-user-pages-soft`, `ENOMEM`): the pipe then keeps the size
    /// the kernel gave it and works the same, in smaller steps.
    pub fn new(wanted: Option<usize>) -> io::Result<(Self, Option<io::Error>)> {
        let mut fds: [libc::c_int; 2] = [-1, -1];
        // SAFETY: `fds` is a writable array of two c_ints, as pipe2 expects.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open, and nothing
        // else owns them: each is wrapped exactly once.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let (size, refused) = match wanted.map(|wanted| set_size(&write, wanted)) {
            Some(Ok(size)) => (Some(size), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        // The kernel's size: its default, or what it kept.
        let capacity = size.unwrap_or_else(|| get_size(&write));
        let pipe = Self {
            read: File::from(read),
            write,
            pending: 0,
            capacity,
            grown_from: None,
        };
        Ok((pipe, refused))
    }

    /// Bytes in the pipe: spliced in, not yet out.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// The pipe's size in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Resizes the pipe to `size` bytes for a bulk transfer
    /// (`F_SETPIPE_SZ`; the kernel rounds up to a power of two pages). A
    /// refusal (`EPERM` past `pipe-max-size` or the user's
    /// `fs.pipe-user-pages-soft`, `ENOMEM`) leaves the pipe as it was, its
    /// bytes included. Growing keeps every pending byte: the kernel only
    /// refuses a size smaller than what the pipe holds.
    pub fn grow(&mut self, size: usize) -> io::Result<()> {
        let grown = set_size(&self.write, size)?;
        self.grown_from.get_or_insert(self.capacity);
        self.capacity = grown;
        Ok(())
    }

    /// Whether [`SplicePipe::grow`] resized it.
    pub fn is_grown(&self) -> bool {
        self.grown_from.is_some()
    }

    /// Gives an empty grown pipe its size from before [`SplicePipe::grow`]
    /// back, so that it can wait in the pool at the size the pool's pipes
    /// have. Shrinking an empty pipe is never refused for lack of budget.
    pub fn shrink_back(&mut self) -> io::Result<()> {
        let Some(size) = self.grown_from else {
            return Ok(());
        };
        self.capacity = set_size(&self.write, size)?;
        self.grown_from = None;
        Ok(())
    }

    /// Whether the pipe holds no byte, by its own count and by the kernel's
    /// (`FIONREAD` on the read end): the test a pipe passes before another
    /// session may use it. A failed query counts as "not empty".
    pub fn is_empty(&self) -> bool {
        if self.pending != 0 {
            return false;
        }
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD on a descriptor this pipe owns writes one c_int
        // through the pointer, which points at a live local.
        let rc = unsafe { libc::ioctl(self.read.as_raw_fd(), libc::FIONREAD, &mut queued) };
        rc == 0 && queued == 0
    }

    /// Splices what `source` has (up to one pipe's worth) into the pipe.
    ///
    /// `Ok(0)` is the source's EOF. `WouldBlock` means nothing moved: the
    /// source has nothing to read, or, only when `pending() > 0`, the pipe
    /// is full (the kernel counts pipe slots, not bytes: a full pipe may
    /// hold less, or more, than `capacity`); the caller tells the two apart
    /// by `pending`.
    pub fn fill_from(&mut self, source: &impl AsFd) -> io::Result<usize> {
        let n = splice(source.as_fd(), self.write.as_fd(), self.capacity)?;
        self.pending += n;
        Ok(n)
    }

    /// Splices pipe bytes to `destination`; `WouldBlock` when it takes no
    /// more now. With nothing pending, `Ok(0)` without a syscall.
    pub fn drain_to(&mut self, destination: &impl AsFd) -> io::Result<usize> {
        if self.pending == 0 {
            return Ok(0);
        }
        let n = splice(self.read.as_fd(), destination.as_fd(), self.pending)?;
        if n == 0 {
            // The pipe cannot be empty with bytes pending: the count is off.
            return Err(io::Error::other(
                "splice drained 0 bytes from a non-empty pipe",
            ));
        }
        self.pending -= n.min(self.pending);
        Ok(n)
    }

    /// Reads pipe bytes into `buf` with plain `read(2)`: the way out of the
    /// pipe for a direction that fell back to the copy path. `Ok(0)` when
    /// nothing is pending or `buf` is empty.
    pub fn read_into(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min(self.pending);
        if want == 0 {
            return Ok(0);
        }
        for _ in 0..EINTR_RETRIES {
            match self.read.read(&mut buf[..want]) {
                Ok(0) => {
                    return Err(io::Error::other("read 0 bytes from a non-empty pipe"));
                }
                Ok(n) => {
                    self.pending -= n.min(self.pending);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Err(io::ErrorKind::Interrupted.into())
    }
}

/// Asks the kernel to make the pipe of `write` `wanted` bytes; its size
/// as granted, or the refusal.
fn set_size(write: &OwnedFd, wanted: usize) -> io::Result<usize> {
    let wanted = libc::c_int::try_from(wanted).unwrap_or(libc::c_int::MAX);
    // SAFETY: fcntl on a descriptor the pipe owns; F_SETPIPE_SZ takes an
    // int argument and touches no memory of this process.
    let size = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, wanted) };
    match usize::try_from(size) {
        Ok(size) if size > 0 => Ok(size),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The size of the pipe of `write`; a page, the least a pipe holds, if the
/// kernel does not say.
fn get_size(write: &OwnedFd) -> usize {
    // SAFETY: fcntl on a descriptor the pipe owns; F_GETPIPE_SZ takes no
    // argument.
    let size = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

/// One non-blocking `splice` of at most `len` bytes from `from` to `to`,
/// retrying `EINTR`. `EAGAIN` comes back as `WouldBlock` (std maps it).
fn splice(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    for _ in 0..EINTR_RETRIES {
        // SAFETY: both descriptors are borrowed, hence open for the whole
        // call; null offsets are valid (pipes and sockets have no offset);
        // splice touches no memory of this process.
        let n = unsafe {
            libc::splice(
                from.as_raw_fd(),
                std::ptr::null_mut(),
                to.as_raw_fd(),
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
            )
        };
        if let Ok(n) = usize::try_from(n) {
            return Ok(n);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    Err(io::ErrorKind::Interrupted.into())
}

#[cfg(test)]
mod tests {
    use std::io::{self, Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    use super::{SplicePipe, is_unsupported};

    /// A pipe of `size` bytes, which the kernel must grant.
    fn sized_pipe(size: usize) -> SplicePipe {
        let (pipe, refused) = SplicePipe::new(Some(size)).expect("pipe");
        assert!(refused.is_none(), "{size} refused: {refused:?}");
        assert_eq!(pipe.capacity(), size);
        pipe
    }

    #[test]
    fn the_pipe_takes_the_size_asked_for() {
        for size in [4096, 64 * 1024, 1 << 20] {
            assert!(sized_pipe(size).is_empty());
        }
    }

    #[test]
    fn unasked_the_pipe_keeps_the_kernels_default_size() {
        let (pipe, refused) = SplicePipe::new(None).expect("pipe");
        assert!(refused.is_none());
        // SAFETY: sysconf reads a constant of the system; no pointer.
        let page =
            usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).expect("a page size");
        // Linux's default pipe: 16 pages (as root, never reduced by the
        // user's pipe allowance).
        assert_eq!(pipe.capacity(), 16 * page);
    }

    #[test]
    fn a_refused_size_keeps_the_kernels_pipe_and_says_why() {
        // Past any pipe-max-size an unprivileged process has (EPERM), and
        // past what the kernel allocates for a pipe's ring even with
        // CAP_SYS_RESOURCE (ENOMEM).
        let (mut pipe, refused) = SplicePipe::new(Some(usize::MAX)).expect("a pipe all the same");
        let refused = refused.expect("the kernel refuses a pipe of 2 GiB");
        assert!(
            matches!(refused.raw_os_error(), Some(libc::EPERM | libc::ENOMEM)),
            "{refused:?}"
        );
        assert!(pipe.capacity() >= 4096 && pipe.capacity() < 1 << 30);
        // It still moves bytes.
        let (mut writer, source) = tcp_pair();
        writer.write_all(b"small pipe").expect("write");
        let mut filled = 0;
        while filled < 10 {
            filled += until_ready(|| pipe.fill_from(&source)).expect("fill");
        }
        let mut out = [0u8; 10];
        assert_eq!(pipe.read_into(&mut out).expect("read"), 10);
        assert_eq!(&out, b"small pipe");
    }

    #[test]
    fn emptiness_asks_the_kernel_too() {
        let pipe = sized_pipe(64 * 1024);
        assert!(pipe.is_empty());
        // Bytes the count does not know of (it cannot happen through this
        // type; the check is the pool's last line of defence).
        let mut write = std::fs::File::from(pipe.write.try_clone().expect("dup"));
        write.write_all(b"x").expect("write");
        assert_eq!(pipe.pending(), 0);
        assert!(!pipe.is_empty(), "the kernel holds a byte");
    }

    /// A connected loopback pair: (the side a test writes, the side the
    /// pipe reads or writes, non-blocking).
    fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("non-blocking");
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        (client, server)
    }

    /// Retries `op` while it would block, at most 5 s.
    fn until_ready(mut op: impl FnMut() -> io::Result<usize>) -> io::Result<usize> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match op() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                other => return other,
            }
        }
    }

    #[test]
    fn fill_then_drain_moves_the_bytes_and_tracks_pending() {
        let (mut writer, source) = tcp_pair();
        let (mut reader, destination) = tcp_pair();
        let mut pipe = sized_pipe(64 * 1024);
        assert!(pipe.capacity() >= 4096);
        assert_eq!(pipe.pending(), 0);
        writer.write_all(b"hello, splice").expect("write");
        let mut filled = 0;
        while filled < 13 {
            filled += until_ready(|| pipe.fill_from(&source)).expect("fill");
        }
        assert_eq!((filled, pipe.pending()), (13, 13));
        let drained = until_ready(|| pipe.drain_to(&destination)).expect("drain");
        assert_eq!((drained, pipe.pending()), (13, 0));
        let mut got = [0u8; 13];
        reader.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"hello, splice");
        assert_eq!(pipe.drain_to(&destination).expect("nothing to drain"), 0);
    }

    #[test]
    fn an_empty_socket_would_block_and_a_fin_is_zero() {
        let (writer, source) = tcp_pair();
        let mut pipe = sized_pipe(64 * 1024);
        let error = pipe.fill_from(&source).expect_err("nothing to read");
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
        writer.shutdown(Shutdown::Write).expect("FIN");
        assert_eq!(until_ready(|| pipe.fill_from(&source)).expect("EOF"), 0);
        assert_eq!(pipe.pending(), 0);
    }

    #[test]
    fn bytes_before_a_fin_come_first_then_the_eof() {
        let (mut writer, source) = tcp_pair();
        let mut pipe = sized_pipe(64 * 1024);
        writer.write_all(b"last words").expect("write");
        writer.shutdown(Shutdown::Write).expect("FIN");
        let mut filled = 0;
        loop {
            match until_ready(|| pipe.fill_from(&source)).expect("fill") {
                0 => break,
                n => filled += n,
            }
        }
        assert_eq!((filled, pipe.pending()), (10, 10));
        let mut out = [0u8; 32];
        let n = pipe.read_into(&mut out).expect("read the pipe");
        assert_eq!(&out[..n], b"last words");
        assert_eq!(pipe.pending(), 0);
        assert_eq!(pipe.read_into(&mut out).expect("empty"), 0);
    }

    #[test]
    fn a_full_destination_would_block_and_nothing_is_lost() {
        const LEN: usize = 4 << 20;
        let (mut writer, source) = tcp_pair();
        let (mut reader, destination) = tcp_pair();
        // Small socket buffers make the destination push back for sure;
        // loopback autotuning alone may absorb the whole transfer.
        socket2::SockRef::from(&destination)
            .set_send_buffer_size(64 * 1024)
            .expect("small send buffer");
        socket2::SockRef::from(&reader)
            .set_recv_buffer_size(64 * 1024)
            .expect("small receive buffer");
        let sent: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        let feeder = {
            let sent = sent.clone();
            std::thread::spawn(move || writer.write_all(&sent))
        };
        let mut pipe = sized_pipe(64 * 1024);
        let mut received = Vec::with_capacity(LEN);
        let mut buf = vec![0u8; 64 * 1024];
        let (mut spliced_in, mut spliced_out, mut blocked) = (0, 0, 0);
        reader.set_nonblocking(true).expect("non-blocking reader");
        let deadline = Instant::now() + Duration::from_secs(30);
        while received.len() < LEN && Instant::now() < deadline {
            let mut idle = true;
            match pipe.fill_from(&source) {
                Ok(0) => assert_eq!(spliced_in, LEN, "EOF before the last byte"),
                Ok(n) => {
                    spliced_in += n;
                    idle = false;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("fill: {e}"),
            }
            match pipe.drain_to(&destination) {
                Ok(n) => {
                    spliced_out += n;
                    idle &= n == 0;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Only now read: the destination fills up first.
                    blocked += 1;
                    match reader.read(&mut buf) {
                        Ok(n) => {
                            received.extend_from_slice(&buf[..n]);
                            idle = false;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => panic!("read: {e}"),
                    }
                }
                Err(e) => panic!("drain: {e}"),
            }
            assert_eq!(pipe.pending(), spliced_in - spliced_out);
            if spliced_out == LEN {
                // Everything is out: read the rest.
                match reader.read(&mut buf) {
                    Ok(n) => received.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("read: {e}"),
                }
            }
            if idle {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        feeder.join().expect("feeder").expect("feed");
        assert_eq!(received.len(), LEN);
        assert!(received == sent, "the bytes differ");
        assert_eq!(pipe.pending(), 0);
        assert!(blocked > 0, "the destination never pushed back");
    }

    #[test]
    fn a_refused_drain_keeps_the_bytes_for_a_plain_read() {
        let (mut writer, source) = tcp_pair();
        let (_reader, destination) = tcp_pair();
        let fd = destination.as_raw_fd();
        // SAFETY: fcntl on a descriptor `destination` owns and keeps open.
        // O_APPEND does not change a socket's send, but splice refuses to
        // write into an append-mode file: EINVAL.
        let rc = unsafe {
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_APPEND,
            )
        };
        assert_eq!(rc, 0);
        let mut pipe = sized_pipe(64 * 1024);
        writer.write_all(b"keep me").expect("write");
        let mut filled = 0;
        while filled < 7 {
            filled += until_ready(|| pipe.fill_from(&source)).expect("fill");
        }
        let error = pipe.drain_to(&destination).expect_err("append mode");
        assert!(is_unsupported(&error), "{error:?}");
        assert_eq!(pipe.pending(), 7, "a refused drain moves nothing");
        let mut out = [0u8; 4];
        assert_eq!(pipe.read_into(&mut out).expect("read"), 4);
        assert_eq!((&out, pipe.pending()), (b"keep", 3));
        assert_eq!(pipe.read_into(&mut out).expect("read"), 3);
        assert_eq!((&out[..3], pipe.pending()), (&b" me"[..], 0));
    }

    #[test]
    fn a_descriptor_without_splice_is_unsupported() {
        // SAFETY: eventfd takes plain integers and returns a new descriptor
        // or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd: {}", io::Error::last_os_error());
        // SAFETY: eventfd just returned this descriptor; nothing else owns it.
        let event = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let mut pipe = sized_pipe(64 * 1024);
        let error = pipe.fill_from(&event).expect_err("eventfd cannot splice");
        assert!(is_unsupported(&error), "{error:?}");
        assert_eq!(pipe.pending(), 0);
        assert!(!is_unsupported(&io::Error::from_raw_os_error(libc::EPIPE)));
        assert!(is_unsupported(&io::Error::from_raw_os_error(libc::ENOSYS)));
    }
}
