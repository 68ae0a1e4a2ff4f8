//! Envoy's admin interface, as the drain engine calls it when a drain starts: `POST
//! /healthcheck/fail` (Envoy's health checks and `/ready` fail, and every listener drain-closes
//! with its next response) and `POST /drain_listeners?graceful&skip_exit` (Envoy's own drain
//! state starts; the listeners keep accepting). Plain HTTP/1.1 over TCP or over the admin's unix
//! socket, on a thread of the module's own, so a slow or absent admin never blocks Envoy's main
//! thread. No FFI.
//!
//! Why not Envoy's `http_callout` through a cluster that points at the admin, as earlier
//! releases did: a callout is made on Envoy's main thread, and a dynamic-module upstream filter
//! on that cluster (the guard that kept routes from reaching the admin through it) makes Envoy
//! 1.38-1.40 log an `envoy_bug` ("failed to parse worker index from name", with a stack trace)
//! and count `server.envoy_bug_failures` on every call; without the guard, any route that picks
//! its cluster from the request could reach the admin. Calling the admin directly needs neither
//! the cluster nor the guard.

pub use crate::config::AdminAddress;
use std::fmt;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The admin calls of a drain start, in order, each with what it means once answered 200.
pub const DRAIN_START_CALLS: [(&str, &str); 2] = [
    ("/healthcheck/fail", "Envoy's health checks now fail"),
    (
        "/drain_listeners?graceful&skip_exit",
        "Envoy's listeners now drain-close",
    ),
];

/// `POST path` with an empty body; the status code of the answer. `timeout` bounds the whole
/// call: the connect (a unix connect only waits when the admin's accept queue is full), the
/// write, and every read up to the status line.
pub fn post(addr: &AdminAddress, path: &str, timeout: Duration) -> Result<u16, String> {
    call(addr, "POST", path, timeout, false).map(|(status, _)| status)
}

/// The server states Envoy's admin `GET /ready` answers with (200 for `LIVE`, 503 otherwise).
const ENVOY_STATES: [&str; 4] = ["LIVE", "DRAINING", "PRE_INITIALIZING", "INITIALIZING"];

/// Why [`check`] did not recognise Envoy's admin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckError {
    /// No HTTP answer: nothing listens, the connection failed, or no answer within the timeout
    /// (worth another try: the admin may still be starting).
    NoAnswer(String),
    /// An HTTP answer, but not Envoy's admin's (its `/ready` answers with a server state).
    NotAdmin { status: u16, body: String },
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::NoAnswer(e) => write!(f, "no answer: {e}"),
            CheckError::NotAdmin { status, body } => {
                write!(f, "GET /ready answered {status} {body:?}")
            }
        }
    }
}

/// Whether `addr` is an Envoy admin: `GET /ready` answered with one of Envoy's server states
/// (so not a data listener, the module's own control listener or another server). The state.
pub fn check(addr: &AdminAddress, timeout: Duration) -> Result<String, CheckError> {
    let (status, body) =
        call(addr, "GET", "/ready", timeout, true).map_err(CheckError::NoAnswer)?;
    let text = String::from_utf8_lossy(&body);
    let state = text.trim_end();
    if matches!(status, 200 | 503) && ENVOY_STATES.contains(&state) {
        return Ok(state.to_string());
    }
    Err(CheckError::NotAdmin {
        status,
        body: state[..state.floor_char_boundary(40)].to_string(),
    })
}

/// One request with an empty body, `connection: close`; the status code, and with `body` the
/// start of the body (up to [`MAX_BODY`] bytes; see [`exchange`]).
fn call(
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

/// The most of an answer's body [`check`] reads (Envoy's `/ready` body is one word).
const MAX_BODY: usize = 256;

/// An I/O error in words an operator reads: a timeout says so.
fn describe(e: &std::io::Error, timeout: Duration) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("no answer within {timeout:?}")
        }
        _ => e.to_string(),
    }
}

