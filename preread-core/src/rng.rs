//! The one pseudo-random generator of the workspace: a seeded SplitMix64,
//! for the code around the core. The shell's load balancing draws from it
//! (spread, not secrecy) and the simulation generates its scenarios with it.
//! The core itself never calls it: a decision draws nothing.
//!
//! Owns: [`Rng`] and the small helpers callers draw with. Must never: read
//! entropy from the system, so the same seed always gives the same numbers
//! on every platform.

/// SplitMix64 (Steele, Lea, Flood 2014): one 64-bit state, full period,
/// good enough statistics for test generation, and trivially reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0`, without a draw, when `n` is 0): one draw and
    /// a multiply-shift (Lemire) instead of a modulo, so the bias is at most
    /// n / 2^64.
    pub fn below_u64(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // The high half of a 64x64 product is below `n`, so it fits.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// [`Self::below_u64`] for lengths and indices.
    pub fn below(&mut self, n: usize) -> usize {
        self.below_u64(n as u64) as usize
    }

    /// A number in `lo..=hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// A `u64` in `lo..=hi`.
    pub fn range_u64(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        let span = u128::from(hi - lo) + 1;
        lo + ((u128::from(self.next_u64()) * span) >> 64) as u64
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }

    /// An independent generator derived from this one's next output, so one
    /// part of a scenario can draw more or fewer numbers without shifting
    /// every draw of another part.
    pub fn fork(&mut self) -> Self {
        Self(self.next_u64() ^ 0x5851_f42d_4c95_7f2d)
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn same_seed_same_numbers() {
        let a: Vec<u64> = {
            let mut r = Rng::new(7);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = Rng::new(7);
            (0..8).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        // Reference value of SplitMix64 seeded with 0.
        assert_eq!(Rng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            let x = r.range(3, 9);
            assert!((3..=9).contains(&x));
            assert!(r.below(5) < 5);
            assert!((10..=20).contains(&r.range_u64(10, 20)));
        }
        assert_eq!(r.range(4, 4), 4);
        assert_eq!(r.below(0), 0);
        assert_eq!(r.below_u64(0), 0);
        assert!(r.below_u64(3) < 3);
    }
}
