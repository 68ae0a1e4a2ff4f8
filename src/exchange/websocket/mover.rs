//! The move of one WebSocket at a drain, as a pure state machine over the two directions'
//! followers: when to write the Close towards the client, what to do with each server write
//! after it, and what to do when the peer does not answer (docs/long-lived-streams.md, "Moving
//! a WebSocket", steps 1-5). No FFI, no clock, no allocation: the caller calls it from its
//! hooks and timers and performs the action it returns.

use super::Follower;

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

    /// Server frames dropped after our Close (counted, they were sent to a closing socket).
    pub const fn dropped_frames(&self) -> u32 {
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

    /// A server write; returns what to do with it.
    pub fn server_bytes(&mut self, bytes: &[u8]) -> Write {
        match self.st {
            St::Sent | St::Answered => {
                let mut n = 0u32;
                let _ = self.to_client.feed(bytes, |_| n += 1);
                self.dropped = self.dropped.saturating_add(n);
                Write::Drop
            }
            St::Following | St::Ending | St::Lost => {
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
            St::Due { any_frame } => {
                // Frames seen in all, and up to the last frame end and message end.
                let (mut n, mut frame_end, mut message_end) = (0u32, None, None);
                let fed = self.to_client.feed(bytes, |e| {
                    n += 1;
                    frame_end = Some((e.at, n));
                    if !e.in_message {
                        message_end = Some((e.at, n));
                    }
                });
                if fed.is_err() {
                    self.st = St::Lost;
                    return Write::Pass;
                }
                if self.to_client.close().is_some() {
                    // The server's own Close is on its way: ours would follow a Close.
                    self.st = St::Ending;
                    return Write::Pass;
                }
                match if any_frame { frame_end } else { message_end } {
                    Some((k, upto)) => {
                        self.st = St::Sent;
                        self.dropped = n - upto;
                        if k == bytes.len() {
                            Write::AppendClose
                        } else {
                            Write::SplitClose(k)
                        }
                    }
                    None => Write::Pass,
                }
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
