//! Follows the RFC 6455 frames of one direction of an upgraded HTTP/1.1 connection (the bytes
//! after a `101 Switching Protocols` that answered `Upgrade: websocket`), and builds the Close
//! frames a drain injects. Pure: no FFI, no clock, no allocation; uses nothing outside `core`.
//!
//! Why: a drain may end a WebSocket cleanly only with a whole Close frame written *between*
//! frames of the direction it is written into (RFC 6455 §5.2: a frame is a header then exactly
//! `payload length` bytes; bytes in the middle of a frame would be read as payload). Control
//! frames may come between the fragments of a message (§5.4: "Control frames (see Section 5.5)
//! MAY be injected in the middle of a fragmented message"; §5.5: "Control frames can be
//! interjected in the middle of a fragmented message"), so every frame end is a place where a
//! Close may go; a message end is a better one (§5.5.1: after a Close no more data frames, so a
//! message cut there is lost). See docs/contributing/long-lived-streams.md for who gets which Close.
//!
//! One [`Follower`] per direction: client->server frames must be masked, server->client frames
//! must not (§5.1: a server "MUST close the connection upon receiving a frame that is not
//! masked", a client "MUST close" on a masked one). Bytes come in chunks split anywhere (inside
//! a header, inside the 64-bit length, inside a mask key); payloads are skipped by length and
//! never read, except the first two bytes of a Close frame (its status code).
//!
//! What it cannot follow exactly it gives up on ([`GiveUp`], sticky): the caller then leaves the
//! connection as it is without the move (cut at `drain_timeout`), never writes into it.
//! Per-message deflate (RFC 7692) does not change framing (the payload length is the
//! compressed length on the wire, §6 there), and a Close is an uncompressed control frame that
//! leaves the compression context alone (RFC 7692 §6.1: RSV1 is never set on control frames),
//! so with [`Follower::new`]'s `deflate` a set RSV1 is followed where RFC 7692 allows it: on the
//! first frame of a data message only.

#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod model;
pub mod mover;
#[cfg(test)]
mod tests;

/// The largest payload a frame may announce before the follower gives up (4 GiB). RFC 6455
/// allows 2^63-1; libraries refuse far less (tungstenite: 16 MiB frames, Python `websockets`:
/// 1 MiB messages, browsers a few hundred MiB). A frame longer than this cannot end within any
/// sensible drain window, so following it buys no injection point; giving up at its header
/// says at once that this connection will be cut, not moved.
pub const MAX_PAYLOAD: u64 = 1 << 32;
/// Status code 1001, "Going Away" (RFC 6455 §7.4.1: "an endpoint is going away, such as a
/// server going down").
pub const GOING_AWAY: u16 = 1001;
/// The longest reason a Close frame can carry: a control payload is at most 125 bytes (§5.5),
/// two of which are the code.
pub const MAX_REASON: usize = 123;
/// The longest Close frame [`close_frame`] builds: 2 header bytes, 4 mask bytes, 125 payload.
pub const MAX_CLOSE_FRAME: usize = 131;

/// Opcodes (RFC 6455 §5.2, §11.8). The others are reserved: the follower gives up on them.
pub mod opcode {
    /// A later fragment of a data message.
    pub const CONTINUATION: u8 = 0x0;
    /// First frame of a text message.
    pub const TEXT: u8 = 0x1;
    /// First frame of a binary message.
    pub const BINARY: u8 = 0x2;
    /// Close (§5.5.1).
    pub const CLOSE: u8 = 0x8;
    /// Ping (§5.5.2).
    pub const PING: u8 = 0x9;
    /// Pong (§5.5.3).
    pub const PONG: u8 = 0xA;
}

/// Why the follower stopped following: the first thing it could not follow exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUp {
    /// Opcode 3-7 or 11-15 (§5.2: reserved; "MUST _Fail the WebSocket Connection_").
    ReservedOpcode,
    /// RSV2 or RSV3 set, or RSV1 set where no negotiated per-message deflate allows it.
    Reserved,
    /// The mask bit is not what this direction must carry (§5.1, §5.3).
    Mask,
    /// A control frame with FIN clear (§5.5: "All control frames ... MUST NOT be fragmented").
    FragmentedControl,
    /// A control frame whose payload is over 125 bytes (§5.5).
    ControlTooLong,
    /// A length with the most significant bit set (§5.2), not in its shortest form (§5.2: "the
    /// minimal number of bytes MUST be used"), or over [`MAX_PAYLOAD`].
    Length,
    /// A continuation frame with no message begun, or a new message inside another (§5.4).
    Fragmentation,
    /// A Close whose payload is one byte (§5.5.1: a body starts with a two-byte code).
    CloseBody,
    /// A frame after this direction's Close (§5.5.1: no data after a Close; nothing of use can
    /// follow in this direction).
    AfterClose,
}

