//! Idle kernel pipes kept for the next spliced session.
//!
//! Owns: [`PipePool`], a bounded stack of empty [`SplicePipe`]s per worker,
//! the size new pipes ask for (`splice_pipe_size`, if set), and the count of pipes
//! the worker had to create and of the grown pipes its sessions hold
//! (`splice.bulk_pipes`). A pipe a bulk transfer grew
//! (`worker/pipe/grow.rs`) waits here at its former size. A spliced session needs two pipes; making
//! them (`pipe2`, `F_SETPIPE_SZ`) and closing them cost a short connection
//! about 20 µs, so they are reused, as HAProxy does. Must never: hand out a
//! pipe that holds a byte (another session's bytes would reach the wrong
//! peer): a pipe is kept only when its own count and the kernel both say
//! it is empty, and otherwise closed.
//!
//! The kernel counts a pipe's whole size against its user's
//! `fs.pipe-user-pages-soft` (64 MiB by default) whether or not it holds
//! bytes, so the idle pipes are bounded in bytes too ([`idle_pipes`]).

use std::io;

use log::{debug, warn};

use super::splice::SplicePipe;

/// Idle pipes a worker keeps at most: 2 descriptors each. Enough for 32
/// spliced sessions closing and opening at once without a new pipe.
pub const MAX_IDLE_PIPES: usize = 64;

/// Bytes of pipe size a worker keeps idle at most: a quarter of the
/// kernel's default `fs.pipe-user-pages-soft` (16,384 pages), so that idle
/// pipes never crowd out the pipes of the sessions that splice.
const MAX_IDLE_PIPE_BYTES: usize = 16 << 20;

/// The kernel's default pipe size on 4 KiB pages, for the idle bound of
/// pipes nobody resizes.
pub const KERNEL_PIPE_SIZE: usize = 64 * 1024;

/// How many idle pipes of `pipe_size` bytes (the kernel's default when
/// `None`) a worker keeps: at most [`MAX_IDLE_PIPES`] and 16 MiB in all
/// (`MAX_IDLE_PIPE_BYTES`), at least one.
pub fn idle_pipes(pipe_size: Option<usize>) -> usize {
    let size = pipe_size.unwrap_or(KERNEL_PIPE_SIZE);
    (MAX_IDLE_PIPE_BYTES / size.max(1)).clamp(1, MAX_IDLE_PIPES)
}

/// A worker's idle pipes.
#[derive(Debug)]
pub struct PipePool {
    idle: Vec<SplicePipe>,
    max_idle: usize,
    /// The size each new pipe asks the kernel for; `None` keeps the
    /// kernel's default (no `F_SETPIPE_SZ`).
    pipe_size: Option<usize>,
    /// A refused size (new or grown) was logged at `warn` (the next ones
    /// go to `debug`).
    warned: bool,
    /// Pipes the worker's sessions hold grown for a bulk transfer.
    grown: usize,
}

impl PipePool {
    /// An empty pool of pipes of `pipe_size` bytes that keeps at most
    /// `max_idle` of them.
    pub fn new(max_idle: usize, pipe_size: Option<usize>) -> Self {
        Self {
            idle: Vec::new(),
            max_idle,
            pipe_size,
            warned: false,
            grown: 0,
        }
    }

    /// An idle pipe, or a new one; the flag says whether it was created. A
    /// new pipe the kernel refused its size still serves, with the size it
    /// got; the first refusal is logged at `warn`.
    pub fn take(&mut self) -> io::Result<(SplicePipe, bool)> {
        if let Some(pipe) = self.idle.pop() {
            return Ok((pipe, false));
        }
        let (pipe, refused) = SplicePipe::new(self.pipe_size)?;
        if let (Some(e), Some(size)) = (refused, self.pipe_size) {
            self.refused(format!(
                "splice_pipe_size = {} refused by the kernel ({e}): this pipe keeps {} bytes; \
                 raise /proc/sys/fs/pipe-max-size or fs.pipe-user-pages-soft, or lower \
                 splice_pipe_size",
                size,
                pipe.capacity()
            ));
        }
        Ok((pipe, true))
    }

    /// Logs the kernel's refusal to grow a bulk direction's pipe to
    /// `size` bytes (the direction splices on through the pipe it has).
    pub fn growth_refused(&mut self, error: &io::Error, size: usize) {
        self.refused(format!(
            "splice_bulk_pipe_size = {size} refused by the kernel ({error}): a bulk transfer \
             splices through its smaller pipe; raise /proc/sys/fs/pipe-max-size or \
             fs.pipe-user-pages-soft, or lower splice_bulk_pipe_size or splice_bulk_budget"
        ));
    }

