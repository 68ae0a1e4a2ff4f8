//! The one owner of the threads the module starts inside Envoy, and the gate their calls into
//! Envoy pass. Pure: std only, no FFI (the calls themselves are closures from `ffi`).
//!
//! Every module thread is spawned by [`Threads::spawn`], waits in [`Threads::sleep`] (so a stop
//! wakes it at once) and makes each call into Envoy through [`Threads::call`]. A panic on one is
//! contained and counted here ([`Threads::take_panics`]); the gauge thread (every 500 ms) or the
//! bootstrap extension on Envoy's main thread, whichever takes them first, counts them into
//! `module_errors` (nothing here calls back up). The shutdown
//! release closes the gate ([`Threads::close`]) before it calls Envoy's completion: `close` waits
//! for a call under way and refuses every later one, so no module thread calls into Envoy once
//! Envoy may tear down (workers, dispatchers, stats). `config_destroy` then joins the threads,
//! bounded ([`Threads::join`]).
//!
//! Calls made on Envoy's own threads (hooks, the main thread's timer) pass the same gate, so a
//! stray commit after the release is refused there too; they are never held by the test fault.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Test-only behaviour (the `panic-test` build's faults), off in production.
#[derive(Debug, Default, Clone, Copy)]
pub struct GateFaults {
    /// Every call a module thread decides to make waits until the exit was released (at most
    /// [`HOLD_LIMIT`]): the widest possible window between a thread's check and its call.
    pub hold_calls_until_release: bool,
    /// The gate lets calls through after the release; such a call is counted as late and then
    /// skipped (making it could crash Envoy mid-teardown, and the test needs the count).
    pub no_gate: bool,
}