/// A Close frame seen in this direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Close {
    /// Its status code, `None` when the Close had no body (§7.1.5: read as 1005).
    pub code: Option<u16>,
}

/// One frame that ended in the last feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameEnd {
    /// Offset in the bytes fed to that call just after the frame's last byte.
    pub at: usize,
    /// The frame's opcode (see [`opcode`]).
    pub opcode: u8,
    /// Whether a data message is still open after this frame (a fragment with FIN clear, or a
    /// control frame between fragments): a Close here would cut that message.
    pub in_message: bool,
}

/// What one [`Follower::feed`] found, for callers that only want the last places.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fed {
    /// Offset in the fed bytes after the last whole frame: a Close may be written there.
    pub frame_end: Option<usize>,
    /// Offset after the last frame at which no data message was open: the best place.
    pub message_end: Option<usize>,
}

/// Where the follower is inside a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Reading a header: `have` bytes of `need` are in `head` (`need` is 2 until the second
    /// byte says how long the header is).
    Head,
    /// Skipping `left` payload bytes.
    Payload,
    /// Gave up.
    Lost(GiveUp),
}

/// Follows one direction's frames (at most 48 bytes; a unit test holds it). See the module doc.
#[derive(Debug, Clone)]
pub struct Follower {
    st: St,
    /// This direction's frames must be masked (client->server).
    masked: bool,
    /// Per-message deflate was negotiated: RSV1 allowed on a data message's first frame.
    deflate: bool,
    /// A data message is open (a fragment with FIN clear was seen, its last one not yet).
    in_message: bool,
    head: [u8; 14],
    have: u8,
    need: u8,
    /// Opcode of the frame being read (set when its header completes).
    op: u8,
    fin: bool,
    /// Payload bytes still to skip.
    left: u64,
    /// Payload bytes of the current frame already skipped (mask index, Close code position).
    pos: u8,
    /// The first two payload bytes of a Close, unmasked.
    code: [u8; 2],
    close: Option<Close>,
}

impl Follower {
    /// A follower at the start of the frames of one direction: `masked` for client->server,
    /// `deflate` when the 101 accepted `permessage-deflate` (`Sec-WebSocket-Extensions`).
    pub const fn new(masked: bool, deflate: bool) -> Self {
        Self {
            st: St::Head,
            masked,
            deflate,
            in_message: false,
            head: [0; 14],
            have: 0,
            need: 2,
            op: 0,
            fin: false,
            left: 0,
            pos: 0,
            code: [0; 2],
            close: None,
        }
    }

    /// Why it gave up, if it did.
    pub const fn gave_up(&self) -> Option<GiveUp> {
        match self.st {
            St::Lost(g) => Some(g),
            _ => None,
        }
    }

    /// The bytes fed so far end exactly after a whole frame (or nothing was fed): a Close frame
    /// written now is read as a frame of its own.
    pub const fn at_frame_end(&self) -> bool {
        matches!(self.st, St::Head) && self.have == 0
    }

    /// At a frame end with no data message open: a Close now cuts no message.
    pub const fn at_message_end(&self) -> bool {
        self.at_frame_end() && !self.in_message
    }

    /// A data message is open (its last fragment not seen yet).
    pub const fn in_message(&self) -> bool {
        self.in_message
    }

    /// The Close frame this direction carried, once it ended.
    pub const fn close(&self) -> Option<Close> {
        self.close
    }