    /// The first refusal of a pipe size at `warn`, the next ones at
    /// `debug`.
    fn refused(&mut self, message: String) {
        if self.warned {
            debug!("{message}");
        } else {
            warn!("{message} (logged once per worker, then at debug)");
            self.warned = true;
        }
    }

    /// Keeps `pipe` for a later session if it is empty and the pool has
    /// room, at its size from before a bulk transfer grew it; closes it
    /// otherwise.
    pub fn give_back(&mut self, mut pipe: SplicePipe) {
        if self.idle.len() < self.max_idle && pipe.is_empty() && pipe.shrink_back().is_ok() {
            self.idle.push(pipe);
        }
    }

    /// Counts `n` pipes the worker's sessions grew.
    pub fn count_grown(&mut self, n: u32) {
        self.grown += n as usize;
    }

    /// Counts one grown pipe's session ended (its budget slot went back).
    pub fn count_released(&mut self) {
        self.grown = self.grown.saturating_sub(1);
    }

    /// Pipes the worker's sessions hold grown now (`splice.bulk_pipes`).
    pub fn grown(&self) -> usize {
        self.grown
    }

    /// Pipes waiting for a session.
    pub fn idle(&self) -> usize {
        self.idle.len()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use super::{MAX_IDLE_PIPES, PipePool};

    #[test]
    fn an_empty_pipe_is_reused_and_one_holding_bytes_is_closed() {
        let mut pool = PipePool::new(4, None);
        let (pipe, created) = pool.take().expect("pipe");
        assert!(created);
        pool.give_back(pipe);
        assert_eq!(pool.idle(), 1);
        let (again, created) = pool.take().expect("pipe");
        assert!(!created, "the idle pipe is handed out again");
        assert_eq!(pool.idle(), 0);

        // Bytes spliced in and never out: that pipe must not be kept.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("non-blocking");
        client
            .write_all(b"secret of another session")
            .expect("write");
        let mut full = again;
        let deadline = Instant::now() + Duration::from_secs(5);
        while full.pending() == 0 {
            match full.fill_from(&server) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "no bytes arrived");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("splice: {e}"),
            }
        }
        assert!(!full.is_empty());
        pool.give_back(full);
        assert_eq!(pool.idle(), 0, "a pipe holding bytes is closed, not kept");
    }

    #[test]
    fn new_pipes_take_the_configured_size_and_a_refused_one_still_serves() {
        let mut pool = PipePool::new(4, Some(1 << 20));
        assert_eq!(pool.take().expect("pipe").0.capacity(), 1 << 20);
        let mut refused = PipePool::new(4, Some(usize::MAX));
        let (pipe, created) = refused.take().expect("a pipe of the kernel's size");
        assert!(created && pipe.capacity() < 1 << 30);
        assert!(refused.warned, "the refusal was logged");
        assert!(refused.take().is_ok(), "and the next pipe too");
    }

    #[test]
    fn a_grown_pipe_waits_in_the_pool_at_its_former_size() {
        let mut pool = PipePool::new(4, None);
        let (mut pipe, _) = pool.take().expect("pipe");
        let kernels = pipe.capacity();
        pipe.grow(1 << 20)
            .expect("an unprivileged process may grow a pipe to 1 MiB");
        assert!(pipe.is_grown() && pipe.capacity() == 1 << 20);
        pool.give_back(pipe);
        let (again, created) = pool.take().expect("pipe");
        assert!(!created, "the grown pipe was kept");
        assert!(!again.is_grown());
        assert_eq!(again.capacity(), kernels);
    }

    #[test]
    fn the_grown_pipes_held_are_counted_until_released() {
        let mut pool = PipePool::new(4, None);
        pool.count_grown(2);
        pool.count_released();
        assert_eq!(pool.grown(), 1);
        pool.count_released();
        pool.count_released();
        assert_eq!(pool.grown(), 0, "never below zero");
    }

    #[test]
    fn idle_pipes_are_bounded_in_bytes_too() {
        assert_eq!(super::idle_pipes(None), MAX_IDLE_PIPES);
        assert_eq!(super::idle_pipes(Some(1 << 20)), 16);
        assert_eq!(super::idle_pipes(Some(256 << 20)), 1);
    }

    #[test]
    fn the_pool_keeps_at_most_its_bound() {
        let mut pool = PipePool::new(2, None);
        let pipes: Vec<_> = (0..3).map(|_| pool.take().expect("pipe").0).collect();
        for pipe in pipes {
            pool.give_back(pipe);
        }
        assert_eq!(pool.idle(), 2);
    }
}
