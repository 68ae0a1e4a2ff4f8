//! What the exchange tracker tells the long-lived streams' moves about one HTTP/2 connection
//! (which streams are gRPC or SSE, and whether a move may write now), and the frames a move
//! writes (built in `http2::grpc`, docs/contributing/stream-edits.md edits 6 and 7).

use super::http2;

/// The `grpc-status: 14` trailers that end gRPC stream `id` towards its client at its move
/// (`http2::grpc::unavailable`, after its response headers).
pub fn grpc_unavailable(id: u32) -> Vec<u8> {
    http2::grpc::unavailable(id, true)
}

/// The empty DATA frame with END_STREAM that ends SSE stream `id` towards its client at an
/// event boundary at its move (`http2::grpc::end_of_data`).
pub fn sse_end_of_stream(id: u32) -> Vec<u8> {
    http2::grpc::end_of_data(id)
}

/// The Trailers-Only response (`:status 200`, `application/grpc`, `grpc-status: 14`) that ends
/// gRPC stream `id` at its move when no response headers were written on it.
pub fn grpc_trailers_only(id: u32) -> Vec<u8> {
    http2::grpc::unavailable(id, false)
}

/// RST_STREAM(CANCEL) for stream `id`, towards Envoy: it resets the upstream's stream.
pub fn rst_stream_cancel(id: u32) -> Vec<u8> {
    http2::grpc::rst_stream(id, http2::grpc::CANCEL)
}
/// HTTP/2: the gRPC streams a move may end now ([`super::Tracker::h2_grpc_streams`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrpcStreams {
    /// Not followed on this connection: nothing to move, ever.
    Off,
    /// Followed, but nothing may be written now (a frame or header block under way).
    NotNow,
    /// These streams, now.
    Now(Vec<GrpcStream>),
}

/// One open gRPC stream ([`GrpcStreams::Now`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcStream {
    pub id: u32,
    /// Its response's bytes so far end between two whole messages.
    pub whole: bool,
    /// Its `:path` is under a resumable prefix.
    pub resumable: bool,
    /// Not gRPC: an SSE response (200 to a `GET`, no `content-encoding`), `whole` when its
    /// bytes so far end at an event boundary; `resumable` is set (every one is moved).
    pub sse: bool,
    /// A request under a resumable prefix with no response block yet (`whole`, `resumable`
    /// set): ended with a Trailers-Only response ([`grpc_trailers_only`]).
    pub no_response: bool,
}

/// HTTP/2: what a stream is, from its decoded header blocks ([`super::Tracker::h2_stream_kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum H2Kind {
    /// No final response header block yet.
    NoResponse,
    /// A gRPC response (`content-type: application/grpc...`); `resumable`: its `:path` starts
    /// with a configured resumable prefix.
    Grpc { resumable: bool },
    /// A `text/event-stream` response; `movable`: 200 to a `GET`, no `content-encoding` (the
    /// HTTP/1.1 rule, docs/contributing/stream-edits.md).
    Sse { movable: bool },
    /// Any other response.
    Other,
}