fn connect_unix(path: &str) -> std::io::Result<UnixStream> {
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
trait Timed: Read + Write {
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
fn exchange<S: Timed>(
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
fn body_complete(answer: &[u8]) -> bool {
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

fn chunked(head: &[u8]) -> bool {
    header(head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
}

/// The value of the first header `name` (lower case) in an answer's head.
fn header(head: &[u8], name: &str) -> Option<String> {
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
fn head_end(answer: &[u8]) -> Option<usize> {
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

/// Whether `admin_address` answered as Envoy's admin when the server was initialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AdminCheck {
    /// No `admin_address` configured (or no drain engine).
    Unset = 0,
    Checking = 1,
    Recognised = 2,
    /// No HTTP answer (nothing listens there, or no answer in time).
    NotAnswering = 3,
    /// An HTTP answer, not Envoy's admin's (a data or control listener, another server).
    NotAdmin = 4,
}

impl AdminCheck {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminCheck::Unset => "unset",
            AdminCheck::Checking => "checking",
            AdminCheck::Recognised => "recognised",
            AdminCheck::NotAnswering => "not_answering",
            AdminCheck::NotAdmin => "not_admin",
        }
    }
}

/// Check, when the server is initialized, which of `addrs` is Envoy's admin: up to `attempts`
/// rounds while nothing answers (the admin may still be starting), each trying every address in
/// order, `wait` between them (`false`: the module is stopping; the check ends as `Checking`;
/// it is also asked, with a zero duration, before each address).
/// Logs what it found, naming the field. The recognised address, if any, with the outcome.
pub fn check_admin_address(
    addrs: &[AdminAddress],
    timeout: Duration,
    attempts: u32,
    wait: impl Fn(Duration) -> bool,
) -> (AdminCheck, Option<AdminAddress>) {
    const FIX: &str = "a drain cannot fail Envoy's health checks through it; set admin_address \
                       to the address of the bootstrap's `admin:` section";
    let listed = addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    for attempt in 1..=attempts {
        let mut not_admin = Vec::new();
        let mut no_answer = None;
        for addr in addrs {
            // Each silent address costs up to `timeout`: a stopping module tries no more of
            // them, so its thread ends within one call's timeout, inside the teardown bound.
            if !wait(Duration::ZERO) {
                return (AdminCheck::Checking, None);
            }
            match check(addr, timeout) {
                Ok(state) => {
                    log::info!(
                        "graceful_drain: admin_address {addr} is Envoy's admin (state {state})"
                    );
                    return (AdminCheck::Recognised, Some(addr.clone()));
                }
                Err(CheckError::NoAnswer(e)) => no_answer = Some(e),
                Err(e @ CheckError::NotAdmin { .. }) => not_admin.push((addr, e.to_string())),
            }
        }
        let each = || {
            not_admin
                .iter()
                .map(|(a, e)| format!("{a}: {e}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        if !not_admin.is_empty() && no_answer.is_none() {
            match not_admin.as_slice() {
                [(one, why)] if addrs.len() == 1 => log::warn!(
                    "graceful_drain: admin_address {one} is not Envoy's admin ({why}): {FIX}"
                ),
                _ => log::warn!(
                    "graceful_drain: admin_address: none of {listed} is Envoy's admin ({}): {FIX}",
                    each()
                ),
            }
            return (AdminCheck::NotAdmin, None);
        }
        if attempt == attempts {
            let e = no_answer.unwrap_or_default();
            log::warn!(
                "graceful_drain: admin_address did not answer ({listed}: {e}; {attempt} tries){}: \
                 unless Envoy's admin is only slow to start, {FIX}",
                if not_admin.is_empty() {
                    String::new()
                } else {
                    format!("; not Envoy's admin: {}", each())
                }
            );
            return (
                if not_admin.is_empty() {
                    AdminCheck::NotAnswering
                } else {
                    AdminCheck::NotAdmin
                },
                None,
            );
        }
        if !wait(Duration::from_secs(1)) {
            return (AdminCheck::Checking, None);
        }
    }
    (AdminCheck::NotAnswering, None)
}

/// The drain start's calls ([`DRAIN_START_CALLS`]), in order, each answer logged.
pub fn post_drain_start_calls(addr: &AdminAddress, timeout: Duration, go_on: impl Fn() -> bool) {
    for (path, meaning) in DRAIN_START_CALLS {
        if !go_on() {
            return; // the module is stopping: no further call
        }
        match post(addr, path, timeout) {
            Ok(200) => log::info!("graceful_drain: {meaning} (admin answered 200)"),
            Ok(status) => {
                log::warn!("graceful_drain: admin POST {path} to {addr} answered {status}")
            }
            Err(e) => log::warn!("graceful_drain: admin POST {path} failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::os::unix::net::UnixListener;
    use std::thread;

    /// A one-connection server: reads the request head, answers `answer`, returns the request.
    fn serve_once(mut s: impl Read + Write, answer: &'static [u8]) -> String {
        let mut req = Vec::new();
        let mut buf = [0u8; 512];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "client closed before the end of its request");
            req.extend_from_slice(&buf[..n]);
        }
        s.write_all(answer).unwrap();
        String::from_utf8(req).unwrap()
    }

    #[test]
    fn status_lines_are_parsed_and_anything_else_is_refused() {
        assert_eq!(parse_status(b"HTTP/1.1 200 OK\r\n"), Ok(200));
        assert_eq!(
            parse_status(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Ok(503)
        );
        assert_eq!(parse_status(b"HTTP/1.1 404\r\n"), Ok(404));
        for bad in [
            &b""[..],
            b"HTTP/1.1",
            b"HTTP/1.1 20",
            b"HTTP/1.1 2000 OK\r\n",
            b"HTTP/2 200\r\n",
            b"SSH-2.0-OpenSSH\r\n",
            b"HTTP/1.1 2x0 OK\r\n",
        ] {
            assert!(parse_status(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri isolates the process")]
    fn a_post_over_tcp_sends_one_empty_request_and_reads_the_status() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = AdminAddress::Tcp(l.local_addr().unwrap());
        let server = thread::spawn(move || {
            serve_once(
                l.accept().unwrap().0,
                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nOK\n",
            )
        });
        assert_eq!(
            post(&addr, "/healthcheck/fail", Duration::from_secs(5)),
            Ok(200)
        );
        let req = server.join().unwrap();
        assert!(
            req.starts_with("POST /healthcheck/fail HTTP/1.1\r\n"),
            "{req}"
        );
        assert!(req.contains("content-length: 0\r\n"), "{req}");
        assert!(req.contains("connection: close\r\n"), "{req}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri isolates the process")]
    fn a_post_over_a_unix_socket_and_an_abstract_one() {
        let dir = std::env::temp_dir().join(format!("gd-admin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("admin.sock");
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path).unwrap();
        let server = thread::spawn(move || {
            serve_once(
                l.accept().unwrap().0,
                b"HTTP/1.1 503 Service Unavailable\r\n\r\n",
            )
        });
        let addr = AdminAddress::parse(path.to_str().unwrap()).unwrap();
        let r = post(
            &addr,
            "/drain_listeners?graceful&skip_exit",
            Duration::from_secs(5),
        );
        assert_eq!(r, Ok(503));
        assert!(server
            .join()
            .unwrap()
            .starts_with("POST /drain_listeners?graceful&skip_exit "));
        std::fs::remove_dir_all(&dir).unwrap();

        use std::os::linux::net::SocketAddrExt;
        let name = format!("gd-admin-test-{}", std::process::id());
        let a = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let l = UnixListener::bind_addr(&a).unwrap();
        let server =
            thread::spawn(move || serve_once(l.accept().unwrap().0, b"HTTP/1.1 200 OK\r\n\r\n"));
        let addr = AdminAddress::parse(&format!("@{name}")).unwrap();
        assert_eq!(
            post(&addr, "/healthcheck/fail", Duration::from_secs(5)),
            Ok(200)
        );
        server.join().unwrap();
    }

    #[test]
    fn chunked_bodies_are_decoded_as_far_as_they_go() {
        let done = |d: &[u8]| (d.to_vec(), true);
        assert_eq!(dechunk(b"5\r\nLIVE\n\r\n0\r\n\r\n"), done(b"LIVE\n"));
        assert_eq!(
            dechunk(b"2;ext=1\r\nLI\r\n3\r\nVE\n\r\n0;x=y\r\ntrailer: 1\r\n\r\n"),
            done(b"LIVE\n")
        );
        // Data that looks like a last chunk is data.
        assert_eq!(
            dechunk(b"7\r\n\r\n0\r\n\r\n\r\n0\r\n\r\n"),
            done(b"\r\n0\r\n\r\n")
        );
        assert_eq!(
            dechunk(b"a\r\nLIVE"),
            (b"LIVE".to_vec(), false),
            "cut short"
        );
        for junk in [
            &b""[..],
            b"zz\r\nLIVE",
            b"\r\n",
            b"LIVE\n",
            b"ffffffffffffffffff\r\nx",
        ] {
            let (data, last) = dechunk(junk);
            assert!(data.len() <= junk.len() && !last, "{junk:?}");
        }
    }

    /// The admin check: Envoy's admin answers `/ready` with its server state (chunked, as 1.40
    /// does, or not); anything else is not Envoy's admin.
    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri isolates the process")]
    fn the_check_recognises_envoys_admin_and_nothing_else() {
        let answer = |a: &'static [u8]| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = AdminAddress::Tcp(l.local_addr().unwrap());
            let server = thread::spawn(move || serve_once(l.accept().unwrap().0, a));
            let r = check(&addr, Duration::from_secs(5));
            assert!(server
                .join()
                .unwrap()
                .starts_with("GET /ready HTTP/1.1\r\n"));
            r
        };
        assert_eq!(
            answer(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nLIVE\n\r\n0\r\n\r\n"
            ),
            Ok("LIVE".to_string())
        );
        assert_eq!(
            answer(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 9\r\n\r\nDRAINING\n"),
            Ok("DRAINING".to_string())
        );
        let not_admin = |status, body: &str| {
            Err(CheckError::NotAdmin {
                status,
                body: body.into(),
            })
        };
        assert_eq!(
            answer(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nready\n"),
            not_admin(200, "ready")
        );
        assert_eq!(
            answer(b"HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\n\r\nLIVE\n"),
            not_admin(404, "LIVE")
        );
        assert_eq!(answer(b"HTTP/1.1 200 OK\r\n\r\n"), not_admin(200, ""));
        // No complete answer: the connection closed inside the head.
        let r = answer(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n");
        assert!(matches!(r, Err(CheckError::NoAnswer(_))), "{r:?}");
    }

    /// An answer whose connection stays open (a proxy that keeps it alive) is read to the end of
    /// its body, by its length or its last chunk, not until the timeout.
    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri isolates the process")]
    fn a_complete_answer_ends_the_read_even_if_the_connection_stays_open() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nLIVE\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nLIVE\n\r\n0\r\n\r\n",
        ] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = AdminAddress::Tcp(l.local_addr().unwrap());
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let server = thread::spawn(move || {
                let s = l.accept().unwrap().0;
                serve_once(&s, answer);
                // Hold the connection open until the client is done.
                let _ = rx.recv_timeout(Duration::from_secs(10));
            });
            let t0 = std::time::Instant::now();
            assert_eq!(check(&addr, Duration::from_secs(5)), Ok("LIVE".to_string()));
            assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
            tx.send(()).unwrap();
            server.join().unwrap();
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri isolates the process")]
    fn an_absent_or_silent_admin_is_an_error_within_the_timeout() {
        // Nothing listens on a port just released.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let err = post(
            &AdminAddress::Tcp(port),
            "/healthcheck/fail",
            Duration::from_secs(2),
        );
        assert!(
            err.as_ref().is_err_and(|e| e.contains(&port.to_string())),
            "{err:?}"
        );
        let missing = AdminAddress::Unix("/nonexistent/graceful-drain/admin.sock".into());
        assert!(post(&missing, "/healthcheck/fail", Duration::from_secs(2)).is_err());

        // A peer that accepts and never answers: the deadline ends the call, and says so.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = AdminAddress::Tcp(l.local_addr().unwrap());
        let t0 = std::time::Instant::now();
        let err = post(&addr, "/healthcheck/fail", Duration::from_millis(300));
        assert!(
            err.as_ref().is_err_and(|e| e.contains("no answer within")),
            "{err:?}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "took {:?}",
            t0.elapsed()
        );
        drop(l);

        // A peer that reads the request and closes without a byte of answer.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = AdminAddress::Tcp(l.local_addr().unwrap());
        let server = thread::spawn(move || serve_once(l.accept().unwrap().0, b""));
        let err = post(&addr, "/healthcheck/fail", Duration::from_secs(5));
        assert!(
            err.as_ref().is_err_and(|e| e.contains("without answering")),
            "{err:?}"
        );
        server.join().unwrap();
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri isolates the process")]
    fn the_start_check_retries_while_nothing_answers_and_names_what_it_found() {
        // Nothing listens: a port bound then released.
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let nobody = AdminAddress::Tcp(free);
        let waits = std::cell::Cell::new(0);
        let t = Duration::from_secs(2);
        let counted = |d: Duration| {
            if !d.is_zero() {
                waits.set(waits.get() + 1);
            }
            true
        };
        assert_eq!(
            check_admin_address(std::slice::from_ref(&nobody), t, 3, counted),
            (AdminCheck::NotAnswering, None)
        );
        assert_eq!(waits.get(), 2, "a wait between tries, none after the last");
        assert_eq!(
            check_admin_address(std::slice::from_ref(&nobody), t, 3, |_| false),
            (AdminCheck::Checking, None),
            "the module stopping ends the check"
        );
        // Something answers that is not Envoy's admin: one try is enough.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = AdminAddress::Tcp(l.local_addr().unwrap());
        let server = thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            serve_once(s, b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nready\n")
        });
        let never = |d: Duration| {
            assert!(d.is_zero(), "no retry after an answer");
            true
        };
        assert_eq!(
            check_admin_address(std::slice::from_ref(&addr), t, 3, never),
            (AdminCheck::NotAdmin, None)
        );
        assert!(server.join().unwrap().starts_with("GET /ready "));
    }

    /// #44 item 10: a module stopping while the check waits on a silent address tries none of
    /// the others (each could take the whole timeout, past the teardown bound).
    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri isolates the process")]
    fn a_stopping_module_tries_no_more_addresses() {
        // Listeners that never answer: the kernel completes the connection, nobody reads.
        let silent: Vec<TcpListener> = (0..3)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs: Vec<AdminAddress> = silent
            .iter()
            .map(|l| AdminAddress::Tcp(l.local_addr().unwrap()))
            .collect();
        let asked = std::cell::Cell::new(0);
        // Open for the first address, stopping from then on.
        let wait = |_| {
            asked.set(asked.get() + 1);
            asked.get() == 1
        };
        assert_eq!(
            check_admin_address(&addrs, Duration::from_millis(200), 3, wait),
            (AdminCheck::Checking, None)
        );
        let contacted: Vec<bool> = silent
            .iter()
            .map(|l| {
                l.set_nonblocking(true).unwrap();
                l.accept().is_ok()
            })
            .collect();
        assert_eq!(
            contacted,
            [true, false, false],
            "only the first address was tried"
        );
    }

    /// Several candidates (a platform whose releases put the admin in different places): the
    /// one that answers as Envoy's admin is found, whichever place in the list it has, and one
    /// where nothing listens does not stop the search.
    #[test]
    #[cfg_attr(miri, ignore = "sockets: Miri isolates the process")]
    fn the_start_check_finds_the_admin_among_several_addresses() {
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let nobody = AdminAddress::Tcp(free);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let admin = AdminAddress::Tcp(l.local_addr().unwrap());
        let server = thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            serve_once(s, b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nLIVE\n")
        });
        let never = |d: Duration| {
            assert!(d.is_zero(), "found in the first round");
            true
        };
        assert_eq!(
            check_admin_address(&[nobody, admin.clone()], Duration::from_secs(2), 3, never),
            (AdminCheck::Recognised, Some(admin))
        );
        server.join().unwrap();
    }
}
