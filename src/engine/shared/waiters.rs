//! `/drain` requests waiting for the drain to complete ([`Waiters`]): registered by the control
//! streams, answered once by the completion. Plain std.

use super::{lock, Waker};
use std::sync::Mutex;

/// A `/drain` request waiting for completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Waiting(u64),
    AlreadyDone,
}

/// `/drain` requests waiting for the drain to complete. Owned by the control streams; answered
/// once by the drain completion.
#[derive(Default)]
pub struct Waiters {
    inner: Mutex<WaitersInner>,
}

#[derive(Default)]
struct WaitersInner {
    done: bool,
    next_id: u64,
    list: Vec<(u64, Waker)>,
    /// The waiters the completion took out and is waking, outside the lock; `true` once the
    /// waiter's stream ended meanwhile (its waker is then the completion's to delete).
    completing: Vec<(u64, bool)>,
}

impl Waiters {
    /// Wait for completion: `waker` gets [`super::EVENT_DRAIN_DONE`] when it comes.
    pub fn register(&self, waker: Waker) -> Wait {
        let mut w = lock(&self.inner);
        if w.done {
            return Wait::AlreadyDone;
        }
        w.next_id += 1;
        let id = w.next_id;
        w.list.push((id, waker));
        Wait::Waiting(id)
    }

    /// Forget a waiter (its stream ended). `true`: its waker is never used again and the caller
    /// deletes it; `false`: the completion is committing to it right now, and deletes it after.
    pub fn unregister(&self, id: u64) -> bool {
        let mut w = lock(&self.inner);
        if let Some(at) = w.list.iter().position(|(i, _)| *i == id) {
            w.list.remove(at);
            return true;
        }
        if let Some(c) = w.completing.iter_mut().find(|(i, _)| *i == id) {
            c.1 = true;
            return false;
        }
        true
    }

    /// The drain completed: wake every waiter once; later registrations answer at once.
    ///
    /// The commits are made outside the lock: a commit may run one of Envoy's destructors on
    /// this thread (`src/ffi/ENVOY_FACTS.md` §1), and nothing that can run there may find a lock
    /// of ours held. Each waker being committed stays alive through it: a stream that ends
    /// meanwhile leaves its waker to this completion ([`Waiters::unregister`]), which deletes it
    /// with `delete` after its commit.
    pub(super) fn complete(&self, mut wake: impl FnMut(Waker), mut delete: impl FnMut(Waker)) {
        let taken = {
            let mut w = lock(&self.inner);
            w.done = true;
            let taken = std::mem::take(&mut w.list);
            w.completing = taken.iter().map(|&(id, _)| (id, false)).collect();
            taken
        };
        for &(_, waker) in &taken {
            wake(waker);
        }
        let orphaned = std::mem::take(&mut lock(&self.inner).completing);
        for (&(_, waker), &(_, gone)) in taken.iter().zip(&orphaned) {
            if gone {
                delete(waker);
            }
        }
    }
}
