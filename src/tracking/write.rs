//! The write side of a followed connection: feeding the server's bytes to the tracker, and the
//! `connection: close` put on an HTTP/1.1 response while a drain is under way (never taken off:
//! Envoy writes it when it will close, and the requests behind it are held back, `read`).
//! May use what `tracking` may.

use super::events::on_event;
use super::*;
use crate::connections::Conn;
use crate::engine::shared::Shared;
use crate::host::extension::StatsHost;

/// What [`TrackedConnection::close_to_insert`] decided for a write.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    /// Replace the write's first `insert` bytes (its status line) by themselves and
    /// [`CONNECTION_CLOSE`] (0: leave the write as it is).
    pub insert: usize,
    /// The connection was counted as sent away now (its first telling, whoever tells it).
    pub counted: bool,
}

/// A response's status line, copied from a write ([`TrackedConnection::on_write_bytes`]).
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

/// How the glue rewrites the start of a write ([`TrackedConnection::on_write_bytes`]): replace its first
/// [`HeadEdit::replaced`] bytes by [`HeadEdit::pieces`], in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadEdit {
    /// Put [`CONNECTION_CLOSE`] after the status line (a copy of the write's first bytes).
    InsertClose(StatusLine),
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
        }
    }

    /// What replaces them, in order.
    pub fn pieces(&self) -> [&[u8]; 2] {
        match self {
            HeadEdit::InsertClose(line) => [line.bytes(), CONNECTION_CLOSE],
        }
    }
}

/// What [`TrackedConnection::close_to_insert`] asks the glue to put after a response's status line.
pub const CONNECTION_CLOSE: &[u8] = b"connection: close\r\n";
pub(super) const CLOSE_HEADER: &[u8] = b"\nconnection: close\r";
/// A status line longer than this is left alone (Envoy writes `HTTP/1.1 200 OK`).
pub const MAX_STATUS_LINE: usize = 128;

