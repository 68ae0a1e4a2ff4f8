//! The pieces of moving a gRPC stream at a drain (issue 65), pure: where a stream's gRPC
//! messages end in its DATA payloads ([`Messages`]), and the frames the move writes: the
//! `grpc-status: 14` trailers to the client ([`unavailable`]) and the RST_STREAM(CANCEL) that
//! tells Envoy to reset the upstream ([`rst_stream`]). Not wired into the network filter yet
//! (docs/contributing/long-lived-streams.md, "HTTP/2 streams").
//!
//! HPACK stays in step: the block [`unavailable`] writes uses only "literal header field never
//! indexed" with a literal name (RFC 7541 §6.2.3: `0001 0000`, then the name and value as plain
//! strings), which adds nothing to the client's dynamic table and reads nothing from it, and no
//! dynamic table size update. So whatever Envoy's encoder did before and does after, the
//! client's decoder and Envoy's encoder keep the same table (the property test in
//! `crate::exchange::tests::http2_grpc` decodes every byte a client receives with a real
//! decoder).

/// DATA, RST_STREAM, WINDOW_UPDATE and HEADERS frame types, flags (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
#[allow(dead_code)] // `window_update`'s, kept for a move that drops DATA (none does yet)
const WINDOW_UPDATE: u8 = 0x8;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
/// RFC 9113 §7: CANCEL, "used by the endpoint to indicate that the stream is no longer needed".
pub const CANCEL: u32 = 0x8;
/// gRPC's UNAVAILABLE (doc/statuscodes.md: "The service is currently unavailable. This is most
/// likely a transient condition, which can be corrected by retrying with a backoff").
pub const UNAVAILABLE: &str = "14";
/// The `grpc-message` of a moved stream (printable ASCII without `%`: no percent-encoding
/// needed, gRPC's PROTOCOL-HTTP2.md "Status-Message").
pub const DRAINING_MESSAGE: &str = "the gateway is draining: retry on another instance";

/// Where the gRPC messages of one direction of a stream end: each is a 5-byte prefix (a
/// compressed flag, a 32-bit big-endian length) and that many bytes (gRPC's
/// PROTOCOL-HTTP2.md "Length-Prefixed-Message"), laid over DATA frames of any size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Messages {
    /// Prefix bytes read of the next message (0-4; 5 never stays).
    have: u8,
    /// The length being read (prefix bytes 1-4), then the message bytes still to come.
    left: u32,
    /// Inside a message's body.
    in_body: bool,
}

impl Messages {
    /// DATA payload bytes of the stream, in order, any split.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.in_body {
                let n = (self.left as usize).min(bytes.len());
                self.left -= n as u32;
                bytes = bytes.get(n..).unwrap_or_default();
                if self.left == 0 {
                    self.in_body = false;
                }
                continue;
            }
            let Some((&b, rest)) = bytes.split_first() else {
                return;
            };
            bytes = rest;
            // The compressed flag, then the length's four bytes.
            self.left = if self.have == 0 {
                0
            } else {
                self.left << 8 | u32::from(b)
            };
            self.have += 1;
            if self.have == 5 {
                self.have = 0;
                // An empty message ends with its prefix.
                self.in_body = self.left > 0;
            }
        }
    }

    /// Between two messages: a status written now follows a whole message.
    pub fn at_boundary(&self) -> bool {
        self.have == 0 && !self.in_body
    }
}

fn frame_head(out: &mut Vec<u8>, len: usize, ty: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[ty, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// RFC 7541 §5.1: `value` with an `n`-bit prefix, the prefix's other bits `first`.
fn integer(out: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A field as "literal header field never indexed — new name" (RFC 7541 §6.2.3), both strings
/// plain (no Huffman): nothing read from or added to the decoder's table.
fn never_indexed(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x10);
    integer(out, 0, 7, name.len());
    out.extend_from_slice(name.as_bytes());
    integer(out, 0, 7, value.len());
    out.extend_from_slice(value.as_bytes());
}

/// The HEADERS frame (END_STREAM, END_HEADERS) that ends gRPC stream `stream` towards the
/// client with `grpc-status: 14` and [`DRAINING_MESSAGE`]: trailers after the response's
/// headers, or, when no response headers were written (`headers_sent` false), a
/// Trailers-Only response (`:status 200`, `content-type: application/grpc`, the status:
/// PROTOCOL-HTTP2.md "Trailers-Only"). One frame: the block is far below any peer's
/// SETTINGS_MAX_FRAME_SIZE (16 384 at least, RFC 9113 §6.5.2).
pub fn unavailable(stream: u32, headers_sent: bool) -> Vec<u8> {
    let mut block = Vec::with_capacity(128);
    if !headers_sent {
        never_indexed(&mut block, ":status", "200");
        never_indexed(&mut block, "content-type", "application/grpc");
    }
    never_indexed(&mut block, "grpc-status", UNAVAILABLE);
    never_indexed(&mut block, "grpc-message", DRAINING_MESSAGE);
    let mut out = Vec::with_capacity(9 + block.len());
    frame_head(
        &mut out,
        block.len(),
        HEADERS,
        END_STREAM | END_HEADERS,
        stream,
    );
    out.extend_from_slice(&block);
    out
}

/// An empty DATA frame with END_STREAM on `stream` (RFC 9113 §6.1): ends an SSE response
/// towards its client at an event boundary (an empty DATA frame costs no flow-control credit).
pub fn end_of_data(stream: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    frame_head(&mut out, 0, DATA, END_STREAM, stream);
    out
}

/// RST_STREAM(`code`) for `stream` (RFC 9113 §6.4).
pub fn rst_stream(stream: u32, code: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(13);
    frame_head(&mut out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&code.to_be_bytes());
    out
}

/// WINDOW_UPDATE of `increment` (1 to 2^31-1) for `stream` (0: the connection; RFC 9113
/// §6.9): credit for DATA bytes the module dropped, so the sender's window does not leak.
#[allow(dead_code)] // built and tested; no move drops DATA yet
pub fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(13);
    frame_head(&mut out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & 0x7fff_ffff).to_be_bytes());
    out
}
