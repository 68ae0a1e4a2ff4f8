//! The HTTP filter's life around its [`Stream`], in safe code: its config, the filter Envoy holds
//! between hooks, a worker's recycled filters, and what each hook does around the glue: contain
//! a panic (poison the filter, fail open), refuse a re-entered hook (`Busy`), defer Envoy's
//! destroy of a filter to the hook running it, and keep a wake from its connection off a stream
//! Envoy is done with. `ffi::http` only turns Envoy's pointers into a [`Filter`] lent for one
//! hook and a [`StreamHost`], and frees the filter when told to. May use: the glue, the state.

use super::{HeadersAction, Stream, StreamHost, StreamSink};
use crate::config::{DrainToken, FilterConfig, Role};
use crate::engine::shared::Shared;
use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Per-config state: one per `filter_config` in the Envoy config (per listener, in practice).
/// Its stats are the bootstrap extension's (through `Shared::count` and the stream's host).
pub struct StreamConfig {
    role: Role,
    token: Option<Arc<DrainToken>>,
    /// A data-role config loaded with the data path stepped back (the reduced surface): its
    /// streams are [`Stream::SteppedBack`].
    stepped_back: bool,
}

impl StreamConfig {
    /// Parse a filter config; `None` (logged, naming the field) when Envoy must refuse it.
    /// `counts_requests` runs for a data-role config (the module then counts requests itself).
    pub fn load(raw: &[u8], shared: &Shared) -> Option<Self> {
        let c = match FilterConfig::parse(raw) {
            Ok(c) => c,
            Err(e) => {
                log::error!("{e}");
                return None;
            }
        };
        // Read once, here: the surface is set at program init, before any config loads.
        let stepped_back = c.role == Role::Data && shared.data_path_stepped_back();
        if c.role == Role::Data && !stepped_back {
            shared.note_data_filter_loaded();
        }
        log::info!(
            "graceful_drain: filter config loaded (role={:?}{}{})",
            c.role,
            if c.drain_token.is_some() {
                ", /drain needs a token"
            } else {
                ""
            },
            if stepped_back {
                ", stepped back: the reduced surface passes every stream untouched"
            } else {
                ""
            }
        );
        Some(StreamConfig {
            role: c.role,
            token: c.drain_token.map(Arc::new),
            stepped_back,
        })
    }

