//! The HTTP surface's plain parts, shared by every route: a request as the edge read it, a
//! response, the page size bound, and how a query string and a path segment are decoded.

use serde_json::{json, Value};

/// Largest page.
pub const MAX_PAGE: u32 = 200;

/// A request, as the edge read it.
#[derive(Debug, Clone, Default)]
pub struct ApiRequest {
    /// "GET", "POST", ...
    pub method: String,
    /// URL path, percent-encoded as received.
    pub path: String,
    /// Query string without `?`.
    pub query: String,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// Body bytes.
    pub body: Vec<u8>,
    /// The W3C trace context of its `traceparent` and `tracestate` headers, when valid (design
    /// §27): the jobs it submits carry it unless they name their own.
    pub trace: Option<crate::trace::TraceContext>,
}

/// A response.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiResponse {
    /// Status code.
    pub status: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Body text.
    pub body: String,
    /// Headers beyond content type (the edge adds `cache-control` and `nosniff` to every answer).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiResponse {
    /// A JSON answer.
    pub fn json(status: u16, v: Value) -> Self {
        ApiResponse { status, content_type: "application/json", body: v.to_string(), headers: Vec::new() }
    }
    /// `{"error": msg}`.
    pub fn error(status: u16, msg: impl Into<String>) -> Self {
        Self::json(status, json!({ "error": msg.into() }))
    }
    /// An error answer with a JSON body already built.
    pub fn json_error(status: u16, body: Value) -> Self {
        Self::json(status, body)
    }
    /// 413 for a body over `limit` bytes.
    pub fn too_large(limit: usize) -> Self {
        Self::error(413, format!("body is larger than {limit} bytes"))
    }
    /// The body parsed as JSON (for tests and callers that inspect responses).
    pub fn json_body(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// A query string's `name=value` pairs, decoded as HTML forms and `URLSearchParams` write them
/// (`+` is a space, then `%XX` escapes).
pub fn query_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    let decode = |s: &str| percent_decode(&s.replace('+', " "));
    query.split('&').filter(|p| !p.is_empty()).map(move |p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (decode(k), decode(v))
    })
}

/// Decodes `%XX` escapes (a path segment's: `+` stays a plus).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_escapes_are_decoded() {
        assert_eq!(percent_decode("a%2Fb%20c"), "a/b c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%4"), "%4");
    }

    #[test]
    fn query_values_are_read_as_forms_write_them() {
        let pairs: Vec<(String, String)> = query_pairs("ordering_key=a+b%2Bc&&x%3Dy=1%202&flag").collect();
        assert_eq!(
            pairs,
            vec![("ordering_key".into(), "a b+c".into()), ("x=y".into(), "1 2".into()), ("flag".into(), String::new())]
        );
        assert_eq!(percent_decode("a+b"), "a+b", "a path keeps its plus");
    }
}
