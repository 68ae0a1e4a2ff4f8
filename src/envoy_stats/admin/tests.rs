//! Unit tests of the admin calls, against one-connection servers on loopback and unix sockets.

use super::*;
use std::io::{Read, Write};
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
        post(
            &HttpAdmin,
            &addr,
            "/healthcheck/fail",
            Duration::from_secs(5)
        ),
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
        &HttpAdmin,
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
        post(
            &HttpAdmin,
            &addr,
            "/healthcheck/fail",
            Duration::from_secs(5)
        ),
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
        let r = check(&HttpAdmin, &addr, Duration::from_secs(5));
        assert!(server
            .join()
            .unwrap()
            .starts_with("GET /ready HTTP/1.1\r\n"));
        r
    };
    assert_eq!(
        answer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nLIVE\n\r\n0\r\n\r\n"),
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
        assert_eq!(
            check(&HttpAdmin, &addr, Duration::from_secs(5)),
            Ok("LIVE".to_string())
        );
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
        &HttpAdmin,
        &AdminAddress::Tcp(port),
        "/healthcheck/fail",
        Duration::from_secs(2),
    );
    assert!(
        err.as_ref().is_err_and(|e| e.contains(&port.to_string())),
        "{err:?}"
    );
    let missing = AdminAddress::Unix("/nonexistent/graceful-drain/admin.sock".into());
    assert!(post(
        &HttpAdmin,
        &missing,
        "/healthcheck/fail",
        Duration::from_secs(2)
    )
    .is_err());

    // A peer that accepts and never answers: the deadline ends the call, and says so.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = AdminAddress::Tcp(l.local_addr().unwrap());
    let t0 = std::time::Instant::now();
    let err = post(
        &HttpAdmin,
        &addr,
        "/healthcheck/fail",
        Duration::from_millis(300),
    );
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
    let err = post(
        &HttpAdmin,
        &addr,
        "/healthcheck/fail",
        Duration::from_secs(5),
    );
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
        check_admin_address(&HttpAdmin, std::slice::from_ref(&nobody), t, 3, counted),
        (AdminCheck::NotAnswering, None)
    );
    assert_eq!(waits.get(), 2, "a wait between tries, none after the last");
    assert_eq!(
        check_admin_address(&HttpAdmin, std::slice::from_ref(&nobody), t, 3, |_| false),
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
        check_admin_address(&HttpAdmin, std::slice::from_ref(&addr), t, 3, never),
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
        check_admin_address(&HttpAdmin, &addrs, Duration::from_millis(200), 3, wait),
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
        check_admin_address(
            &HttpAdmin,
            &[nobody, admin.clone()],
            Duration::from_secs(2),
            3,
            never
        ),
        (AdminCheck::Recognised, Some(admin))
    );
    server.join().unwrap();
}