    /// Whether this config's streams count requests (a data role, not stepped back): the FFI
    /// then starts the `active_requests` gauge.
    pub fn counts_requests(&self) -> bool {
        self.role == Role::Data && !self.stepped_back
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// A new stream of this config.
    fn new_stream(&self) -> Stream {
        Stream::with_surface(self.role, self.token.as_ref(), self.stepped_back)
    }
}

/// One stream's filter, as Envoy holds it between hooks. Only shared references to it are made:
/// a hook can re-enter the same filter (a local reply runs the response hooks from inside
/// `send_response`; `continue_decoding` can run the whole rest of the stream, its end and Envoy's
/// destroy of the filter included), so mutation goes through cells.
pub struct Filter {
    role: Role,
    /// Envoy's side of the stream, as a word (for a wake from its connection, which has only the
    /// filter: [`Filter::wakeable_stream`]).
    envoy_stream: usize,
    /// The inner call of a re-entered hook finds it borrowed and does nothing ([`Ran::Busy`]).
    stream: RefCell<Stream>,
    /// Envoy destroyed the filter inside one of its own hooks: that hook frees it on return.
    destroy_pending: Cell<bool>,
    /// A panic was contained in one of its hooks: its state may be half-updated, so it stops
    /// acting (the request goes on through Envoy, fail open); only the destroy hook still ends
    /// its request in the in-flight count.
    poisoned: Cell<bool>,
    /// Envoy is done with the stream: `stream_complete` ran (Envoy then destroys its filters:
    /// `ConnectionManagerImpl::doDeferredStreamDestroy`, ENVOY_FACTS.md §6). From here on no
    /// path but the destroy hook may reach it: on Envoy 1.40 that hook runs later in the worker's
    /// loop, after Envoy cleared the filter's callbacks, and a connection's wake in between must
    /// not call Envoy for it.
    envoy_done: Cell<bool>,
    /// Test-only (`cross-check`): the response ended inside one of the filter's own hooks (a
    /// response encoded from within `continue_decoding`); that hook marks it on return.
    #[cfg(feature = "cross-check")]
    xc_done_pending: Cell<bool>,
    /// The next recycled filter, while this one is on its worker's [`FreeList`].
    next_free: Option<Box<Filter>>,
}

/// How a hook ran.
#[derive(Debug, PartialEq, Eq)]
pub enum Ran<R> {
    Done(R),
    /// The filter is poisoned: nothing was done.
    Skipped,
    /// The filter is already inside one of its hooks (re-entered): nothing was done.
    Busy,
    /// A panic was contained (logged). What the fallback may know: the filter's role, and
    /// whether Envoy destroyed the stream during the hook (then nothing may be done with it).
    Panicked {
        role: Role,
        stream_gone: bool,
    },
}

/// A hook's answer, and whether the filter must be freed now that the hook's borrow of it ended
/// (Envoy destroyed it inside this hook, which was the outermost one running it).
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub struct Hooked<R> {
    pub value: R,
    pub free: bool,
}

impl<R> Hooked<R> {
    fn keep(value: R) -> Self {
        Hooked { value, free: false }
    }
}

/// Run `f`, turning a panic into `None` (logged with `what`): nothing unwinds into Envoy.
fn contain<R>(what: &str, f: impl FnOnce() -> R) -> Option<R> {
    let r = catch_unwind(AssertUnwindSafe(f));
    if r.is_err() {
        log::error!("graceful_drain: panic contained in {what}; the hook's safe fallback applies");
    }
    r.ok()
}

#[cfg(test)]
std::thread_local! {
    /// Test-only: the next hook run on this thread panics after its glue.
    pub(crate) static PANIC_AFTER_GLUE: Cell<bool> = const { Cell::new(false) };
}

impl Filter {
    /// Called when Envoy creates the filter for a new stream (`envoy_stream`: its word for the
    /// stream). The memory is a recycled filter of this worker when there is one.
    pub fn new(config: &StreamConfig, envoy_stream: usize) -> Box<Filter> {
        let filter = || Filter {
            role: config.role,
            envoy_stream,
            stream: RefCell::new(config.new_stream()),
            destroy_pending: Cell::new(false),
            poisoned: Cell::new(false),
            envoy_done: Cell::new(false),
            #[cfg(feature = "cross-check")]
            xc_done_pending: Cell::new(false),
            next_free: None,
        };
        match FreeList::take() {
            Some(mut reused) => {
                // Field by field (every field but the free list's link, None once taken): no copy
                // of the whole filter through the stack (about 20 instructions per request).
                let f = &mut *reused;
                f.role = config.role;
                f.envoy_stream = envoy_stream;
                *f.stream.get_mut() = config.new_stream();
                f.destroy_pending.set(false);
                f.poisoned.set(false);
                f.envoy_done.set(false);
                #[cfg(feature = "cross-check")]
                f.xc_done_pending.set(false);
                reused
            }
            None => Box::new(filter()),
        }
    }

