//! Follows an HTTP/2 client's frames until it opens its first stream. Pure; uses the tracker's
//! frame reader ([`crate::exchange`]).

use crate::exchange::{FrameReader, Read};

/// Follows what an HTTP/2 client sends until it opens its first stream (RFC 9113 §3.4, §4.1):
/// the 24-byte preface, then its frames, through the tracker's frame reader
/// ([`crate::exchange::FrameReader`]: headers across reads of any size, payloads skipped
/// without copying). A client that opened no stream has sent only SETTINGS, PING,
/// WINDOW_UPDATE, PRIORITY or GOAWAY frames, none larger than the default maximum frame size;
/// anything else (a HEADERS frame, or bytes that do not fit, such as a buffer fed twice) ends
/// the watch, and the connection is then treated as one that may carry a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstStream {
    /// Bytes of the preface still to skip.
    preface: u8,
    frames: FrameReader,
}

/// The client's connection preface (RFC 9113 §3.4).
const H2_PREFACE_LEN: u8 = 24;
/// SETTINGS_MAX_FRAME_SIZE's initial value (RFC 9113 §6.5.2); Envoy does not raise it by default.
const H2_DEFAULT_MAX_FRAME: u32 = 1 << 14;

impl Default for FirstStream {
    fn default() -> Self {
        FirstStream {
            preface: H2_PREFACE_LEN,
            frames: FrameReader::default(),
        }
    }
}

impl FirstStream {
    /// Feed the next bytes the client sent. `false` once the client may have opened a stream
    /// (stop feeding then); `true` while it has sent connection-level frames only.
    pub fn feed(&mut self, mut bytes: &[u8]) -> bool {
        let n = usize::from(self.preface).min(bytes.len());
        self.preface -= n as u8;
        bytes = bytes.get(n..).unwrap_or_default();
        while !bytes.is_empty() {
            let (n, read) = self.frames.read(bytes);
            bytes = bytes.get(n..).unwrap_or_default();
            let Some(Read::Head(h)) = read else { continue };
            let connection_level = match h.ty {
                // PRIORITY may name any stream and opens none.
                0x2 => true,
                // SETTINGS, PING, GOAWAY, WINDOW_UPDATE on the connection itself.
                0x4 | 0x6 | 0x7 | 0x8 => h.id == 0,
                // HEADERS opens a stream; DATA, RST_STREAM, CONTINUATION and anything unknown
                // mean a stream or bytes this does not follow.
                _ => false,
            };
            if !connection_level || h.len > H2_DEFAULT_MAX_FRAME {
                return false;
            }
        }
        true
    }
}
