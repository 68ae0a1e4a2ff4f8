//! The write side of a followed connection: feeding the server's bytes to the tracker, and the
//! `connection: close` put on (or taken off) an HTTP/1.1 response while a drain is under way.
//! May use what `tracking` may.

use super::events::on_event;
use super::*;
use crate::connections::Conn;
use crate::engine::state::Shared;

/// What [`Tracking::close_to_insert`] decided for a write.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    /// Replace the write's first `insert` bytes (its status line) by themselves and
    /// [`CONNECTION_CLOSE`] (0: leave the write as it is).
    pub insert: usize,
    /// The bytes `from..to` of the write are a `connection: close` line to take out: requests
    /// pipelined behind this response were received, and Envoy will answer them after it.
    pub strip: Option<(usize, usize)>,
    /// The connection was counted as sent away now (its first telling, whoever tells it).
    pub counted: bool,
}

/// A response's status line, copied from a write ([`Tracking::on_write_bytes`]).
#[derive(Debug, Clone, Copy)]
pub struct StatusLine {
    bytes: [u8; MAX_STATUS_LINE],
    len: usize,
}

impl StatusLine {
    pub fn bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

/// How the glue rewrites the start of a write ([`Tracking::on_write_bytes`]): replace its first
/// [`HeadEdit::replaced`] bytes by [`HeadEdit::pieces`], in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadEdit {
    /// Put [`CONNECTION_CLOSE`] after the status line (a copy of the write's first bytes).
    InsertClose(StatusLine),
    /// Take out the head's `connection: close` line: `kept` is a copy of the bytes before it,
    /// `through` the offset just after it.
    StripClose { kept: Vec<u8>, through: usize },
}

impl PartialEq for StatusLine {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}
impl Eq for StatusLine {}

impl HeadEdit {
    /// The bytes at the write's start that the edit replaces.
    pub fn replaced(&self) -> usize {
        match self {
            HeadEdit::InsertClose(line) => line.len,
            HeadEdit::StripClose { through, .. } => *through,
        }
    }

    /// What replaces them, in order.
    pub fn pieces(&self) -> [&[u8]; 2] {
        match self {
            HeadEdit::InsertClose(line) => [line.bytes(), CONNECTION_CLOSE],
            HeadEdit::StripClose { kept, .. } => [kept, b""],
        }
    }
}

/// What [`Tracking::close_to_insert`] asks the glue to put after a response's status line.
pub const CONNECTION_CLOSE: &[u8] = b"connection: close\r\n";
pub(super) const CLOSE_HEADER: &[u8] = b"\nconnection: close\r";
/// A status line longer than this is left alone (Envoy writes `HTTP/1.1 200 OK`).
pub const MAX_STATUS_LINE: usize = 128;

impl Tracking {
    /// Server bytes ahead that the tracker skips unread: a write of at most this many can be
    /// fed as [`crate::exchange::unread`] bytes.
    pub fn server_unread_ahead(&self) -> u64 {
        self.tracker.server_unread_ahead()
    }