    /// Run `f` with the stream (borrowed through its cell) and a host for it, `hook` naming it in
    /// a log line should it panic. Never panics.
    pub fn run<H: StreamHost, R>(
        &self,
        hook: &'static str,
        host: &H,
        shared: &Shared,
        f: impl FnOnce(&mut Stream, &H, &Shared) -> R,
    ) -> Hooked<Ran<R>> {
        if self.poisoned.get() {
            return Hooked::keep(Ran::Skipped);
        }
        let Ok(mut stream) = self.stream.try_borrow_mut() else {
            return Hooked::keep(Ran::Busy);
        };
        let ran = contain(hook, || {
            let r = f(&mut stream, host, shared);
            #[cfg(test)]
            if PANIC_AFTER_GLUE.take() {
                panic!("test: a panic after the hook's glue");
            }
            #[cfg(feature = "cross-check")]
            if self.xc_done_pending.take() {
                stream.cross_check_response_done();
            }
            r
        });
        drop(stream);
        // This call held the stream, so it is the outermost hook: a destroy deferred to it is
        // done now.
        let free = self.destroy_pending.get();
        match ran {
            Some(r) => Hooked {
                value: Ran::Done(r),
                free,
            },
            None => {
                self.poisoned.set(true);
                if self.role == Role::Data {
                    contain(hook, || shared.module_error(host));
                }
                Hooked {
                    value: Ran::Panicked {
                        role: self.role,
                        stream_gone: free,
                    },
                    free,
                }
            }
        }
    }

    /// The request headers: what the hook answers. Fails open: a data stream's failure lets the
    /// request go on; a control endpoint's is answered 500 with a reason.
    pub fn request_headers<H: StreamHost>(
        &self,
        host: &H,
        shared: &Shared,
        end_of_stream: bool,
    ) -> Hooked<HeadersAction> {
        let Hooked { value, free } =
            self.run("request_headers", host, shared, |s, host, shared| {
                s.on_request_headers(host, shared, end_of_stream)
            });
        let action = match value {
            Ran::Done(a) => a,
            Ran::Skipped | Ran::Busy => HeadersAction::Continue,
            // Fail open: the request goes on through Envoy unharmed; only our bookkeeping for it
            // is lost (counted in module_errors, logged). And a stream Envoy destroyed during the
            // hook has no one left to answer.
            Ran::Panicked {
                role: Role::Data, ..
            }
            | Ran::Panicked {
                stream_gone: true, ..
            } => HeadersAction::Continue,
            Ran::Panicked { .. } => {
                contain("request_headers fallback", || host.send_internal_error());
                HeadersAction::Stop
            }
        };
        Hooked {
            value: action,
            free,
        }
    }

    /// Whether request body and trailers must wait (the request is paused for its go-away).
    pub fn is_paused<H: StreamHost>(
        &self,
        hook: &'static str,
        host: &H,
        shared: &Shared,
    ) -> Hooked<bool> {
        let Hooked { value, free } = self.run(hook, host, shared, |s, _, _| s.is_paused());
        Hooked {
            value: value == Ran::Done(true),
            free,
        }
    }

    pub fn response_headers<H: StreamHost>(&self, host: &H, shared: &Shared) -> Hooked<()> {
        let Hooked { free, .. } = self.run("response_headers", host, shared, |s, host, shared| {
            s.on_response_headers(host, shared)
        });
        Hooked { value: (), free }
    }

    /// A scheduled event: from the stream's own scheduler, or handed back by its connection
    /// (`hook` says which).
    pub fn scheduled<H: StreamHost>(
        &self,
        hook: &'static str,
        host: &H,
        shared: &Shared,
        event: u64,
    ) -> Hooked<()> {
        let Hooked { free, .. } = self.run(hook, host, shared, |s, host, shared| {
            s.on_scheduled(host, shared, event)
        });
        Hooked { value: (), free }
    }

    /// Test-only (`cross-check`): the stream's response ended (marked on return if re-entered).
    #[cfg(feature = "cross-check")]
    pub fn cross_check_response_done<H: StreamHost>(
        &self,
        hook: &'static str,
        host: &H,
        shared: &Shared,
    ) -> Hooked<()> {
        let Hooked { value, free } =
            self.run(hook, host, shared, |s, _, _| s.cross_check_response_done());
        if value == Ran::Busy {
            self.xc_done_pending.set(true);
        }
        Hooked { value: (), free }
    }