/// How long a held call waits for the release.
pub const HOLD_LIMIT: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Life {
    released: bool,
    stopping: bool,
    handles: Vec<(&'static str, JoinHandle<()>)>,
    /// Calls refused by the closed gate, and calls made after the release (no gate), by caller.
    refused: Vec<(&'static str, u64)>,
    late: Vec<(&'static str, u64)>,
}

/// What a stop found: see [`Threads::join`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stopped {
    pub joined: usize,
    /// Threads still in a call that cannot be interrupted (a socket call to the admin) when the
    /// bound ran out: left detached; the gate keeps them out of Envoy.
    pub left: Vec<&'static str>,
    pub refused: Vec<(&'static str, u64)>,
    pub late: Vec<(&'static str, u64)>,
}

/// The gate's word: [`CLOSED`] once the exit was released, plus the calls under way.
const CLOSED: u64 = 1 << 63;

pub struct Threads {
    /// [`CLOSED`] | calls under way. Atomics, not a lock: a call into Envoy may run one of the
    /// module's destroy hooks on the calling thread (ENVOY_FACTS.md, schedulers), which may
    /// close the gate from inside that call.
    gate: AtomicU64,
    life: Mutex<Life>,
    wake: Condvar,
    faults: GateFaults,
    /// Panics contained on module threads, not yet taken by [`Threads::take_panics`] (shared
    /// with the threads, which may outlive a borrow of this).
    panics: std::sync::Arc<AtomicU64>,
}

std::thread_local! {
    static MODULE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Calls under way on this thread (a call nested in another through a destroy hook).
    static IN_CALL: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Leaves the gate when a call ends, panicking or not.
struct Inside<'a>(&'a AtomicU64);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        IN_CALL.with(|n| n.set(n.get() - 1));
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn count(list: &mut Vec<(&'static str, u64)>, what: &'static str) {
    match list.iter_mut().find(|(w, _)| *w == what) {
        Some((_, n)) => *n += 1,
        None => list.push((what, 1)),
    }
}

impl Default for Threads {
    fn default() -> Self {
        Threads::new(GateFaults::default())
    }
}

impl Threads {
    pub fn new(faults: GateFaults) -> Self {
        Threads {
            gate: AtomicU64::new(0),
            life: Mutex::new(Life::default()),
            wake: Condvar::new(),
            faults,
            panics: Default::default(),
        }
    }

    fn life(&self) -> MutexGuard<'_, Life> {
        self.life.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Start a module thread running `body`. A panic in it is contained (logged, counted for
    /// [`Threads::take_panics`]) and ends only that thread. Refused once the module is stopping.
    pub fn spawn(
        &self,
        name: &'static str,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let mut life = self.life();
        if life.stopping {
            return Err(std::io::Error::other("the module is stopping"));
        }
        // Finished threads leave the list here, so it holds only live ones.
        let (done, live): (Vec<_>, Vec<_>) = std::mem::take(&mut life.handles)
            .into_iter()
            .partition(|(_, h)| h.is_finished());
        life.handles = live;
        for (_, h) in done {
            let _ = h.join();
        }
        let panics = self.panics.clone();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                MODULE_THREAD.with(|m| m.set(true));
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
                if run.is_err() {
                    log::error!("graceful_drain: panic contained on the module thread {name}");
                    panics.fetch_add(1, Ordering::Relaxed);
                }
            })?;
        life.handles.push((name, handle));
        Ok(())
    }

    /// How many panics module threads contained since the last call (each counted once, in
    /// `module_errors`, by whoever takes them).
    pub fn take_panics(&self) -> u64 {
        self.panics.swap(0, Ordering::Relaxed)
    }

    /// Wait up to `d`; `false` (at once) when the module is stopping: the thread should end.
    pub fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut life = self.life();
        loop {
            if life.stopping {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            life = self
                .wake
                .wait_timeout(life, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Make a call into Envoy (`f`) if the gate is open: `None` once the exit was released.
    pub fn call<R>(&self, what: &'static str, f: impl FnOnce() -> R) -> Option<R> {
        if self.faults.hold_calls_until_release && MODULE_THREAD.with(|m| m.get()) {
            // The `panic-test` build's fault only. Said on stderr, not through the logger (its
            // calls from this thread would be held too), so a test can act while it waits.
            eprintln!("graceful_drain test fault: {what} held until the release");
            self.hold_until_release();
        }
        if self.faults.no_gate {
            if self.life().released {
                count(&mut self.life().late, what);
                return None;
            }
            return Some(f());
        }
        if self.gate.fetch_add(1, Ordering::SeqCst) & CLOSED != 0 {
            self.gate.fetch_sub(1, Ordering::SeqCst);
            count(&mut self.life().refused, what);
            return None;
        }
        IN_CALL.with(|n| n.set(n.get() + 1));
        let _inside = Inside(&self.gate);
        Some(f())
    }

    fn hold_until_release(&self) {
        let deadline = Instant::now() + HOLD_LIMIT;
        let mut life = self.life();
        while !life.released {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            life = self
                .wake
                .wait_timeout(life, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Envoy's exit is about to be released: close the gate (waiting for the calls under way on
    /// other threads; no call starts after this returns) and tell every thread to end.
    /// Idempotent. Calls are short (a dispatcher post, an atomic store, one stats walk), so the
    /// wait spins, then yields.
    pub fn close(&self) {
        self.gate.fetch_or(CLOSED, Ordering::SeqCst);
        let own = IN_CALL.with(|n| n.get());
        let mut round = 0u32;
        while self.gate.load(Ordering::SeqCst) & !CLOSED > own {
            if round < 64 {
                round += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let mut life = self.life();
        life.released = true;
        life.stopping = true;
        self.wake.notify_all();
    }

    /// Whether the module's threads were told to end ([`Threads::close`] or [`Threads::join`]).
    pub fn is_stopping(&self) -> bool {
        self.life().stopping
    }

    /// Whether the gate is open (the exit not released yet).
    pub fn is_open(&self) -> bool {
        self.gate.load(Ordering::SeqCst) & CLOSED == 0
    }

    /// Whether the calling thread is one of the module's own (never Envoy's main thread, on
    /// which some calls, such as deleting a timer, must be made).
    pub fn on_module_thread() -> bool {
        MODULE_THREAD.with(|m| m.get())
    }

    /// Stop every thread and join them, waiting at most `bound` in all (the gate stays as it
    /// is: `close` is the release's). Returns what it found, calls refused and late included.
    pub fn join(&self, bound: Duration) -> Stopped {
        let handles = {
            let mut life = self.life();
            life.stopping = true;
            self.wake.notify_all();
            std::mem::take(&mut life.handles)
        };
        let deadline = Instant::now() + bound;
        let mut stopped = Stopped::default();
        for (name, h) in handles {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
                stopped.joined += 1;
            } else {
                stopped.left.push(name);
            }
        }
        let life = self.life();
        stopped.refused = life.refused.clone();
        stopped.late = life.late.clone();
        stopped
    }
}

#[cfg(test)]
mod tests;
