//! The per-worker pool of byte buffers, and [`Checkout`], the owned buffer
//! a session holds while it reads and writes.
//!
//! Owns: lazy allocation, the two sizes it keeps (`buffer_size` for the
//! pipe, the preread's first window, `FIRST_WINDOW_BYTES`), a window grown
//! past them ([`Checkout::grow`], freed when given back), parked claims (a
//! place under the cap kept without its memory), capped free lists so that
//! memory returns to a steady state after a burst, and taking each buffer,
//! whatever its size, out of the process-wide cap (`max_buffers`, one
//! atomic count for every worker's pool: a worker whose buffers are all out
//! still gets one while the process has room). Must never: lock or share
//! its free lists between threads (one pool per worker), let the workers
//! together hold more than `max_buffers` buffers, decide a size (the
//! preread step says how large a window grows), or zero a buffer on reuse
//! (every byte a session reads is written by `read` before `data` exposes
//! it).

use std::fmt;
use std::sync::Arc;

use preread_core::window::FIRST_WINDOW_BYTES;

use crate::shared::admission::Slots;

/// Buffers of each size kept for reuse at most. Beyond this, a returned buffer is freed:
/// a burst of connections must not pin its peak memory forever, while the
/// usual churn of a busy worker is still served without the allocator.
const FREE_LIST_CAP: usize = 256;

/// The buffers of one worker.
#[derive(Debug)]
pub struct BufferPool {
    buffer_size: usize,
    /// The process-wide count of buffers out, capped at `max_buffers`.
    cap: Arc<Slots>,
    /// Buffers of this pool out now, parked claims included.
    in_use: usize,
    /// Cleared `buffer_size` buffers ready for reuse, at most
    /// `max_buffers.min(FREE_LIST_CAP)`.
    free: Vec<Checkout>,
    /// Cleared first windows ready for reuse, as many at most.
    free_windows: Vec<Checkout>,
}

impl BufferPool {
    /// A pool of buffers of `buffer_size` bytes, each counted in `cap`.
    /// Allocates nothing yet: buffers are created on first checkout.
    pub fn new(buffer_size: usize, cap: Arc<Slots>) -> Self {
        debug_assert!(buffer_size > 0, "a zero-byte buffer cannot hold a read");
        Self {
            buffer_size,
            cap,
            in_use: 0,
            free: Vec::new(),
            free_windows: Vec::new(),
        }
    }

    /// A buffer for a session, or `None` when `max_buffers` are out in the
    /// whole process: the caller refuses the connection
    /// (`tcp.refused.pool_exhausted`).
    pub fn checkout(&mut self) -> Option<Checkout> {
        if !self.cap.try_acquire() {
            return None;
        }
        self.in_use += 1;
        let size = self.buffer_size;
        let buffer = self.free.pop().unwrap_or_else(|| Checkout::new(size));
        debug_assert!(buffer.is_empty() && buffer.capacity() == size);
        Some(buffer)
    }

    /// A preread's first window (`FIRST_WINDOW_BYTES`), on the same terms
    /// as [`Self::checkout`]: it counts as one of the `max_buffers`.
    pub fn checkout_window(&mut self) -> Option<Checkout> {
        if !self.cap.try_acquire() {
            return None;
        }
        self.in_use += 1;
        let buffer = self
            .free_windows
            .pop()
            .unwrap_or_else(|| Checkout::new(FIRST_WINDOW_BYTES));
        debug_assert!(buffer.is_empty() && buffer.capacity() == FIRST_WINDOW_BYTES);
        Some(buffer)
    }

    /// Whether `buffer` is of the size the pipe's copying directions use.
    pub fn is_pipe_sized(&self, buffer: &Checkout) -> bool {
        buffer.capacity() == self.buffer_size
    }

    /// Returns a buffer taken from this pool. Its content is dropped; a
    /// window grown past both kept sizes is freed.
    pub fn give_back(&mut self, buffer: Checkout) {
        self.park(buffer);
        self.release_parked(1);
    }

    /// Takes back a buffer's memory while its holder keeps its place under
    /// `max_buffers` (a claim): an idle direction holds no memory, and
    /// gets a pipe-sized buffer again from [`Self::unpark`], which cannot
    /// fail. Its content is dropped.
    pub fn park(&mut self, mut buffer: Checkout) {
        let keep = self.cap.cap().min(FREE_LIST_CAP);
        let free = if buffer.capacity() == self.buffer_size {
            &mut self.free
        } else if buffer.capacity() == FIRST_WINDOW_BYTES {
            &mut self.free_windows
        } else {
            return;
        };
        if free.len() < keep {
            buffer.clear();
            free.push(buffer);
        }
    }