    /// A write towards the client: `chunks` are this write's bytes (`None`: not given).
    pub fn on_write<'a>(
        &mut self,
        chunks: Option<impl Iterator<Item = &'a [u8]>>,
        conn: &Conn,
        shared: &Shared,
        now: impl Fn() -> u64,
    ) -> Fed {
        let mut fed = Fed::default();
        let Some(chunks) =
            self.followed(chunks, "Envoy gave no write buffer", conn, shared, &mut fed)
        else {
            return fed;
        };
        for bytes in chunks {
            let shadow = !self.counts();
            let tickets = &mut self.tickets;
            self.tracker.server(bytes, &mut |ev, t| {
                on_event(ev, t, tickets, shadow, conn, shared, &now, &mut fed)
            });
        }
        self.after_feed(conn, shared, &mut fed);
        fed
    }

    /// A write hook's first step, `len` bytes written: fed by their length alone when the
    /// tracker would skip them unread (the rest of a body, an HTTP/2 frame's payload), without
    /// Envoy's two buffer callbacks (about 300 instructions): `true`. Else (`false`) the glue
    /// fetches the write's slices for [`Tracking::on_write_bytes`].
    pub fn on_write_len(
        &mut self,
        len: usize,
        conn: &Conn,
        shared: &Shared,
        now: impl Fn() -> u64,
    ) -> bool {
        if self.server_unread_ahead() < len as u64 {
            return false;
        }
        self.on_write(Some(crate::exchange::unread(len)), conn, shared, now);
        true
    }

    /// A write hook's bytes (`chunks()`: the write's slices, `None` if Envoy could not give
    /// them): fed, after [`Tracking::close_to_insert`] looked at its first slice. Returns how to
    /// edit the write's start, with copies of the bytes it keeps, when this response gets or
    /// loses `connection: close` (the glue edits the write once the slices are released).
    pub fn on_write_bytes<'a, I: Iterator<Item = &'a [u8]>>(
        &mut self,
        chunks: impl Fn() -> Option<I>,
        conn: &Conn,
        shared: &Shared,
        now: impl Fn() -> u64,
    ) -> Option<HeadEdit> {
        // Nothing to tell before a drain (`close_to_insert`): its first slice is not looked at.
        let edit = if shared.is_draining() {
            self.head_edit(&chunks, conn, shared)
        } else {
            None
        };
        self.on_write(chunks(), conn, shared, now);
        edit
    }

    /// During a drain, how [`Tracking::close_to_insert`] has the start of this write (`chunks()`)
    /// edited, with copies of the bytes it keeps.
    fn head_edit<'a, I: Iterator<Item = &'a [u8]>>(
        &mut self,
        chunks: &impl Fn() -> Option<I>,
        conn: &Conn,
        shared: &Shared,
    ) -> Option<HeadEdit> {
        let first = chunks().and_then(|mut c| c.next());
        let told = self.close_to_insert(first, conn, shared);
        first.and_then(|b| {
            if let Some((from, to)) = told.strip {
                return Some(HeadEdit::StripClose {
                    kept: b.get(..from)?.to_vec(),
                    through: to,
                });
            }
            let b = b.get(..told.insert).filter(|b| !b.is_empty())?;
            let mut line = StatusLine {
                bytes: [0; MAX_STATUS_LINE],
                len: b.len(),
            };
            line.bytes.get_mut(..b.len())?.copy_from_slice(b);
            Some(HeadEdit::InsertClose(line))
        })
    }

    /// Before a write is fed: during a drain, a response head that starts this write on an
    /// HTTP/1.1 connection not told yet, and carrying no `connection: close` of its own, gets
    /// one, after its status line (the connection manager does this itself only once Envoy's
    /// health checks fail: after `readiness_failure_delay`, and never without `admin_address`).
    /// Counts the connection as sent away (once, whoever said it). `first`: the write's first
    /// slice.
    ///
    /// Unless requests are pipelined behind this response ([`Tracker::pipelined`]: bytes of
    /// them were read, so Envoy's codec holds them): Envoy answers those after this one, its
    /// drain-close on every response included (measured: three pipelined POSTs at a drain, all
    /// three proxied, each response with `connection: close`). RFC 9112 §9.6: a client closes
    /// after a response carrying `close`, and the server must process no request after it; a
    /// strict client would take the answered ones for lost. So such a response carries no
    /// `close` (Envoy's own line is taken out, `Told::strip`), and the close goes on the response
    /// to the last request received. (Bytes that arrive after that response was written are
    /// not followed here: Envoy closes the connection once that response is done and its codec
    /// holds nothing more.)
    pub fn close_to_insert(&mut self, first: Option<&[u8]>, conn: &Conn, shared: &Shared) -> Told {
        let no = Told::default();
        if self.told_close
            || !self.counts()
            || self.lost
            || !shared.is_draining()
            || !self.tracker.awaiting_response_head()
        {
            return no;
        }
        let behind = self.tracker.pipelined();
        let Some(head) = first else {
            return no;
        };
        // A final response (not 1xx), its status line whole in this slice.
        if !head.starts_with(b"HTTP/1.1 ") || head.get(9) == Some(&b'1') {
            return no;
        }
        let Some(lf) = head.iter().take(MAX_STATUS_LINE).position(|&b| b == b'\n') else {
            return no;
        };
        let end = head
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(head.len(), |e| e + 4);
        let close_line = head[..end]
            .windows(CLOSE_HEADER.len())
            .position(|w| w.eq_ignore_ascii_case(CLOSE_HEADER));
        if behind {
            // The line from after its LF through its CRLF (`\nconnection: close\r` then `\n`).
            let strip = close_line
                .map(|at| (at + 1, at + CLOSE_HEADER.len() + 1))
                .filter(|&(_, to)| head.get(to - 1) == Some(&b'\n'));
            return Told { strip, ..no };
        }
        self.told_close = true;
        Told {
            insert: if close_line.is_some() { 0 } else { lf + 1 },
            strip: None,
            counted: shared
                .send_away_once(Some(conn.id), || crate::engine::state::Protocol::Http1)
                .is_some(),
        }
    }
}
