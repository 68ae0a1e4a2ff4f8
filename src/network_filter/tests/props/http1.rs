//! HTTP/1.1 pipelined requests: `connection: close` once, nothing behind it reaches Envoy.

use super::*;

/// One of Envoy's writes: what it wrote, what reached the client, and whether it starts a
/// response head (of the request `req`, `interim` for a 1xx).
#[derive(Debug)]
struct H1Write {
    req: usize,
    head: Option<HeadKind>,
    wrote: Vec<u8>,
    out: Vec<u8>,
    draining: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeadKind {
    Interim,
    /// A final response; `close`: Envoy's own `connection: close` on it; `tunnel`: the 2xx
    /// to a CONNECT.
    Final {
        close: bool,
        tunnel: bool,
    },
}

/// A response's writes: (head kind if the write starts a head, bytes).
type Response = Vec<(Option<HeadKind>, Vec<u8>)>;

fn h1_response(rng: &mut Rng, post: bool, connect: bool) -> Response {
    let mut writes = Vec::new();
    if connect {
        let head = b"HTTP/1.1 200 Connection Established\r\n\r\n".to_vec();
        writes.push((
            Some(HeadKind::Final {
                close: false,
                tunnel: true,
            }),
            head,
        ));
        return writes;
    }
    if post && rng.chance(20) {
        writes.push((
            Some(HeadKind::Interim),
            b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(),
        ));
    }
    let close = rng.chance(10);
    let mut head = if rng.chance(15) {
        b"HTTP/1.1 204 No Content\r\n".to_vec()
    } else {
        b"HTTP/1.1 200 OK\r\n".to_vec()
    };
    let no_body = head.starts_with(b"HTTP/1.1 204");
    head.extend_from_slice(b"date: today\r\n");
    if close {
        head.extend_from_slice(b"connection: close\r\n");
    }
    let body = if no_body {
        head.extend_from_slice(b"\r\n");
        Vec::new()
    } else if rng.chance(50) {
        let n = rng.below(40);
        head.extend(format!("content-length: {n}\r\n\r\n").into_bytes());
        rng.ascii(n)
    } else {
        head.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
        let mut body = Vec::new();
        for _ in 0..rng.below(3) {
            let n = 1 + rng.below(20);
            body.extend(format!("{n:x}\r\n").into_bytes());
            body.extend(rng.ascii(n));
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\n\r\n");
        body
    };
    // The head whole in its write (Envoy's codec), the body's first bytes with it or not.
    let with_head = rng.below(body.len() + 1);
    let kind = HeadKind::Final {
        close,
        tunnel: false,
    };
    writes.push((Some(kind), [&head[..], &body[..with_head]].concat()));
    for (a, b) in rng.cut(body.len() - with_head, 2) {
        writes.push((None, body[with_head + a..with_head + b].to_vec()));
    }
    writes
}

/// Envoy's side of an HTTP/1.1 connection: its read buffer (ranges of the client's bytes, so
/// that bytes left behind keep their addresses), its codec, its answers.
struct H1Envoy<'a, 'w> {
    rng: Rng,
    w: &'w World,
    sim: &'w Sim<'a>,
    client: &'a [u8],
    /// Where each request ends; which are POSTs; which Envoy answers at once (a local reply,
    /// within the read: its codec then reads on without the read hook).
    ends: Vec<usize>,
    posts: Vec<bool>,
    local: Vec<bool>,
    connect: bool,
    /// The client bytes sent so far, and those in Envoy's read buffer.
    arrived: usize,
    buf: Vec<(usize, usize)>,
    /// The client offset of the next byte Envoy's codec takes.
    codec: usize,
    serving: Option<(usize, Response)>,
    dispatched: Vec<usize>,
    tunnel: bool,
    envoy_closes: bool,
    writes: Vec<H1Write>,
    /// Where the module first held requests back.
    cut_at: Option<usize>,
}

impl H1Envoy<'_, '_> {
    fn buffered(&self) -> usize {
        self.buf.iter().map(|(a, b)| b - a).sum()
    }

    /// The client's bytes up to `to` reach Envoy's read buffer.
    fn arrive(&mut self, to: usize) {
        match self.buf.last_mut() {
            Some(r) if r.1 == self.arrived => r.1 = to,
            _ => self.buf.push((self.arrived, to)),
        }
        self.arrived = to;
        self.buf.retain(|(a, b)| a < b);
    }

    /// The read hook over Envoy's read buffer, then its codec.
    fn read(&mut self) -> Result<(), TestCaseError> {
        if self.buffered() == 0 {
            return Ok(());
        }
        // Each range in random slices, never starting at a request end (Envoy's 16 KiB slices
        // rarely do; the module loses a connection whose buffer starts where a slice of the
        // last one started).
        let mut slices: Vec<&[u8]> = Vec::new();
        for &(a, b) in &self.buf.clone() {
            let mut at: Vec<usize> = self
                .rng
                .cut(b - a, 2)
                .into_iter()
                .map(|(x, _)| a + x)
                .filter(|&x| x == a || !self.ends.contains(&x))
                .collect();
            at.push(b);
            slices.extend(at.windows(2).map(|p| &self.client[p[0]..p[1]]));
        }
        let whole: Vec<u8> = slices.concat();
        let got = self.w.read(self.sim, slices);
        prop_assert_eq!(&got[..], &whole[..got.len()], "a read changed");
        if got.len() < whole.len() {
            let (first, _) = self.buf[0];
            let at = first + got.len();
            prop_assert!(
                self.w.shared().is_draining(),
                "requests held back without a drain"
            );
            prop_assert!(
                self.cut_at.is_some() || got.is_empty() || self.ends.contains(&at),
                "requests held back from byte {}: not a request end",
                at
            );
            self.cut_at.get_or_insert(at);
            // Envoy's buffer is what the module kept.
            let mut left = got.len();
            let mut kept = Vec::new();
            for &(a, b) in &self.buf {
                let n = left.min(b - a);
                if n > 0 {
                    kept.push((a, a + n));
                }
                left -= n;
            }
            self.buf = kept;
        }
        self.run_codec()
    }

    /// Envoy's codec over its read buffer: one request at a time; a request answered at once
    /// lets it read on.
    fn run_codec(&mut self) -> Result<(), TestCaseError> {
        while self.serving.is_none() && !self.buf.is_empty() && self.sim.open.get() {
            let (a, b) = self.buf[0];
            prop_assert_eq!(
                a,
                self.codec,
                "Envoy's codec given bytes that are not the next"
            );
            if self.tunnel {
                self.codec = b;
                self.buf.remove(0);
                continue;
            }
            let Some(k) = self.ends.iter().position(|&e| e > a && e <= b) else {
                // A request on its way: the codec takes it all.
                self.codec = b;
                self.buf.remove(0);
                continue;
            };
            self.codec = self.ends[k];
            self.buf[0].0 = self.ends[k];
            self.buf.retain(|(a, b)| a < b);
            self.dispatched.push(k);
            let connect = self.connect && k + 1 == self.ends.len();
            let resp = h1_response(&mut self.rng, self.posts[k], connect);
            self.serving = Some((k, resp));
            if self.local[k] && !connect {
                while self.serving.is_some() && self.sim.open.get() {
                    self.write()?;
                }
            }
        }
        Ok(())
    }

    /// Envoy's next write of the response it is serving; at its end, it reads on (the bytes it
    /// left behind first, through the read hook) or closes (its own `close`).
    fn write(&mut self) -> Result<(), TestCaseError> {
        let Some((req, resp)) = self.serving.as_mut() else {
            return Ok(());
        };
        let req = *req;
        let (head, bytes) = resp.remove(0);
        let done = resp.is_empty();
        let slices = match head {
            // The status line whole in the first slice (edit 1 needs it there); the rest of
            // the head anywhere.
            Some(_) => {
                let line = bytes.iter().position(|&b| b == b'\n').unwrap_or(0) + 1;
                let first = line + self.rng.below(bytes.len() - line + 1);
                let mut s = vec![bytes[..first].to_vec()];
                s.extend(self.rng.slices(&bytes[first..]));
                s
            }
            None => self.rng.slices(&bytes),
        };
        let out = self.w.write(self.sim, slices);
        self.writes.push(H1Write {
            req,
            head,
            wrote: bytes,
            out,
            draining: self.w.shared().is_draining(),
        });
        if let Some(HeadKind::Final { close, tunnel }) = head {
            self.envoy_closes |= close;
            self.tunnel |= tunnel;
        }
        if !done {
            return Ok(());
        }
        self.serving = None;
        if self.envoy_closes {
            // Envoy closes after a response of its own with `close`.
            self.sim.close(b"envoy");
            return Ok(());
        }
        if self.tunnel {
            // The client's tunnel bytes, now that it has the 2xx.
            let all = self.client.len();
            self.arrive(all);
        }
        Ok(())
    }
}

/// HTTP/1.1 requests pipelined on one connection, a drain at a random point, a CONNECT last
/// sometimes: see [`H1Envoy`] for Envoy's side. Its codec takes one request at a time: it
/// stops after a complete request, leaving the bytes behind it in its read buffer at their
/// addresses, and reads nothing more until it has answered it (then the read hook sees the
/// bytes left behind again), unless it answers at once (a local reply: it reads on within the
/// read); it closes after a response of its own with `close`; a CONNECT's 2xx opens a tunnel.
fn http1_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed);
    let n = 1 + rng.below(5);
    let connect = rng.chance(15);
    let mut client = Vec::new();
    let (mut ends, mut posts, mut local) = (Vec::new(), Vec::new(), Vec::new());
    for k in 0..n {
        if connect && k + 1 == n {
            client.extend_from_slice(
                b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n",
            );
            posts.push(false);
        } else if rng.chance(40) {
            let body = rng.ascii_below(30);
            client.extend(
                format!(
                    "POST /p{k} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                )
                .into_bytes(),
            );
            client.extend(body);
            posts.push(true);
        } else {
            client.extend(format!("GET /g{k} HTTP/1.1\r\nhost: x\r\n\r\n").into_bytes());
            posts.push(false);
        }
        local.push(rng.chance(25));
        ends.push(client.len());
    }
    let requests_end = client.len();
    let tunnel_up = if connect {
        rng.ascii_below(60)
    } else {
        Vec::new()
    };
    client.extend_from_slice(&tunnel_up);
    // When the client sends: random arrivals of its requests.
    let arrivals = rng.cut(requests_end, 6);

    let sim = Sim::new(NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let w = World::new(LongLivedSettings::default(), &sim);
    let mut e = H1Envoy {
        rng,
        w: &w,
        sim: &sim,
        client: &client,
        ends,
        posts,
        local,
        connect,
        arrived: 0,
        buf: Vec::new(),
        codec: 0,
        serving: None,
        dispatched: Vec::new(),
        tunnel: false,
        envoy_closes: false,
        writes: Vec::new(),
        cut_at: None,
    };
    let (mut ai, mut draining, mut unread) = (0, false, false);
    let mut steps = 0;
    while steps < 600 && sim.open.get() {
        steps += 1;
        let can_arrive = ai < arrivals.len();
        // A read event: new bytes (not while Envoy reads nothing: a request being answered),
        // or the bytes left behind once Envoy reads again.
        let can_read = (e.serving.is_none() || e.tunnel) && unread;
        let can_write = e.serving.is_some();
        if !can_arrive && !can_read && !can_write {
            break;
        }
        match e.rng.below(6) {
            0 | 1 if can_arrive => {
                e.arrive(arrivals[ai].1);
                ai += 1;
                unread = true;
            }
            2 if can_read => {
                unread = false;
                e.read()?;
            }
            3 | 4 if can_write => {
                e.write()?;
                if e.serving.is_none() && e.buffered() > 0 {
                    // Envoy reads again: the bytes it left behind first.
                    unread = true;
                }
            }
            5 if !draining => {
                draining = true;
                w.shared().start_drain(HOSTS, Trigger::Admin);
                w.scheduled(&sim, EVENT_DRAIN_STARTED);
            }
            _ => {}
        }
    }
    let H1Envoy {
        writes,
        dispatched,
        cut_at,
        serving,
        arrived,
        ends,
        ..
    } = e;

    // The model, on the write side: Envoy's bytes, with `connection: close` after the status
    // line of at most one final response, not a tunnel's, not one that has it already.
    let mut told: Option<usize> = None;
    let mut expected = Vec::new();
    for wr in &writes {
        expected.extend_from_slice(&wr.wrote);
        if wr.out == wr.wrote {
            continue;
        }
        let line = wr.wrote.iter().position(|&b| b == b'\n').unwrap_or(0) + 1;
        let edited = [&wr.wrote[..line], CONNECTION_CLOSE, &wr.wrote[line..]].concat();
        prop_assert_eq!(
            &wr.out,
            &edited,
            "a write changed other than by the close line"
        );
        prop_assert!(told.is_none(), "told twice");
        prop_assert_eq!(
            wr.head,
            Some(HeadKind::Final {
                close: false,
                tunnel: false
            }),
            "close on this head"
        );
        prop_assert!(wr.draining, "close before the drain");
        told = Some(wr.req);
        let at = expected.len() - wr.wrote.len() + line;
        expected.splice(at..at, CONNECTION_CLOSE.iter().copied());
    }
    prop_assert!(
        sim.to_client.borrow()[..] == expected[..],
        "what reached the client"
    );
    // On the read side: nothing behind a response that carries close reaches Envoy, and no
    // request is held back unless the client was told.
    let closing = writes
        .iter()
        .find(|wr| {
            matches!(wr.head, Some(HeadKind::Final { close: true, .. })) || told == Some(wr.req)
        })
        .map(|wr| wr.req);
    if let Some(k) = closing {
        prop_assert!(
            dispatched.iter().all(|&j| j <= k),
            "request dispatched behind the close of {}: {:?}",
            k,
            dispatched
        );
    }
    if let Some(at) = cut_at {
        prop_assert!(
            closing.is_some(),
            "requests held back from {} but no close",
            at
        );
    }
    // Nothing left hanging: every request sent was answered, or is behind a close.
    let sent = ends.iter().filter(|&&e| e <= arrived).count();
    if closing.is_none() && sim.open.get() && serving.is_none() && ai == arrivals.len() {
        prop_assert_eq!(
            dispatched.len(),
            sent,
            "requests neither answered nor closed on"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(1024))]

    /// Property 3 (docs/contributing/stream-edits.md edit 1 and the hold-back of pipelined requests).
    #[test]
    fn connection_close_is_inserted_once_and_nothing_behind_it_reaches_envoy(seed in any::<u64>()) {
        http1_case(seed)?;
    }
}