    /// A pipe-sized buffer for a claim its holder parked.
    pub fn unpark(&mut self) -> Checkout {
        let size = self.buffer_size;
        self.free.pop().unwrap_or_else(|| Checkout::new(size))
    }

    /// Gives up `claims` parked claims: they no longer count as in use.
    pub fn release_parked(&mut self, claims: usize) {
        debug_assert!(self.in_use >= claims, "more claims released than held");
        for _ in 0..claims.min(self.in_use) {
            self.cap.give_back();
        }
        self.in_use = self.in_use.saturating_sub(claims);
    }

    /// Buffers of this pool currently checked out.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Every buffer the process may hold is out, in this pool or another.
    pub fn is_exhausted(&self) -> bool {
        self.cap.is_full()
    }
}

/// An owned buffer with a read position and a write position: bytes in
/// `start..end` are data not yet consumed, `end..` is free space.
pub struct Checkout {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Checkout {
    fn new(size: usize) -> Self {
        Self {
            buf: vec![0; size].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Moves the data into a new buffer of `capacity` bytes (never less
    /// than the data): a preread window that must hold more of a hello.
    pub fn grow(&mut self, capacity: usize) {
        let mut grown = vec![0; capacity.max(self.len())].into_boxed_slice();
        let len = self.len();
        grown[..len].copy_from_slice(self.data());
        self.buf = grown;
        self.start = 0;
        self.end = len;
    }

    /// The free space at the end, to read into; follow with [`Self::fill`].
    /// When the tail is full and the front was consumed, the data moves to
    /// the front first, so a half-drained buffer can still take a read.
    pub fn space(&mut self) -> &mut [u8] {
        if self.end == self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// Records that a read wrote `n` bytes at the start of [`Self::space`].
    pub fn fill(&mut self, n: usize) {
        let free = self.buf.len() - self.end;
        debug_assert!(n <= free, "filled {n} bytes into {free} bytes of space");
        self.end += n.min(free);
    }

    /// The bytes not consumed yet.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Drops the first `n` bytes of [`Self::data`] (they were written out).
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len(), "consumed {n} of {} bytes", self.len());
        self.start += n.min(self.len());
        if self.start == self.end {
            // Empty: rewinding is free and gives the next read the whole buffer.
            self.clear();
        }
    }

    /// Bytes not consumed yet.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The buffer's size in bytes.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Forgets every byte (without zeroing them).
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }
}

impl fmt::Debug for Checkout {
    // The bytes themselves would flood a session's debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkout")
            .field("start", &self.start)
            .field("end", &self.end)
            .field("capacity", &self.buf.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::{BufferPool, FIRST_WINDOW_BYTES, FREE_LIST_CAP};
    use crate::shared::admission::Slots;

    fn pool(buffer_size: usize, max_buffers: usize) -> BufferPool {
        BufferPool::new(buffer_size, Slots::new(max_buffers))
    }

    fn write(buffer: &mut super::Checkout, bytes: &[u8]) {
        let space = buffer.space();
        space[..bytes.len()].copy_from_slice(bytes);
        buffer.fill(bytes.len());
    }

    #[test]
    fn allocates_lazily() {
        let mut pool = pool(16_384, 10_000);
        assert_eq!((pool.in_use(), pool.free.len()), (0, 0));
        let buffer = pool.checkout();
        assert!(buffer.is_some());
        assert_eq!((pool.in_use(), pool.free.len()), (1, 0));
    }

    #[test]
    fn exhaustion_and_give_back() {
        let mut pool = pool(8, 2);
        let a = pool.checkout();
        let b = pool.checkout();
        assert!(pool.checkout().is_none(), "a third buffer past max_buffers");
        assert!(pool.is_exhausted());
        assert_eq!(pool.in_use(), 2);
        for buffer in [a, b].into_iter().flatten() {
            pool.give_back(buffer);
        }
        assert_eq!(pool.in_use(), 0);
        assert!(pool.checkout().is_some());
        assert_eq!(pool.in_use(), 1);
    }

    #[test]
    fn two_pools_share_one_cap() {
        let cap = Slots::new(3);
        let mut one = BufferPool::new(8, std::sync::Arc::clone(&cap));
        let mut other = BufferPool::new(8, std::sync::Arc::clone(&cap));
        let taken: Vec<_> = [one.checkout(), one.checkout(), one.checkout()]
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(taken.len(), 3, "one worker may take the whole cap");
        assert!(other.checkout().is_none() && other.is_exhausted());
        for buffer in taken {
            one.give_back(buffer);
        }
        assert!(other.checkout().is_some(), "room again, for any worker");
        assert_eq!(cap.taken(), 1);
    }

    #[test]
    fn a_buffer_is_reused_cleared_but_not_zeroed() {
        let mut pool = pool(8, 4);
        let mut buffer = pool.checkout().unwrap();
        write(&mut buffer, b"abc");
        let address = buffer.data().as_ptr();
        pool.give_back(buffer);
        let mut again = pool.checkout().unwrap();
        assert!(again.is_empty());
        assert_eq!(
            again.space().as_ptr(),
            address,
            "the same allocation comes back"
        );
        assert_eq!(
            &again.space()[..3],
            b"abc",
            "reuse does not pay for zeroing"
        );
    }

    #[test]
    fn the_free_list_is_capped() {
        let mut pool = pool(4, FREE_LIST_CAP + 10);
        let all: Vec<_> = std::iter::from_fn(|| pool.checkout()).collect();
        assert_eq!(all.len(), FREE_LIST_CAP + 10);
        for buffer in all {
            pool.give_back(buffer);
        }
        assert_eq!(pool.free.len(), FREE_LIST_CAP);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn space_after_a_partial_consume_is_the_tail() {
        let mut pool = pool(8, 1);
        let mut buffer = pool.checkout().unwrap();
        write(&mut buffer, b"hello");
        buffer.consume(2);
        assert_eq!(buffer.data(), b"llo");
        assert_eq!(buffer.len(), 3);
        // The tail is not full: no move, the free space is what follows.
        assert_eq!(buffer.space().len(), 3);
        assert_eq!(buffer.data(), b"llo");
    }

    #[test]
    fn compaction_keeps_the_data_intact() {
        let mut pool = pool(8, 1);
        let mut buffer = pool.checkout().unwrap();
        write(&mut buffer, b"01234567");
        assert!(
            buffer.space().is_empty(),
            "full, nothing consumed: no space"
        );
        buffer.consume(5);
        assert_eq!(buffer.space().len(), 5, "the consumed front became space");
        assert_eq!(buffer.data(), b"567");
        write(&mut buffer, b"89ab");
        assert_eq!(buffer.data(), b"56789ab");
        assert_eq!(buffer.capacity(), 8);
    }

    #[test]
    fn windows_and_pipe_buffers_share_the_cap_and_keep_their_sizes() -> Result<(), &'static str> {
        let mut pool = pool(16_384, 3);
        let mut window = pool.checkout_window().ok_or("a window")?;
        assert_eq!(window.capacity(), FIRST_WINDOW_BYTES);
        assert!(!pool.is_pipe_sized(&window));
        let pipe = pool.checkout().ok_or("a buffer")?;
        assert!(pool.is_pipe_sized(&pipe));
        write(&mut window, b"hello");
        window.consume(2);
        window.grow(2 * FIRST_WINDOW_BYTES);
        assert_eq!(window.data(), b"llo", "growing keeps the data");
        assert_eq!(window.capacity(), 2 * FIRST_WINDOW_BYTES);
        let other = pool.checkout_window().ok_or("a third buffer")?;
        assert!(pool.checkout().is_none() && pool.checkout_window().is_none());
        pool.give_back(window);
        assert_eq!(
            (pool.free.len(), pool.free_windows.len()),
            (0, 0),
            "a grown window is freed"
        );
        pool.give_back(other);
        pool.give_back(pipe);
        assert_eq!(
            (pool.free.len(), pool.free_windows.len(), pool.in_use()),
            (1, 1, 0)
        );
        assert_eq!(
            pool.checkout_window().map(|w| w.capacity()),
            Some(FIRST_WINDOW_BYTES)
        );
        Ok(())
    }

    #[test]
    fn a_parked_claim_keeps_its_place_but_not_its_memory() -> Result<(), &'static str> {
        let mut pool = pool(8, 1);
        let buffer = pool.checkout().ok_or("a buffer")?;
        pool.park(buffer);
        assert_eq!((pool.in_use(), pool.free.len()), (1, 1));
        assert!(pool.checkout().is_none(), "the parked claim still counts");
        let again = pool.unpark();
        assert_eq!((again.capacity(), pool.free.len()), (8, 0));
        pool.park(again);
        pool.release_parked(1);
        assert_eq!(pool.in_use(), 0);
        assert!(pool.checkout().is_some());
        Ok(())
    }

    #[test]
    fn consuming_everything_rewinds() {
        let mut pool = pool(8, 1);
        let mut buffer = pool.checkout().unwrap();
        write(&mut buffer, b"abcd");
        buffer.consume(4);
        assert!(buffer.is_empty());
        assert_eq!(buffer.space().len(), 8);
        write(&mut buffer, b"xy");
        buffer.clear();
        assert_eq!((buffer.len(), buffer.space().len()), (0, 8));
    }
}
