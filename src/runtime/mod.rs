//! What the module runs on, below everything else: time ([`clock`]), the synchronisation
//! primitives the lock-free parts use (`sync`, switched to loom's under `--cfg loom`), the one
//! owner of the module's own threads ([`threads`]) and, in test builds only, fault injection
//! (`faults`). Plain std; imports nothing of the crate.

pub mod clock;
#[cfg(feature = "panic-test")]
pub mod faults;
pub(crate) mod sync;
pub mod threads;
