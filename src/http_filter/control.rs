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
mod tests;