    /// Follows `bytes`, the next bytes of this direction; `on_end` is called for each frame
    /// that ends in them, in order. Returns the reason once it gives up (then and at every
    /// later call, without reading anything).
    pub fn feed<F: FnMut(FrameEnd)>(&mut self, bytes: &[u8], mut on_end: F) -> Result<(), GiveUp> {
        let mut i = 0;
        while i < bytes.len() {
            match self.st {
                St::Lost(g) => return Err(g),
                St::Head if self.have == 0 && bytes.len() - i >= 14 => {
                    // The whole header is in these bytes: read it in place, one pass.
                    if let Some(src) = bytes.get(i..i + 14) {
                        self.head.copy_from_slice(src);
                    }
                    match self.first_two() {
                        Ok(need) => self.need = need,
                        Err(g) => return Err(self.lose(g)),
                    }
                    self.have = self.need;
                    i += usize::from(self.need);
                    if let Err(g) = self.rest_of_head() {
                        return Err(self.lose(g));
                    }
                    if self.left == 0 {
                        self.end_frame(i, &mut on_end);
                    } else {
                        self.st = St::Payload;
                    }
                }
                St::Head => {
                    // Copy what the header still needs (at most 14 bytes in all).
                    let want = usize::from(self.need - self.have);
                    let take = want.min(bytes.len() - i);
                    let dst = self
                        .head
                        .get_mut(usize::from(self.have)..usize::from(self.have) + take);
                    if let (Some(dst), Some(src)) = (dst, bytes.get(i..i + take)) {
                        dst.copy_from_slice(src);
                    }
                    // `take` is at most 14.
                    self.have += take as u8;
                    i += take;
                    if self.have < self.need {
                        continue;
                    }
                    if self.need == 2 {
                        match self.first_two() {
                            Ok(need) => self.need = need,
                            Err(g) => return Err(self.lose(g)),
                        }
                        if self.have < self.need {
                            continue;
                        }
                    }
                    if let Err(g) = self.rest_of_head() {
                        return Err(self.lose(g));
                    }
                    if self.left == 0 {
                        self.end_frame(i, &mut on_end);
                    } else {
                        self.st = St::Payload;
                    }
                }
                St::Payload => {
                    let avail = bytes.len() - i;
                    let n = usize::try_from(self.left).unwrap_or(usize::MAX).min(avail);
                    if self.op == opcode::CLOSE {
                        // Only a Close's first two payload bytes are read (its code).
                        for &b in bytes.get(i..i + n).unwrap_or_default() {
                            let p = usize::from(self.pos);
                            if p >= 2 {
                                break;
                            }
                            let key = if self.masked {
                                self.head
                                    .get(usize::from(self.need) - 4 + p % 4)
                                    .copied()
                                    .unwrap_or(0)
                            } else {
                                0
                            };
                            if let Some(c) = self.code.get_mut(p) {
                                *c = b ^ key;
                            }
                            self.pos += 1;
                        }
                    }
                    i += n;
                    self.left -= n as u64;
                    if self.left == 0 {
                        self.end_frame(i, &mut on_end);
                    }
                }
            }
        }
        match self.st {
            St::Lost(g) => Err(g),
            _ => Ok(()),
        }
    }

    /// [`Follower::feed`] keeping only the last frame end and the last message end.
    pub fn feed_last(&mut self, bytes: &[u8]) -> Result<Fed, GiveUp> {
        let mut fed = Fed::default();
        self.feed(bytes, |e| {
            fed.frame_end = Some(e.at);
            if !e.in_message {
                fed.message_end = Some(e.at);
            }
        })?;
        Ok(fed)
    }

    fn lose(&mut self, g: GiveUp) -> GiveUp {
        self.st = St::Lost(g);
        g
    }

    /// Checks the first two header bytes and returns the header's whole length.
    fn first_two(&self) -> Result<u8, GiveUp> {
        let [b0, b1, ..] = self.head;
        let op = b0 & 0x0F;
        let rsv = b0 & 0x70;
        let control = op & 0x08 != 0;
        if self.close.is_some() {
            return Err(GiveUp::AfterClose);
        }
        if !matches!(op, 0x0..=0x2 | 0x8..=0xA) {
            return Err(GiveUp::ReservedOpcode);
        }
        // RFC 7692 §6.1: RSV1 only on the first frame of a data message, never on control
        // frames or continuations.
        let rsv1_ok = self.deflate && (op == opcode::TEXT || op == opcode::BINARY);
        if rsv & 0x30 != 0 || (rsv & 0x40 != 0 && !rsv1_ok) {
            return Err(GiveUp::Reserved);
        }
        if (b1 & 0x80 != 0) != self.masked {
            return Err(GiveUp::Mask);
        }
        let len7 = b1 & 0x7F;
        if control {
            if b0 & 0x80 == 0 {
                return Err(GiveUp::FragmentedControl);
            }
            if len7 > 125 {
                return Err(GiveUp::ControlTooLong);
            }
        } else if (op == opcode::CONTINUATION) != self.in_message {
            return Err(GiveUp::Fragmentation);
        }
        let ext = match len7 {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        Ok(2 + ext + if self.masked { 4 } else { 0 })
    }

    /// The header is whole: reads the length and starts the payload.
    fn rest_of_head(&mut self) -> Result<(), GiveUp> {
        let [b0, b1, ..] = self.head;
        let len = match b1 & 0x7F {
            126 => {
                let n = u64::from(u16::from_be_bytes([self.head[2], self.head[3]]));
                if n < 126 {
                    return Err(GiveUp::Length);
                }
                n
            }
            127 => {
                let mut be = [0u8; 8];
                be.copy_from_slice(self.head.get(2..10).unwrap_or(&[0; 8]));
                let n = u64::from_be_bytes(be);
                if n >> 63 != 0 || n <= 0xFFFF || n > MAX_PAYLOAD {
                    return Err(GiveUp::Length);
                }
                n
            }
            n => u64::from(n),
        };
        self.op = b0 & 0x0F;
        self.fin = b0 & 0x80 != 0;
        if self.op == opcode::CLOSE && len == 1 {
            return Err(GiveUp::CloseBody);
        }
        self.left = len;
        self.pos = 0;
        Ok(())
    }

    /// The current frame's last byte was at `at - 1`.
    fn end_frame<F: FnMut(FrameEnd)>(&mut self, at: usize, on_end: &mut F) {
        match self.op {
            opcode::CLOSE => {
                self.close = Some(Close {
                    code: (self.pos >= 2).then(|| u16::from_be_bytes(self.code)),
                });
            }
            opcode::PING | opcode::PONG => {}
            _ => self.in_message = !self.fin,
        }
        self.st = St::Head;
        self.have = 0;
        self.need = 2;
        on_end(FrameEnd {
            at,
            opcode: self.op,
            in_message: self.in_message,
        });
    }
}

impl Default for Follower {
    /// A server->client follower without extensions.
    fn default() -> Self {
        Self::new(false, false)
    }
}

/// What a `101 Switching Protocols` switched the connection to, as far as following goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switched {
    /// WebSocket frames from now on: follow them (`deflate`: see [`Follower::new`]).
    WebSocket {
        /// `permessage-deflate` was accepted.
        deflate: bool,
    },
    /// Not a WebSocket (no 101, `Upgrade: h2c`, any other protocol, a response without
    /// `Upgrade: websocket`): leave the connection as today.
    Other,
    /// A WebSocket with an extension other than `permessage-deflate` accepted: its framing is
    /// not known here, so the connection is left as today.
    UnknownExtension,
}

