//! Time as the drain logic sees it: a trait, so the glue and the engine take their clock as a
//! parameter and unit tests step a fake clock (`crate::testing::FakeClock`) instead of
//! sleeping. The real clock lives in the FFI layer (it reads the kernel's coarse monotonic
//! clock). Pure Rust.

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

#[cfg(test)]
mod tests;
