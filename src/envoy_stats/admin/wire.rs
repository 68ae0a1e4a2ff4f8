//! A minimal HTTP/1.1 client for Envoy's admin: one request with an empty body over TCP or a
//! unix socket, bounded in time, reading the status and the start of the body (plain or
//! chunked). Uses only `std` and the admin's address from `config`.

use crate::config::AdminAddress;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// One request with an empty body, `connection: close`; the status code, and with `body` the
/// start of the body (up to [`MAX_BODY`] bytes; see [`exchange`]).
pub(super) fn call(
    addr: &AdminAddress,
    method: &str,
    path: &str,
    timeout: Duration,
    body: bool,
) -> Result<(u16, Vec<u8>), String> {
    let deadline = Instant::now() + timeout;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: envoy-admin\r\nuser-agent: graceful-drain\r\n\
         content-length: 0\r\nconnection: close\r\n\r\n"
    );
    let io = |e: std::io::Error| format!("{addr}: {}", describe(&e, timeout));
    let answer = match addr {
        AdminAddress::Tcp(a) => {
            let s = TcpStream::connect_timeout(a, timeout).map_err(io)?;
            exchange(s, &request, deadline, timeout, body)
        }
        AdminAddress::Unix(p) => exchange(
            connect_unix(p).map_err(io)?,
            &request,
            deadline,
            timeout,
            body,
        ),
    };
    answer.map_err(|e| format!("{addr}: {e}"))
}

/// The most of an answer's body [`check`](super::check) reads (Envoy's `/ready` body is one word).
pub(super) const MAX_BODY: usize = 256;

/// An I/O error in words an operator reads: a timeout says so.
pub(super) fn describe(e: &std::io::Error, timeout: Duration) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("no answer within {timeout:?}")
        }
        _ => e.to_string(),
    }
}

pub(super) fn connect_unix(path: &str) -> std::io::Result<UnixStream> {
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            UnixStream::connect_addr(&a)
        }
        None => UnixStream::connect(path),
    }
}

/// A stream socket whose reads and writes can be bounded in time.
pub(super) trait Timed: Read + Write {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()>;
}

impl Timed for TcpStream {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
}

impl Timed for UnixStream {
    fn set_timeouts(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
}

/// Send the request, read up to the end of the status line (with `body`: to the end of the body
/// by its length or its last chunk, or [`MAX_BODY`] bytes of it, or the peer's close), and parse
/// it, all before `deadline`: the socket gets what is left of it before each step.
pub(super) fn exchange<S: Timed>(
    mut s: S,
    request: &str,
    deadline: Instant,
    timeout: Duration,
    body: bool,
) -> Result<(u16, Vec<u8>), String> {
    let err = |e: std::io::Error| describe(&e, timeout);
    let arm = |s: &S| {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // A zero timeout would mean "none" to the socket.
            return Err(err(std::io::ErrorKind::TimedOut.into()));
        }
        s.set_timeouts(Some(left)).map_err(err)
    };
    arm(&s)?;
    s.write_all(request.as_bytes()).map_err(err)?;
    let mut answer = [0u8; 1024 + MAX_BODY];
    let mut have = 0;
    let done = |a: &[u8]| match body {
        false => a.contains(&b'\n'),
        true => body_complete(a),
    };
    while have < answer.len() && !done(&answer[..have]) {
        arm(&s)?;
        match s.read(&mut answer[have..]) {
            Ok(0) if have == 0 => return Err("closed the connection without answering".into()),
            Ok(0) => break,
            Ok(n) => have += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
    }
    let answer = &answer[..have];
    let status = parse_status(answer)?;
    let body = match (body, head_end(answer)) {
        (true, Some(end)) => {
            let raw = &answer[end..answer.len().min(end + MAX_BODY)];
            if chunked(&answer[..end]) {
                dechunk(raw).0
            } else {
                raw.to_vec()
            }
        }
        (true, None) => return Err("the answer's head did not end".into()),
        (false, _) => Vec::new(),
    };
    Ok((status, body))
}

/// The data of a chunked body (RFC 9112 §7.1), as far as it is complete in `raw`, and whether
/// its last chunk (size 0) was reached; chunk extensions and trailers are ignored.
pub fn dechunk(mut raw: &[u8]) -> (Vec<u8>, bool) {
    let mut data = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let line = String::from_utf8_lossy(&raw[..eol]);
        let size = line.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size, 16) else {
            break;
        };
        let rest = &raw[eol + 2..];
        if size == 0 {
            return (data, true);
        }
        if size > rest.len() {
            data.extend_from_slice(rest);
            break;
        }
        data.extend_from_slice(&rest[..size]);
        raw = rest.get(size + 2..).unwrap_or(&[]);
    }
    (data, false)
}

/// Whether the answer so far holds its whole body (by its length or its last chunk), or
/// [`MAX_BODY`] bytes of it: the admin closes after answering, but a proxy on the way may not.
pub(super) fn body_complete(answer: &[u8]) -> bool {
    let Some(end) = head_end(answer) else {
        return false;
    };
    let (head, body) = answer.split_at(end);
    if body.len() >= MAX_BODY {
        return true;
    }
    if chunked(head) {
        return dechunk(body).1;
    }
    header(head, "content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| body.len() >= n)
}

pub(super) fn chunked(head: &[u8]) -> bool {
    header(head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
}

/// The value of the first header `name` (lower case) in an answer's head.
pub(super) fn header(head: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(head)
        .split("\r\n")
        .skip(1)
        .find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
}

/// Where an HTTP/1 answer's body starts (after the blank line), if its head is complete.
pub(super) fn head_end(answer: &[u8]) -> Option<usize> {
    answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

/// The code of an HTTP/1.x status line (`HTTP/1.1 200 OK`).
pub fn parse_status(head: &[u8]) -> Result<u16, String> {
    let bad = || {
        format!(
            "not an HTTP/1 answer: {:?}",
            String::from_utf8_lossy(&head[..head.len().min(40)])
        )
    };
    let rest = head.strip_prefix(b"HTTP/1.").ok_or_else(bad)?;
    match rest {
        [minor, b' ', a, b, c, ..]
            if [minor, a, b, c].iter().all(|d| d.is_ascii_digit())
                && matches!(rest.get(5), None | Some(b' ' | b'\r')) =>
        {
            Ok(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => Err(bad()),
    }
}
