//! An HTTP stream as the per-request glue reaches Envoy: [`StreamSink`] (what needs no live
//! stream), [`StreamHost`] (one live stream, inside one of its hooks) and [`Wakers`] (a stream's
//! waker, an Envoy HTTP filter scheduler, from any thread). Implemented by `ffi::http`; faked in
//! `http_filter`'s and `state`'s tests. Plain types only.

/// The body of [`StreamHost::send_internal_error`].
pub const INTERNAL_ERROR: &[u8] = b"graceful_drain: internal error\n";

/// A waker: an opaque non-zero word (an Envoy scheduler pointer in production).
pub type Waker = usize;

/// HTTP protocol family of a connection sent away. Stats and status use the same three labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    Http2,
    /// HTTP/3 or anything else Envoy may report.
    Other,
}

impl Protocol {
    /// From Envoy's protocol strings ("HTTP/1.1", "HTTP/2", ...).
    pub fn from_envoy(s: &[u8]) -> Protocol {
        match s {
            b"HTTP/1.0" | b"HTTP/1.1" => Protocol::Http1,
            b"HTTP/2" => Protocol::Http2,
            _ => Protocol::Other,
        }
    }
}

/// Streams' wakers as the drain reaches them from any thread (the drain start's scan of the
/// in-flight table, the `/drain` completion): the part of a stream's scheduler that needs no hook.
pub trait Wakers: Sync {
    /// Commit `event` to `waker` (any thread). `false` if it was refused (the module's calls
    /// into Envoy are closed once the exit was released): the event will never be delivered.
    fn commit(&self, waker: Waker, event: u64) -> bool;
    /// Delete a waker whose owner left it to the drain (any thread; once per waker).
    fn delete(&self, waker: Waker);
}

/// What the glue needs from Envoy that does not need a live stream (also usable in the destroy
/// hook, after the stream is gone).
pub trait StreamSink {
    /// Destroy a waker made by [`StreamHost::new_waker`]. Called once per waker.
    fn drop_waker(&self, waker: Waker);
    /// The request path's coarse monotonic time in nanoseconds, the clock the network filter's
    /// idle checks read too (a direct call: a stream's end pays no virtual call for it).
    fn now_nanos(&self) -> u64;
}

/// What the glue needs from Envoy for one live stream. Called only on the stream's worker thread,
/// inside one of its hooks; the module's stats it counts there go through it too
/// ([`super::extension::StatsHost`]).
pub trait StreamHost: StreamSink + super::extension::StatsHost {
    /// Look at a request header without copying it (the request path must not allocate).
    fn with_request_header<R>(&self, name: &str, f: impl FnOnce(Option<&[u8]>) -> R) -> R;
    /// A copy of a request header (control paths).
    fn request_header(&self, name: &str) -> Option<Vec<u8>> {
        self.with_request_header(name, |v| v.map(<[u8]>::to_vec))
    }
    fn send_response(&self, status: u32, headers: &[(&str, &str)], body: &[u8]);
    /// Answer 500 after a failure of the module was contained (Envoy's access log can tell it
    /// from a control answer).
    fn send_internal_error(&self) {
        self.send_response(500, &[("content-type", "text/plain")], INTERNAL_ERROR)
    }
    fn protocol(&self) -> Protocol;
    fn connection_id(&self) -> Option<u64>;
    /// `send_go_away_and_close(graceful=true)`: GOAWAY for HTTP/2, `connection: close` + close
    /// after the response for HTTP/1.1. In-flight streams complete.
    fn go_away_gracefully(&self);
    /// Resume a request whose headers hook stopped iteration.
    fn continue_decoding(&self);
    /// Identifies this stream to its connection (non-zero), for the connection to hand it back
    /// at drain start (`crate::connections::StreamMark::attach`).
    fn stream_word(&self) -> usize;
    /// A waker for this stream (an Envoy scheduler), or `None` if Envoy cannot make one.
    fn new_waker(&self) -> Option<Waker>;
    /// Commit an event to a waker (any thread). `false` if it was refused (the module's calls
    /// into Envoy are closed once the exit was released): the event will never be delivered.
    fn wake(&self, waker: Waker, event: u64) -> bool;
    /// The Envoy objects a drain started from this stream (`/drain`) reaches: every stream's
    /// waker, the extension's kick.
    fn hosts(&self) -> super::Hosts<'_>;
}
