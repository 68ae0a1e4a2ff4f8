//! Both directions of an HTTP/1.1 connection tied together: the requests read and not yet
//! answered (a FIFO of their flags), tunnels, and the events reported to the tracker. Uses
//! only `exchange`'s own types.

use super::*;

/// The flags of the requests read and not answered yet, oldest first.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::exchange) struct Fifo {
    pub(in crate::exchange) flags: [u8; MAX_PIPELINED],
    pub(in crate::exchange) head: u8,
    pub(in crate::exchange) len: u8,
}

impl Fifo {
    pub(in crate::exchange) fn push(&mut self, f: u8) -> bool {
        if usize::from(self.len) >= MAX_PIPELINED {
            return false;
        }
        let at = (usize::from(self.head) + usize::from(self.len)) % MAX_PIPELINED;
        if let Some(slot) = self.flags.get_mut(at) {
            *slot = f;
        }
        self.len += 1;
        true
    }

    pub(in crate::exchange) fn front(&self) -> Option<u8> {
        (self.len > 0).then(|| self.flags.get(usize::from(self.head)).copied().unwrap_or(0))
    }

    pub(in crate::exchange) fn pop(&mut self) {
        if self.len > 0 {
            self.head = ((usize::from(self.head) + 1) % MAX_PIPELINED) as u8;
            self.len -= 1;
        }
    }
}

#[derive(Debug, Clone, Default)]
pub(in crate::exchange) struct H1 {
    pub(in crate::exchange) req: Half,
    pub(in crate::exchange) resp: Half,
    pub(in crate::exchange) fifo: Fifo,
    pub(in crate::exchange) hints: HintBuf,
    /// A CONNECT or upgrade request waits for its response to say whether a tunnel follows.
    pub(in crate::exchange) verdict_pending: bool,
    /// The client sent bytes while waiting (tunnel data or a next request; not kept).
    pub(in crate::exchange) waited: bool,
}

// Why `Wait` does not buffer: a client may send tunnel data right behind a CONNECT or an
// upgrade request, before it knows the answer. Parsing those bytes as a request would lose
// the framing if a tunnel opens; keeping them would allocate. So they are only noticed, and
// if the answer is not a tunnel (they were the next request after all) the tracker gives up.

impl H1 {
    /// Client bytes, the first at client offset `at`: returns how many were used and the event
    /// that stopped it (`None`: all used).
    pub(in crate::exchange) fn client(
        &mut self,
        bytes: &[u8],
        ctx: &mut Ctx,
        at: u64,
    ) -> (usize, Option<Event>) {
        let mut off = 0;
        self.hints.wanted = !ctx.hints_off;
        loop {
            let rest = bytes.get(off..).unwrap_or_default();
            match self.req.st {
                St::Wait => {
                    self.waited |= !rest.is_empty();
                    return (bytes.len(), None);
                }
                St::Discard => return (bytes.len(), None),
                _ => {}
            }
            let (n, mile) = self.req.parse(true, &mut self.hints, rest);
            off += n;
            match mile {
                Mile::More => return (off, None),
                Mile::Bad => return (off, lose(ctx)),
                Mile::Head => return (off, self.request_head(ctx, at + off as u64)),
                Mile::Body => self.request_done(ctx, at + off as u64),
            }
        }
    }

    /// A request head ended just before client offset `end`.
    pub(in crate::exchange) fn request_head(&mut self, ctx: &mut Ctx, end: u64) -> Option<Event> {
        let f = self.req.facts;
        let te = f & F_TE != 0;
        // RFC 9112 §6.1, §6.3: both is smuggling-shaped; a request coding not ending in
        // chunked has no length. Envoy refuses both.
        if te && (f & F_CL != 0 || f & F_CHUNKED == 0) {
            return lose(ctx);
        }
        let mut flags = 0;
        if f & F_HEAD != 0 {
            flags |= R_HEAD;
        }
        if f & F_CONNECT != 0 {
            flags |= R_CONNECT;
        }
        if f & F_UPGRADE != 0 {
            flags |= R_UPGRADE;
        }
        if f & F_GET != 0 {
            flags |= R_GET;
        }
        if !self.fifo.push(flags) {
            return lose(ctx);
        }
        if f & F_CLOSE != 0 || (f & F_HTTP10 != 0 && f & F_KEEPALIVE == 0) {
            ctx.will_close = true;
        }
        if flags & (R_CONNECT | R_UPGRADE) != 0 {
            self.verdict_pending = true;
            self.waited = false;
        }
        // A head begun while its hints were not wanted has none (`Tracker::want_hints`).
        self.hints.valid = self.hints.on;
        match self.req.body(te) {
            Some(st) => self.req.st = st,
            None => self.request_done(ctx, end),
        }
        Some(Event::Started(seq(ctx.started)))
    }

