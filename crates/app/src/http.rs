//! HTTP/1.x message heads (RFC 9112): the request line and the response status
//! line, and the headers hindsight keeps (Host, User-Agent, Content-Type).

use crate::text;

/// Request methods recognised at the start of a stream (RFC 9110 and WebDAV's
/// common ones): anything else is not taken for HTTP.
const METHODS: [&[u8]; 14] = [
    b"GET",
    b"POST",
    b"HEAD",
    b"PUT",
    b"DELETE",
    b"OPTIONS",
    b"CONNECT",
    b"TRACE",
    b"PATCH",
    b"PROPFIND",
    b"PROPPATCH",
    b"MKCOL",
    b"COPY",
    b"MOVE",
];

/// A request head.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Request {
    /// The method.
    pub method: String,
    /// The request target, as sent.
    pub uri: String,
    /// The `Host` header's value.
    pub host: Option<String>,
    /// The `User-Agent` header's value.
    pub user_agent: Option<String>,
}

/// A response head.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The `Content-Type` header's value.
    pub content_type: Option<String>,
}

/// True when `stream` starts like a request line (a known method and a space),
/// as far as it goes.
pub fn looks_like_request(stream: &[u8]) -> bool {
    // Methods are upper-case letters: most streams fail on the first byte.
    if !stream.first().is_some_and(u8::is_ascii_uppercase) {
        return false;
    }
    METHODS.iter().any(|method| {
        crate::starts_so_far(stream, method) && stream.get(method.len()).is_none_or(|&b| b == b' ')
    })
}

/// True when `stream` starts like a status line (`HTTP/1.`), as far as it goes.
pub fn looks_like_response(stream: &[u8]) -> bool {
    crate::starts_so_far(stream, b"HTTP/1.")
}

/// The head's lines: up to the empty line that ends it, or, when `complete` is
/// false (the stream was cut before it), the lines there are, the last one
/// cut. `None` when the head has not ended and `complete` is true.
fn lines(stream: &[u8], complete: bool) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut rest = stream;
    loop {
        let Some(end) = memchr_newline(rest) else {
            if complete {
                return None;
            }
            if !rest.is_empty() {
                out.push(rest);
            }
            return Some(out);
        };
        let (line, tail) = rest.split_at(end);
        rest = tail.get(1..).unwrap_or_default();
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return Some(out);
        }
        out.push(line);
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

/// The value of header `name` (case-insensitive) among `lines`, trimmed.
fn header(lines: &[&[u8]], name: &str) -> Option<String> {
    lines.iter().find_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        let (key, value) = line.split_at(colon);
        key.eq_ignore_ascii_case(name.as_bytes())
            .then(|| text(value.get(1..).unwrap_or_default().trim_ascii()))
    })
}

/// Parses the request head at the start of `stream`. With `complete` false, a
/// head cut short gives what its whole lines hold. `None` when it has not
/// ended yet (and `complete` is true) or is not a request.
pub fn request(stream: &[u8], complete: bool) -> Option<Request> {
    let lines = lines(stream, complete)?;
    let first = lines.first()?;
    // Runs of spaces separate as one, and the version is the last word: a
    // target with spaces in it is its first word (Wireshark reads them so).
    let parts: Vec<&[u8]> = first
        .split(|&b| b == b' ')
        .filter(|part| !part.is_empty())
        .collect();
    let (&method, &uri) = (parts.first()?, parts.get(1)?);
    // A line cut short (a snap length) may end before or in its version.
    let cut = !complete && lines.len() == 1;
    let version_ok = match parts.get(2..).and_then(<[&[u8]]>::last) {
        Some(version) => version.starts_with(b"HTTP/") || (cut && b"HTTP/".starts_with(version)),
        None => cut,
    };
    if !METHODS.contains(&method) || !version_ok {
        return None;
    }
    let headers = lines.get(1..).unwrap_or_default();
    Some(Request {
        method: text(method),
        uri: text(uri),
        host: header(headers, "host"),
        user_agent: header(headers, "user-agent"),
    })
}

/// Parses the response head at the start of `stream` (see [`request`]).
pub fn response(stream: &[u8], complete: bool) -> Option<Response> {
    let lines = lines(stream, complete)?;
    let first = lines.first()?;
    let mut parts = first.splitn(3, |&b| b == b' ');
    let version = parts.next()?;
    let status = parts.next()?;
    if !version.starts_with(b"HTTP/1.") || status.len() != 3 {
        return None;
    }
    let status = std::str::from_utf8(status).ok()?.parse().ok()?;
    Some(Response {
        status,
        content_type: header(lines.get(1..).unwrap_or_default(), "content-type"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_gives_method_uri_host_and_agent() {
        let head =
            b"GET /a?b=1 HTTP/1.1\r\nHost:  example.com \r\nuser-agent: curl/8.0\r\n\r\nbody";
        let request = request(head, true).unwrap();
        assert_eq!(request.method, "GET");
        assert_eq!(request.uri, "/a?b=1");
        assert_eq!(request.host.as_deref(), Some("example.com"));
        assert_eq!(request.user_agent.as_deref(), Some("curl/8.0"));
        assert_eq!(super::request(&head[..30], true), None, "not ended");
        for cut in [
            &b"GET /images/x.gif HTT"[..],
            b"GET /images/x.gif",
            b"GET /images/x.gif HTTP/1.1\r\nHo",
        ] {
            assert_eq!(super::request(cut, false).unwrap().uri, "/images/x.gif");
            assert_eq!(super::request(cut, true), None);
        }
        let odd = b"GET   /a b|c HTTP/1.0\r\n\r\n";
        assert_eq!(super::request(odd, true).unwrap().uri, "/a");
        let cut = super::request(&head[..45], false).unwrap();
        assert_eq!(cut.host.as_deref(), Some("example.com"));
        assert_eq!(cut.user_agent, None);
    }

    #[test]
    fn a_response_head_gives_status_and_content_type() {
        let head = b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\n\r\n";
        let response = response(head, true).unwrap();
        assert_eq!(response.status, 404);
        assert_eq!(response.content_type.as_deref(), Some("text/html"));
        assert_eq!(super::response(b"HTTP/1.1 4x4 x\r\n\r\n", true), None);
    }

    #[test]
    fn starts_are_recognised_as_far_as_they_go() {
        assert!(looks_like_request(b"GE"));
        assert!(looks_like_request(b"GET /"));
        assert!(!looks_like_request(b"GETX"));
        assert!(!looks_like_request(b"\x16\x03\x01"));
        assert!(looks_like_response(b"HTTP/1.0 200"));
        assert!(!looks_like_response(b"HTTP/2"));
    }
}
