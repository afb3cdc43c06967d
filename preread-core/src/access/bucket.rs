//! The token bucket of `connection_rate_per_ip`, as a pure function of
//! `now`.
//!
//! A bucket holds `burst` tokens, gains one every `per / rate`, and a
//! connection takes one. It is stored as the one instant it is full again
//! (the "theoretical arrival time" of the generic cell rate algorithm,
//! which is exactly this bucket): a full bucket is one whose instant has
//! passed, so it carries no information and a table may forget it, and
//! refilling costs no timer and no write.
//!
//! Owns: [`Rate`] (a validated `{ rate, per, burst }`) and [`Bucket`].
//! Must never: read a clock, admit past `burst` in any instant, or admit
//! more than `burst + rate × elapsed / per` over any span.

use std::fmt;
use std::time::{Duration, Instant};

/// Why `{ rate, per, burst }` is not a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateError {
    /// `rate` is 0.
    ZeroRate,
    /// `per` is 0, or shorter than one nanosecond per token.
    ZeroPer,
    /// `burst` is 0: no connection could ever pass.
    ZeroBurst,
    /// `per` is longer than [`Rate::MAX_PER`].
    PerTooLong,
}

impl fmt::Display for RateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ZeroRate => "rate must be at least 1",
            Self::ZeroPer => "per must be a positive duration of at least 1ns per connection",
            Self::ZeroBurst => "burst must be at least 1",
            Self::PerTooLong => "per must be at most 1 day",
        })
    }
}

impl std::error::Error for RateError {}

/// `rate` connections per `per`, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    rate: u32,
    per: Duration,
    burst: u32,
    /// `per / rate`: the time one token takes to come back.
    interval: Duration,
    /// `interval × burst`: from empty to full.
    capacity: Duration,
}

impl Rate {
    /// The longest `per`: a day keeps every sum of instants far from
    /// overflow.
    pub const MAX_PER: Duration = Duration::from_secs(86_400);

    /// A validated rate.
    pub fn new(rate: u32, per: Duration, burst: u32) -> Result<Self, RateError> {
        if rate == 0 {
            return Err(RateError::ZeroRate);
        }
        if burst == 0 {
            return Err(RateError::ZeroBurst);
        }
        if per > Self::MAX_PER {
            return Err(RateError::PerTooLong);
        }
        let interval = per / rate;
        if interval.is_zero() {
            return Err(RateError::ZeroPer);
        }
        let capacity = interval.checked_mul(burst).ok_or(RateError::PerTooLong)?;
        Ok(Self {
            rate,
            per,
            burst,
            interval,
            capacity,
        })
    }

    /// Tokens gained per `per`.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// The span `rate` tokens come back in.
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The tokens a full bucket holds.
    pub fn burst(&self) -> u32 {
        self.burst
    }
}

/// One source's bucket: the instant it is full again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    full_at: Instant,
}

impl Bucket {
    /// A full bucket at `now`.
    pub fn full(now: Instant) -> Self {
        Self { full_at: now }
    }

    /// Takes a token at `now`: `false` (and nothing changes) when the
    /// bucket is empty.
    pub fn take(&mut self, rate: &Rate, now: Instant) -> bool {
        let base = self.full_at.max(now);
        let Some(next) = base.checked_add(rate.interval) else {
            return false;
        };
        if next.saturating_duration_since(now) > rate.capacity {
            return false;
        }
        self.full_at = next;
        true
    }

    /// No token is missing at `now`: the bucket is as good as absent.
    pub fn is_full(&self, now: Instant) -> bool {
        self.full_at <= now
    }

    /// The instant the bucket is full again.
    pub fn full_at(&self) -> Instant {
        self.full_at
    }

    /// The whole tokens the bucket holds at `now`.
    pub fn tokens(&self, rate: &Rate, now: Instant) -> u32 {
        let missing = self.full_at.saturating_duration_since(now);
        let held = rate.capacity.saturating_sub(missing);
        let whole = held.as_nanos() / rate.interval.as_nanos().max(1);
        u32::try_from(whole).unwrap_or(rate.burst).min(rate.burst)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Bucket, Rate, RateError};

    fn rate(rate: u32, per_ms: u64, burst: u32) -> Rate {
        Rate::new(rate, Duration::from_millis(per_ms), burst).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_full_bucket_admits_its_burst_at_once_and_no_more() {
        let limit = rate(50, 1000, 50);
        let now = Instant::now();
        let mut bucket = Bucket::full(now);
        assert_eq!(bucket.tokens(&limit, now), 50);
        assert_eq!((0..80).filter(|_| bucket.take(&limit, now)).count(), 50);
        assert_eq!(bucket.tokens(&limit, now), 0);
        assert!(!bucket.is_full(now));
    }

    #[test]
    fn tokens_come_back_one_per_interval() {
        let limit = rate(50, 1000, 50);
        let start = Instant::now();
        let mut bucket = Bucket::full(start);
        while bucket.take(&limit, start) {}
        let ms = |n: u64| start + Duration::from_millis(n);
        assert!(!bucket.take(&limit, ms(19)), "one token takes 20 ms");
        assert!(bucket.take(&limit, ms(20)));
        assert!(!bucket.take(&limit, ms(20)));
        assert_eq!(bucket.tokens(&limit, ms(120)), 5);
        assert!(
            bucket.is_full(ms(1020)),
            "full again 1 s after the last take"
        );
        assert_eq!(bucket.tokens(&limit, ms(5000)), 50, "never past the burst");
    }

    #[test]
    fn the_issue_case_admits_burst_plus_one_second_of_refill() {
        // 200 connections spread evenly over 1 s, rate 50/s, burst 50.
        let limit = rate(50, 1000, 50);
        let start = Instant::now();
        let mut bucket = Bucket::full(start);
        let admitted = (0..200u64)
            .filter(|i| bucket.take(&limit, start + Duration::from_millis(i * 5)))
            .count();
        assert!((95..=105).contains(&admitted), "{admitted}");
    }

    #[test]
    fn never_more_than_burst_plus_the_refill_over_any_span() {
        let limit = rate(7, 300, 3);
        let start = Instant::now();
        let mut bucket = Bucket::full(start);
        let mut admitted_at = Vec::new();
        for step in 0..5000u64 {
            let now = start + Duration::from_micros(step * 97);
            if bucket.take(&limit, now) {
                admitted_at.push(now);
            }
        }
        for (i, first) in admitted_at.iter().enumerate() {
            for (j, last) in admitted_at.iter().enumerate().skip(i) {
                let span = last.duration_since(*first);
                let refill = span.as_nanos() * 7 / Duration::from_millis(300).as_nanos();
                assert!((j - i + 1) as u128 <= 3 + refill, "{i}..{j} over {span:?}");
            }
        }
    }

    #[test]
    fn invalid_rates_are_refused_with_their_reason() {
        let second = Duration::from_secs(1);
        assert_eq!(Rate::new(0, second, 1), Err(RateError::ZeroRate));
        assert_eq!(Rate::new(1, Duration::ZERO, 1), Err(RateError::ZeroPer));
        assert_eq!(
            Rate::new(10, Duration::from_nanos(5), 1),
            Err(RateError::ZeroPer)
        );
        assert_eq!(Rate::new(1, second, 0), Err(RateError::ZeroBurst));
        assert_eq!(
            Rate::new(1, Duration::from_secs(86_401), 1),
            Err(RateError::PerTooLong)
        );
        let ok = rate(3, 1000, 9);
        assert_eq!((ok.rate(), ok.per(), ok.burst()), (3, second, 9));
    }
}
