//! Time as the drain logic sees it: a trait, so the glue and the engine take their clock as a
//! parameter and unit tests step a [`FakeClock`] instead of sleeping. The real clock lives in the
//! FFI layer (it reads the kernel's coarse monotonic clock). Pure Rust.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync {
    /// Now, for the drain state machine and status ages.
    fn now(&self) -> Instant;
    /// Now as nanoseconds since [`Clock::epoch`], plus one (never 0: 0 means "none" in atomics).
    /// Cheap: called on every request.
    fn nanos(&self) -> u64;
    /// The instant [`Clock::nanos`] counts from.
    fn epoch(&self) -> Instant;

    /// The instant of a [`Clock::nanos`] timestamp.
    fn instant_of(&self, nanos: u64) -> Instant {
        self.epoch() + Duration::from_nanos(nanos.saturating_sub(1))
    }

    /// As [`Clock::nanos`], from [`Clock::now`]: exact where `nanos` may lag by a coarse tick.
    fn precise_nanos(&self) -> u64 {
        let since = self.now().saturating_duration_since(self.epoch());
        (since.as_nanos() as u64).saturating_add(1)
    }
}

/// A clock that moves only when told to.
pub struct FakeClock {
    epoch: Instant,
    elapsed_nanos: AtomicU64,
}

impl FakeClock {
    pub fn new() -> Self {
        FakeClock {
            epoch: Instant::now(),
            elapsed_nanos: AtomicU64::new(0),
        }
    }

    pub fn advance(&self, d: Duration) {
        self.elapsed_nanos
            .fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.epoch + Duration::from_nanos(self.elapsed_nanos.load(Ordering::SeqCst))
    }
    fn nanos(&self) -> u64 {
        self.elapsed_nanos.load(Ordering::SeqCst) + 1
    }
    fn epoch(&self) -> Instant {
        self.epoch
    }
}

#[cfg(test)]
mod tests;