/// Reads the upgrade from the response's `status`, its `Upgrade` value and its
/// `Sec-WebSocket-Extensions` value (several field lines joined with `,`; empty when absent).
/// RFC 6455 §4.1: the client fails the connection unless the 101's `Upgrade` is an ASCII
/// case-insensitive match for `websocket`; §9.1: the server's extensions list is what both use.
/// (The request's `Upgrade` need not be read: a server may only switch to a protocol the
/// client listed, RFC 9110 §7.8, and the 101 names the one it chose.)
pub fn switched(status: u16, upgrade: &[u8], extensions: &[u8]) -> Switched {
    if status != 101 || !upgrade.trim_ascii().eq_ignore_ascii_case(b"websocket") {
        return Switched::Other;
    }
    let mut deflate = false;
    for ext in extensions.split(|&b| b == b',') {
        let name = ext
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        if name.is_empty() {
            continue;
        }
        if !name.eq_ignore_ascii_case(b"permessage-deflate") || deflate {
            return Switched::UnknownExtension;
        }
        deflate = true;
    }
    Switched::WebSocket { deflate }
}

/// A Close frame built by [`close_frame`]: fixed storage, no allocation.
#[derive(Clone, Copy)]
pub struct CloseFrame {
    buf: [u8; MAX_CLOSE_FRAME],
    len: u8,
}

impl CloseFrame {
    /// The frame's bytes, ready to write.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..usize::from(self.len)).unwrap_or_default()
    }
}

impl core::fmt::Debug for CloseFrame {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("CloseFrame").field(&self.as_bytes()).finish()
    }
}

/// A Close frame with `code` and `reason` (cut to [`MAX_REASON`] bytes at a character
/// boundary: §5.5.1 wants UTF-8). `mask`: `Some(key)` for a frame towards the upstream (as
/// from the client, §5.3; the key must come from a strong random source, e.g. `getrandom`),
/// `None` towards the client.
pub fn close_frame(code: u16, reason: &str, mask: Option<[u8; 4]>) -> CloseFrame {
    let mut end = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let reason = reason.as_bytes().get(..end).unwrap_or_default();
    let mut buf = [0u8; MAX_CLOSE_FRAME];
    let plen = 2 + reason.len(); // at most 125
    buf[0] = 0x80 | opcode::CLOSE;
    buf[1] = plen as u8 | if mask.is_some() { 0x80 } else { 0 };
    let mut at = 2;
    let key = mask.unwrap_or([0; 4]);
    if mask.is_some() {
        buf[2..6].copy_from_slice(&key);
        at = 6;
    }
    let payload = code.to_be_bytes().into_iter().chain(reason.iter().copied());
    for (k, (dst, b)) in buf.iter_mut().skip(at).zip(payload).enumerate() {
        *dst = b ^ key[k % 4];
    }
    CloseFrame {
        buf,
        len: (at + plen) as u8,
    }
}
