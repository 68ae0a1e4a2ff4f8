//! Unit tests of `http_filter::control`.

use super::*;

#[test]
fn known_endpoints() {
    assert_eq!(route(b"GET", b"/ready"), Route::Ready);
    assert_eq!(route(b"HEAD", b"/ready"), Route::Ready);
    assert_eq!(route(b"GET", b"/drain/status"), Route::Status);
    assert_eq!(route(b"GET", b"/drain"), Route::Drain { wait: true });
    assert_eq!(route(b"POST", b"/drain"), Route::Drain { wait: true });
    assert_eq!(
        route(b"POST", b"/drain?wait=false"),
        Route::Drain { wait: false }
    );
    assert_eq!(
        route(b"GET", b"/drain?wait=0"),
        Route::Drain { wait: false }
    );
    assert_eq!(
        route(b"GET", b"/drain?wait=true"),
        Route::Drain { wait: true }
    );
    assert_eq!(route(b"GET", b"/ready?probe=kubelet"), Route::Ready);
}

#[test]
fn wrong_method_is_405_with_allow() {
    assert_eq!(
        route(b"POST", b"/ready"),
        Route::MethodNotAllowed { allow: "GET, HEAD" }
    );
    assert_eq!(
        route(b"DELETE", b"/drain"),
        Route::MethodNotAllowed { allow: "GET, POST" }
    );
    assert_eq!(
        route(b"PUT", b"/drain/status"),
        Route::MethodNotAllowed { allow: "GET, HEAD" }
    );
}

#[test]
fn unknown_and_tricky_paths_are_404() {
    for p in [
        &b"/"[..],
        b"/readyz",
        b"/READY",
        b"/ready/",
        b"/drain/",
        b"//drain",
        b"/%64rain",
        b"/drain/status/x",
        b"",
        b"\xff\xfe",
    ] {
        assert_eq!(route(b"GET", p), Route::NotFound, "{p:?}");
    }
    let long = [b'a'; MAX_PATH + 1];
    assert_eq!(route(b"GET", &long), Route::NotFound);
}

#[test]
fn bad_queries_are_400_with_reason() {
    match route(b"GET", b"/drain?wait=maybe") {
        Route::BadRequest(r) => assert!(r.contains("wait"), "{r}"),
        other => panic!("{other:?}"),
    }
    match route(b"GET", b"/drain?force=1") {
        Route::BadRequest(r) => assert!(r.contains("force"), "{r}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        route(b"GET", b"/drain?wait=\xff"),
        Route::BadRequest(_)
    ));
}
