//! Control endpoints: routing of `/ready`, `/drain/status` and `/drain`. Pure: takes the method
//! and path bytes as Envoy gave them (never trusted to be UTF-8) and says what to answer.

/// What a control request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET`/`HEAD /ready`.
    Ready,
    /// `GET`/`HEAD /drain/status`.
    Status,
    /// `GET`/`POST /drain`; `wait` is false with `?wait=false`.
    Drain {
        wait: bool,
    },
    /// Known path, wrong method: 405 with this `Allow` header.
    MethodNotAllowed {
        allow: &'static str,
    },
    /// A malformed request to a known endpoint: 400 with this reason.
    BadRequest(String),
    NotFound,
}

/// Longest path we look at; anything longer is not one of ours.
pub const MAX_PATH: usize = 2048;

pub fn route(method: &[u8], path: &[u8]) -> Route {
    if path.len() > MAX_PATH {
        return Route::NotFound;
    }
    let (path, query) = match path.iter().position(|&b| b == b'?') {
        Some(i) => (&path[..i], Some(&path[i + 1..])),
        None => (path, None),
    };
    let (allow, read_only) = match path {
        b"/ready" | b"/drain/status" => ("GET, HEAD", true),
        b"/drain" => ("GET, POST", false),
        _ => return Route::NotFound,
    };
    let method_ok = if read_only {
        method == b"GET" || method == b"HEAD"
    } else {
        method == b"GET" || method == b"POST"
    };
    if !method_ok {
        return Route::MethodNotAllowed { allow };
    }
    match path {
        b"/ready" => Route::Ready,
        b"/drain/status" => Route::Status,
        _ => match parse_wait(query.unwrap_or(b"")) {
            Ok(wait) => Route::Drain { wait },
            Err(reason) => Route::BadRequest(reason),
        },
    }
}

/// `wait=true|false|1|0`; other parameters are refused so typos do not silently change behaviour.
fn parse_wait(query: &[u8]) -> Result<bool, String> {
    let mut wait = true;
    for pair in query.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &b""[..]),
        };
        match (k, v) {
            (b"wait", b"true" | b"1") => wait = true,
            (b"wait", b"false" | b"0") => wait = false,
            (b"wait", _) => {
                return Err(format!(
                    "invalid value for `wait`: {:?} (expected true or false)",
                    String::from_utf8_lossy(v)
                ))
            }
            _ => {
                return Err(format!(
                    "unknown query parameter {:?} (only `wait` is accepted)",
                    String::from_utf8_lossy(k)
                ))
            }
        }
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
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
}
