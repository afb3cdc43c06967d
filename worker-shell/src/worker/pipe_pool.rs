//! Idle kernel pipes kept for the next spliced session.
//!
//! Owns: [`PipePool`], a bounded stack of empty [`SplicePipe`]s per worker,
//! and the count of pipes the worker had to create. A spliced session needs
//! two pipes; making them (`pipe2`, `F_SETPIPE_SZ`) and closing them cost a
//! short connection about 20 µs, so they are reused, as HAProxy does. Must
//! never: hand out a pipe that holds a byte (another session's bytes would
//! reach the wrong peer): a pipe is kept only when its own count and the
//! kernel both say it is empty, and otherwise closed.

use std::io;

use super::splice::SplicePipe;

/// Idle pipes a worker keeps at most: 2 descriptors each. Enough for 32
/// spliced sessions closing and opening at once without a new pipe.
pub const MAX_IDLE_PIPES: usize = 64;

/// A worker's idle pipes.
#[derive(Debug)]
pub struct PipePool {
    idle: Vec<SplicePipe>,
    max_idle: usize,
}

impl PipePool {
    /// An empty pool that keeps at most `max_idle` pipes.
    pub fn new(max_idle: usize) -> Self {
        Self {
            idle: Vec::new(),
            max_idle,
        }
    }

    /// An idle pipe, or a new one; the flag says whether it was created.
    pub fn take(&mut self) -> io::Result<(SplicePipe, bool)> {
        match self.idle.pop() {
            Some(pipe) => Ok((pipe, false)),
            None => SplicePipe::new().map(|pipe| (pipe, true)),
        }
    }

    /// Keeps `pipe` for a later session if it is empty and the pool has
    /// room; closes it otherwise.
    pub fn give_back(&mut self, pipe: SplicePipe) {
        if self.idle.len() < self.max_idle && pipe.is_empty() {
            self.idle.push(pipe);
        }
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

    use super::PipePool;

    #[test]
    fn an_empty_pipe_is_reused_and_one_holding_bytes_is_closed() {
        let mut pool = PipePool::new(4);
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
    fn the_pool_keeps_at_most_its_bound() {
        let mut pool = PipePool::new(2);
        let pipes: Vec<_> = (0..3).map(|_| pool.take().expect("pipe").0).collect();
        for pipe in pipes {
            pool.give_back(pipe);
        }
        assert_eq!(pool.idle(), 2);
    }
}
