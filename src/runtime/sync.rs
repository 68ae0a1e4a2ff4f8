//! Synchronisation primitives of the lock-free parts, switched to `loom`'s model-checked versions
//! under `RUSTFLAGS="--cfg loom"` (see `make loom`). Pure Rust; nothing else belongs here.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::thread_local;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::thread_local;

/// Back-off for a short wait on another thread (a drain scan holding a slot busy for one
/// dispatcher post): spin briefly, then yield the CPU instead of burning it.
#[cfg(not(loom))]
pub(crate) fn backoff(round: &mut u32) {
    if *round < 64 {
        *round += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Under loom every wait must yield so the model checker can schedule the other thread.
#[cfg(loom)]
pub(crate) fn backoff(_round: &mut u32) {
    loom::thread::yield_now();
}
