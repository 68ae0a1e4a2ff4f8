//! The move of one WebSocket at a drain, as a pure state machine over the two directions'
//! followers: when to write the Close towards the client, what to do with each server write
//! after it, and what to do when the peer does not answer (docs/contributing/long-lived-streams.md, "Moving
//! a WebSocket", steps 1-5). No FFI, no clock, no allocation: the caller calls it from its
//! hooks and timers and performs the action it returns.

use super::{opcode, Follower};

/// A data frame (text, binary, or a continuation of one): its message end is a message.
const fn is_data(op: u8) -> bool {
    matches!(op, opcode::CONTINUATION | opcode::TEXT | opcode::BINARY)
}

#[cfg(test)]
mod tests;

/// A switched connection's [`Move`] and the caller's timing of it, held by the connection's
/// tracker in the place of its HTTP/1.1 state (`exchange::Tracker::websocket`): a connection
/// that is not upgraded has no byte more for it.
#[derive(Debug, Clone)]
pub struct Moving {
    pub mv: Move,
    /// The caller's next deadline (its own clock's nanos; 0: none).
    pub at: u64,
    /// The caller's step in the move (its own numbering; 0 at the switch).
    pub step: u8,
}

impl Moving {
    pub const fn new(deflate: bool) -> Self {
        Self {
            mv: Move::new(deflate),
            at: 0,
            step: 0,
        }
    }
}

/// What to do with the server->client bytes of one write hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Let the write through unchanged.
    Pass,
    /// Let it through and append the Close after it (the write ends at a frame end).
    AppendClose,
    /// Keep its first `n` bytes, then the Close; drop the rest (frames after our Close).
    SplitClose(usize),
    /// Drop the whole write: it comes after our Close (the upstream had not seen a Close yet).
    Drop,
}

/// What to do when a timer fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Nothing (yet): the server is inside a frame, or the move is over or impossible.
    Nothing,
    /// Write the unmasked Close towards the client now (every server byte so far was whole).
    InjectClose,
    /// The client did not answer and is between frames: write a masked Close towards the
    /// upstream, then close the connection (flushing).
    TellUpstreamAndClose,
    /// Close the connection (flushing).
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Not due yet.
    Following,
    /// Due: waiting for a message end, or (`any_frame`) for any frame end.
    Due { any_frame: bool },
    /// Our Close was written (or is being written by the action just returned).
    Sent,
    /// The client answered our Close.
    Answered,
    /// A Close was already on its way before ours: the connection ends by itself.
    Ending,
    /// A follower gave up before our Close: left as today.
    Lost,
}

/// One WebSocket's move; see the module doc.
#[derive(Debug, Clone)]
pub struct Move {
    to_client: Follower,
    to_server: Follower,
    st: St,
    dropped: u32,
}

impl Move {
    /// A WebSocket just switched (see [`super::switched`]).
    pub const fn new(deflate: bool) -> Self {
        Self {
            to_client: Follower::new(false, deflate),
            to_server: Follower::new(true, deflate),
            st: St::Following,
            dropped: 0,
        }
    }

    /// Our Close was written towards the client.
    pub const fn moved(&self) -> bool {
        matches!(self.st, St::Sent | St::Answered)
    }

    /// The close handshake is over on both sides: the client answered our Close, and the
    /// upstream's own Close answer (dropped) shows it read the client's.
    pub fn handshake_done(&self) -> bool {
        matches!(self.st, St::Answered) && self.to_client.close().is_some()
    }

    /// A Close was on its way before ours: the connection ends by itself.
    pub const fn ending(&self) -> bool {
        matches!(self.st, St::Ending)
    }

    /// It cannot be moved: the caller leaves the connection as today.
    pub const fn lost(&self) -> bool {
        matches!(self.st, St::Lost)
    }

    /// Server messages dropped after our Close: whole data messages (text, binary) whose last
    /// frame came after our Close, so never written to the client (control frames and the
    /// server's Close answer are not counted). RFC 6455 §5.5.1: after a Close, no data frame
    /// may be sent; the client learns nothing of these, so the caller counts them.
    pub const fn dropped_messages(&self) -> u32 {
        self.dropped
    }