    /// A request ended just before client offset `end`: where Envoy's codec may stop.
    pub(in crate::exchange) fn request_done(&mut self, ctx: &mut Ctx, end: u64) {
        ctx.ends.push(u64::from(ctx.requests_done), end);
        ctx.requests_done = ctx.requests_done.wrapping_add(1);
        self.req.st = if self.verdict_pending {
            St::Wait
        } else {
            St::Start
        };
    }

    /// Server bytes: as [`H1::client`].
    pub(in crate::exchange) fn server(
        &mut self,
        bytes: &[u8],
        ctx: &mut Ctx,
    ) -> (usize, Option<Event>) {
        let mut off = 0;
        // Where a response head began in these bytes (a 101's head is read again, whole, for
        // its `Upgrade` and extensions: `switched_head`).
        let mut head_from = None;
        loop {
            if self.resp.st == St::Decide {
                let ev = self.decide(ctx);
                if ctx.tunnel {
                    // The bytes after the head are the tunnel's: the tracker hands them on.
                    return (off, None);
                }
                if ev.is_some() {
                    return (off, ev);
                }
            }
            if self.resp.st == St::Start {
                head_from = Some(off);
            }
            let rest = bytes.get(off..).unwrap_or_default();
            let (n, mile) = self.resp.parse(false, &mut self.hints, rest);
            off += n;
            match mile {
                Mile::More => return (off, None),
                Mile::Bad => return (off, lose(ctx)),
                Mile::Head => {
                    if self.resp.status == 101 {
                        let head = head_from.and_then(|from| bytes.get(from..off));
                        self.resp.facts |= switched_head(head);
                    }
                    if self.resp.facts & F_SSE != 0 {
                        let head = head_from.and_then(|from| bytes.get(from..off));
                        let get = self.fifo.front().is_some_and(|r| r & R_GET != 0);
                        if !movable_sse(get, head) {
                            self.resp.facts &= !F_SSE;
                        }
                    }
                    self.resp.st = St::Decide;
                    if self.fifo.front().is_none() {
                        // Envoy answers some requests before their head is complete (400,
                        // 413, 431) and then closes: that answer is the partial request's.
                        if !self.req.st.in_head() || !self.fifo.push(0) {
                            return (off, lose(ctx));
                        }
                        self.req.st = St::Discard;
                        self.hints.valid = false;
                        ctx.will_close = true;
                        return (off, Some(Event::Started(seq(ctx.started))));
                    }
                }
                Mile::Body => return (off, Some(self.response_done(ctx))),
            }
        }
    }