    /// Envoy is done with the stream (`stream_complete` ran): no wake reaches it any more.
    pub fn stream_complete(&self) {
        self.envoy_done.set(true);
    }

    /// Envoy's stream word, for a wake handed back by the stream's connection; `None` once Envoy
    /// is done with the stream (its callbacks may be cleared: nothing may call Envoy for it).
    pub fn wakeable_stream(&self) -> Option<usize> {
        (!self.envoy_done.get()).then_some(self.envoy_stream)
    }

    /// Envoy destroys the filter: whether it is to be freed now ([`release`]); otherwise it was
    /// destroyed from inside one of its own hooks, which frees it when it returns.
    pub fn destroy(&self) -> bool {
        if self.stream.try_borrow().is_err() {
            self.destroy_pending.set(true);
            return false;
        }
        true
    }
}

/// Finish the filter's stream (if not already: Envoy may end a stream twice) and keep its memory
/// for the next filter of this worker. A panic finishing it is contained, and the filter then
/// left as it is (leaked, not dropped half-finished).
pub fn release(filter: Box<Filter>, sink: &impl StreamSink, shared: &Shared) {
    let finished = contain("http_filter_destroy", || {
        if let Ok(mut stream) = filter.stream.try_borrow_mut() {
            stream.finish(sink, shared);
        }
    });
    match finished {
        Some(()) => FreeList::give(filter),
        None => std::mem::forget(filter),
    }
}

/// A worker's recycled filters: a stack linked through the filters themselves (a request reuses
/// the allocation of an earlier one instead of a malloc/free pair, measured at about 250
/// instructions per request). Kept in a thread-local without drop glue, so its accesses need no
/// destructor registration; a worker keeps them for the process's life.
#[derive(Default)]
pub struct FreeList {
    head: Option<Box<Filter>>,
    len: usize,
}

/// Filters a worker keeps for reuse; beyond it they are freed (at most ~100 KiB per worker).
pub const FREE_FILTERS_MAX: usize = 1024;

thread_local! {
    static FREE_FILTERS: Cell<ManuallyDrop<FreeList>> = const {
        Cell::new(ManuallyDrop::new(FreeList { head: None, len: 0 }))
    };
}

impl FreeList {
    fn pop(&mut self) -> Option<Box<Filter>> {
        let mut f = self.head.take()?;
        self.head = f.next_free.take();
        self.len -= 1;
        Some(f)
    }

    /// Keeps `f`, or hands it back when full.
    fn push(&mut self, mut f: Box<Filter>) -> Option<Box<Filter>> {
        if self.len >= FREE_FILTERS_MAX {
            return Some(f);
        }
        f.next_free = self.head.take();
        self.head = Some(f);
        self.len += 1;
        None
    }

    /// With this worker's list (none during the thread's teardown).
    fn with<R>(f: impl FnOnce(&mut FreeList) -> R) -> Option<R> {
        FREE_FILTERS
            .try_with(|c| {
                let mut list = ManuallyDrop::into_inner(c.take());
                let r = f(&mut list);
                c.set(ManuallyDrop::new(list));
                r
            })
            .ok()
    }

    fn take() -> Option<Box<Filter>> {
        Self::with(FreeList::pop).flatten()
    }

    /// Keep `f` for reuse on this worker (or drop it).
    fn give(f: Box<Filter>) {
        // Dropped with the closure when the thread's list is gone.
        let _ = FREE_FILTERS.try_with(move |c| {
            let mut list = ManuallyDrop::into_inner(c.take());
            let full = list.push(f);
            c.set(ManuallyDrop::new(list));
            drop(full);
        });
    }

    /// How many this worker keeps.
    pub fn len() -> usize {
        Self::with(|l| l.len).unwrap_or(0)
    }

    /// Drop this worker's kept filters (a test thread ends; Miri counts what it kept as leaked).
    pub fn clear() {
        while let Some(f) = Self::take() {
            drop(f);
        }
    }
}

#[cfg(test)]
mod tests;