    /// The client's bytes (passed on unchanged: the rest of its message and its Close reach the
    /// upstream).
    pub fn client_bytes(&mut self, bytes: &[u8]) {
        let before = self.to_server.close().is_some();
        let ok = self.to_server.feed(bytes, |_| {}).is_ok();
        let closed = !before && self.to_server.close().is_some();
        self.st = match self.st {
            St::Sent if closed => St::Answered,
            St::Following | St::Due { .. } if closed => St::Ending,
            St::Following | St::Due { .. } if !ok => St::Lost,
            st => st,
        };
    }

    /// A whole server write, in its slices (Envoy's buffer slices, in order): what to do with
    /// it, offsets counted over the whole write. When the move is due, the Close goes after the
    /// write's *last* message end (or frame end, `any_frame`), whichever slice holds it: every
    /// whole message the write holds reaches the client; only a message begun after that end
    /// is dropped (counted once its last frame comes: [`Move::dropped_messages`]).
    pub fn server_write(&mut self, slices: &[&[u8]]) -> Write {
        let St::Due { any_frame } = self.st else {
            // Not due: each slice as it comes (passed, or dropped after our Close).
            let mut out = Write::Pass;
            for c in slices {
                if self.server_bytes(c) == Write::Drop {
                    out = Write::Drop;
                }
            }
            return out;
        };
        // Up to the last frame end and message end of the whole write, as offsets into it.
        let (mut before, mut frame_end, mut message_end) = (0usize, None, None);
        for c in slices {
            let fed = self.to_client.feed(c, |e| {
                frame_end = Some(before + e.at);
                if !e.in_message {
                    message_end = Some(before + e.at);
                }
            });
            if fed.is_err() {
                self.st = St::Lost;
                return Write::Pass;
            }
            before += c.len();
        }
        if self.to_client.close().is_some() {
            // The server's own Close is on its way: ours would follow a Close.
            self.st = St::Ending;
            return Write::Pass;
        }
        match if any_frame { frame_end } else { message_end } {
            Some(k) => {
                self.st = St::Sent;
                if k == before {
                    Write::AppendClose
                } else {
                    Write::SplitClose(k)
                }
            }
            None => Write::Pass,
        }
    }

    /// One slice of a server write (a write of one slice; [`Move::server_write`] for the rule):
    /// returns what to do with it.
    pub fn server_bytes(&mut self, bytes: &[u8]) -> Write {
        if matches!(self.st, St::Due { .. }) {
            return self.server_write(&[bytes]);
        }
        match self.st {
            St::Sent | St::Answered => {
                let mut n = 0u32;
                let _ = self.to_client.feed(bytes, |e| {
                    if !e.in_message && is_data(e.opcode) {
                        n += 1
                    }
                });
                self.dropped = self.dropped.saturating_add(n);
                Write::Drop
            }
            _ => {
                let ok = self.to_client.feed(bytes, |_| {}).is_ok();
                if self.st == St::Following {
                    if !ok {
                        self.st = St::Lost;
                    } else if self.to_client.close().is_some() {
                        self.st = St::Ending;
                    }
                }
                Write::Pass
            }
        }
    }

    /// The move time (`any_frame` false), or the end of the wait for a message end (`any_frame`
    /// true): inject now if the server's bytes so far end where the Close may go.
    pub fn due(&mut self, any_frame: bool) -> Wake {
        if !matches!(self.st, St::Following | St::Due { .. }) {
            return Wake::Nothing;
        }
        let here = if any_frame {
            self.to_client.at_frame_end()
        } else {
            self.to_client.at_message_end()
        };
        if here {
            self.st = St::Sent;
            Wake::InjectClose
        } else {
            self.st = St::Due { any_frame };
            Wake::Nothing
        }
    }

    /// The bound after our Close passed and the connection is still open.
    pub fn close_timeout(&mut self) -> Wake {
        match self.st {
            St::Sent if self.to_server.at_frame_end() => Wake::TellUpstreamAndClose,
            St::Sent | St::Answered => Wake::Close,
            _ => Wake::Nothing,
        }
    }
}