    /// A response head is complete: interim, tunnel, or the final response and its body.
    pub(in crate::exchange) fn decide(&mut self, ctx: &mut Ctx) -> Option<Event> {
        let s = self.resp.status;
        let flags = self.fifo.front().unwrap_or(0);
        let f = self.resp.facts;
        self.resp.st = St::Start;
        if (100..200).contains(&s) && s != 101 {
            // 100 Continue, 103 Early Hints: the same request's final response follows.
            return None;
        }
        if s == 101 || (flags & R_CONNECT != 0 && (200..300).contains(&s)) {
            ctx.tunnel = true;
            return None;
        }
        if flags & (R_CONNECT | R_UPGRADE) != 0 && self.verdict_pending {
            // No tunnel: the client's bytes after the request are the next request, which
            // can only be parsed if none arrived meanwhile (they were not kept).
            self.verdict_pending = false;
            if self.req.st == St::Wait {
                if self.waited {
                    return lose(ctx);
                }
                self.req.st = St::Start;
            }
        }
        if f & F_CLOSE != 0 || (f & F_HTTP10 != 0 && f & F_KEEPALIVE == 0) {
            ctx.will_close = true;
        }
        let te = f & F_TE != 0;
        if te && f & F_CL != 0 {
            return lose(ctx);
        }
        if flags & R_HEAD != 0 || s == 204 || s == 304 {
            return Some(self.response_done(ctx));
        }
        if (te && f & F_CHUNKED == 0) || (!te && f & F_CL == 0) {
            // RFC 9112 §6.3: the body runs until the connection closes (`Tracker::switch`
            // follows an SSE one's events from here).
            ctx.tunnel = true;
            ctx.will_close = true;
            return None;
        }
        match self.resp.body(te) {
            Some(st) => {
                self.resp.st = st;
                if te && f & F_SSE != 0 {
                    self.resp.events = Some(sse::Events::new());
                }
                None
            }
            None => Some(self.response_done(ctx)),
        }
    }

    pub(in crate::exchange) fn response_done(&mut self, ctx: &mut Ctx) -> Event {
        self.resp.events = None;
        self.fifo.pop();
        self.resp.st = St::Start;
        Event::Ended(seq(ctx.ended))
    }
}

/// A whole `101` head (`None`: it began in an earlier write): [`F_WS`] (and [`F_DEFLATE`])
/// when it switched to WebSocket frames the follower can follow (`websocket::switched`). Only
/// 101s come here, so no other response pays for it. A head split between writes, or with its
/// `Upgrade` or `Sec-WebSocket-Extensions` repeated, is left as today (a plain tunnel).
pub(in crate::exchange) fn switched_head(head: Option<&[u8]>) -> u16 {
    let Some(head) = head else { return 0 };
    let (mut upgrade, mut extensions) = (None, None);
    for line in head.split(|&b| b == LF).skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let slot = if name.eq_ignore_ascii_case(b"upgrade") {
            &mut upgrade
        } else if name.eq_ignore_ascii_case(b"sec-websocket-extensions") {
            &mut extensions
        } else {
            continue;
        };
        if slot.replace(value).is_some() {
            return 0;
        }
    }
    match super::super::websocket::switched(
        101,
        upgrade.unwrap_or_default(),
        extensions.unwrap_or_default(),
    ) {
        super::super::websocket::Switched::WebSocket { deflate: false } => F_WS,
        super::super::websocket::Switched::WebSocket { deflate: true } => F_WS | F_DEFLATE,
        _ => 0,
    }
}

/// Whether an event-stream response may be moved at a drain (ended between two events so that
/// its client reconnects elsewhere): only what resumes by itself. Its request was a `GET`
/// (what `EventSource` sends, and what it re-sends on its own after a clean end: WHATWG HTML
/// §9.2.3 "reestablish the connection"; a `POST` answered with events, as OpenAI-style
/// completions, the Vercel AI SDK and MCP's responses stream, is read to its end by a client
/// that does not resume, so ending it early truncates the answer), and the body is not
/// content-encoded (events are searched in the body's bytes: in gzip, br or zstd bytes no event
/// boundary can be seen, and ending such a body cuts its compressed stream). `head`: the whole
/// response head, or `None` when it began in an earlier write: then the module cannot vouch
/// that it has no `Content-Encoding`, and the response is held like any request. Only
/// event-stream responses come here, so no other response pays for the look.
pub(in crate::exchange) fn movable_sse(get: bool, head: Option<&[u8]>) -> bool {
    let Some(head) = head.filter(|_| get) else {
        return false;
    };
    !head.split(|&b| b == LF).skip(1).any(|line| {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        name.eq_ignore_ascii_case(b"content-encoding")
    })
}

/// The sequence number of the request after `count` of them.
pub(in crate::exchange) fn seq(count: u64) -> u32 {
    u32::try_from(count + 1).unwrap_or(u32::MAX)
}