impl TrackedConnection {
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
        stats: &impl StatsHost,
        now: impl Fn() -> u64,
    ) -> Fed {
        let mut fed = Fed::default();
        let Some(chunks) = self.followed(
            chunks,
            "Envoy gave no write buffer",
            conn,
            shared,
            stats,
            &mut fed,
        ) else {
            return fed;
        };
        for bytes in chunks {
            let shadow = !self.counts();
            let tickets = &mut self.tickets;
            self.tracker.server(bytes, &mut |ev, t| {
                on_event(ev, t, tickets, shadow, conn, shared, stats, &now, &mut fed)
            });
        }
        self.after_feed(conn, shared, stats, &mut fed);
        fed
    }

    /// A write hook's first step, `len` bytes written: fed by their length alone when the
    /// tracker would skip them unread (the rest of a body, an HTTP/2 frame's payload), without
    /// Envoy's two buffer callbacks (about 300 instructions): `true`. Else (`false`) the glue
    /// fetches the write's slices for [`TrackedConnection::on_write_bytes`].
    pub fn on_write_len(
        &mut self,
        len: usize,
        conn: &Conn,
        shared: &Shared,
        stats: &impl StatsHost,
        now: impl Fn() -> u64,
    ) -> bool {
        if self.server_unread_ahead() < len as u64 {
            return false;
        }
        self.on_write(Some(crate::exchange::unread(len)), conn, shared, stats, now);
        true
    }

    /// A write hook's bytes (`chunks()`: the write's slices, `None` if Envoy could not give
    /// them): fed, after [`TrackedConnection::close_to_insert`] looked at its first slice. Returns how to
    /// edit the write's start, with copies of the bytes it keeps, when this response gets or
    /// loses `connection: close` (the glue edits the write once the slices are released).
    pub fn on_write_bytes<'a, I: Iterator<Item = &'a [u8]>>(
        &mut self,
        chunks: impl Fn() -> Option<I>,
        conn: &Conn,
        shared: &Shared,
        stats: &impl StatsHost,
        now: impl Fn() -> u64,
    ) -> Option<HeadEdit> {
        // Nothing to tell before a drain (`close_to_insert`): its first slice is not looked at.
        let edit = if shared.is_draining() || self.held() {
            self.head_edit(&chunks, conn, shared, stats, &now)
        } else {
            None
        };
        // A response head of Envoy's own with `close` (its drain-close, or its connection
        // manager closing: `drain_timeout`, `max_requests_per_connection`): nothing behind its
        // request may be processed either.
        let watch = (!self.held()
            && self.counts()
            && !self.tracker.will_close()
            && self.tracker.awaiting_response_head()
            && self.tracker.complete_unanswered() > 0)
            .then(|| self.unanswered_id(0));
        self.on_write(chunks(), conn, shared, stats, &now);
        if let Some(last) = watch {
            if self.tracker.will_close() && !self.lost && !self.tracker.tunnel() {
                self.hold_behind(last, conn, shared, &now);
            }
        }
        edit
    }

    /// During a drain, how [`TrackedConnection::close_to_insert`] has the start of this write (`chunks()`)
    /// edited, with copies of the bytes it keeps.
    fn head_edit<'a, I: Iterator<Item = &'a [u8]>>(
        &mut self,
        chunks: &impl Fn() -> Option<I>,
        conn: &Conn,
        shared: &Shared,
        stats: &impl StatsHost,
        now: &impl Fn() -> u64,
    ) -> Option<HeadEdit> {
        let first = chunks().and_then(|mut c| c.next());
        let mut told = self.close_to_insert(first, conn, shared, stats);
        if told.insert > 0 && first.is_some_and(|f| !f.windows(4).any(|w| w == b"\r\n\r\n")) {
            // The head goes on past the first slice: Envoy's own `close` may be in a later one
            // (it is never doubled). A copy of the write, once per connection at a drain.
            let write: Vec<u8> = chunks().into_iter().flatten().flatten().copied().collect();
            let end = write
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map_or(write.len(), |e| e + 4);
            if write[..end]
                .windows(CLOSE_HEADER.len())
                .any(|w| w.eq_ignore_ascii_case(CLOSE_HEADER))
            {
                told.insert = 0;
            }
        }
        if self.told_close() && !self.held() && self.tracker.complete_unanswered() > 0 {
            // This response carries `close`: nothing behind its request reaches Envoy.
            self.hold_behind(self.unanswered_id(0), conn, shared, now);
        }
        first.and_then(|b| {
            let b = b.get(..told.insert).filter(|b| !b.is_empty())?;
            let mut line = StatusLine {
                bytes: [0; MAX_STATUS_LINE],
                len: b.len(),
            };
            line.bytes.get_mut(..b.len())?.copy_from_slice(b);
            Some(HeadEdit::InsertClose(line))
        })
    }

    /// Before a write is fed: during a drain, a final response head that starts this write on
    /// an HTTP/1.1 connection not told yet, and carrying no `connection: close` of its own, gets
    /// one, after its status line (the connection manager does this itself only once Envoy's
    /// health checks fail: after `readiness_failure_delay`, and never without `admin_address`).
    /// Counts the connection as sent away (once, whoever said it). `first`: the write's first
    /// slice.
    ///
    /// Requests pipelined behind this response are no reason to leave it out: they are held
    /// back (`read`: never given to Envoy, or taken out of its read buffer before its codec
    /// reads them on), so the `close` is true, and RFC 9112 §9.6 holds (nothing processed after
    /// it). Envoy's own `close` is never taken out: it writes the same line when its connection
    /// manager is `Closing` and closes after the response without reading what is behind.
    ///
    /// Nothing is edited where the bytes do not prove it safe (fail open): a status line not
    /// whole in the first slice or not `HTTP/1.1`, an interim (1xx) response (the final one
    /// follows), a tunnel (a 101, or a 2xx to CONNECT: Envoy puts no `close` there either, and
    /// the tunnel is not sent away). Where requests are held back behind this response, that is
    /// an anomaly (the client may wait for their answers), counted and logged.
    pub fn close_to_insert(
        &mut self,
        first: Option<&[u8]>,
        conn: &Conn,
        shared: &Shared,
        stats: &impl StatsHost,
    ) -> Told {
        let no = Told::default();
        if self.told_close()
            || !self.counts()
            || self.lost
            || !(shared.is_draining() || self.held())
            || !self.tracker.awaiting_response_head()
        {
            return no;
        }
        let Some(head) = first.filter(|h| h.starts_with(b"HTTP/1.1 ")) else {
            return self.not_told(
                conn,
                shared,
                stats,
                "not an HTTP/1.1 status line in the first slice",
            );
        };
        // A final response (not 1xx, which includes a 101), not a tunnel to CONNECT.
        if head.get(9) == Some(&b'1') {
            return no;
        }
        if head.get(9) == Some(&b'2') && self.tracker.answering_connect() {
            return no;
        }
        if self.tracker.tunnel_request_behind() {
            // A CONNECT or upgrade read behind this response is not held back (`read`): Envoy
            // answers it after this one, so a `close` here would not be true (RFC 9112 §9.6).
            return self.not_told(
                conn,
                shared,
                stats,
                "a CONNECT or upgrade is pipelined behind it",
            );
        }
        let Some(lf) = head.iter().take(MAX_STATUS_LINE).position(|&b| b == b'\n') else {
            return self.not_told(
                conn,
                shared,
                stats,
                "the status line is not whole in the first slice",
            );
        };
        let end = head
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(head.len(), |e| e + 4);
        let close_line = head[..end]
            .windows(CLOSE_HEADER.len())
            .position(|w| w.eq_ignore_ascii_case(CLOSE_HEADER));
        self.close |= TOLD_CLOSE;
        Told {
            insert: if close_line.is_some() { 0 } else { lf + 1 },
            counted: shared
                .send_away_once(stats, Some(conn.id), || {
                    crate::engine::shared::Protocol::Http1
                })
                .is_some(),
        }
    }

    /// A response head that cannot carry `close` (see [`TrackedConnection::close_to_insert`]): nothing
    /// to say, unless requests were held back behind it.
    #[cold]
    fn not_told(&self, conn: &Conn, shared: &Shared, stats: &impl StatsHost, why: &str) -> Told {
        if self.held() {
            shared.count(stats, crate::engine::shared::Stat::ModuleErrors);
            log::warn!(
                "graceful_drain: requests pipelined on connection {} were held back, but its \
                 response cannot be told connection: close ({why}): the client may wait for them",
                conn.id
            );
        }
        Told::default()
    }
}
