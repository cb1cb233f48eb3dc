//! OAUTHBEARER (RFC 7628, KIP-255, extensions KIP-342): the client's initial response,
//! and the status of the broker's JSON error.
//!
//! ```text
//!   client   n,,<01>auth=Bearer <token><01>[<key>=<value><01>]...<01>
//!   broker   (empty: accepted)  |  {"status":"invalid_token",...}  (refused)
//!   client   <01>               (only after a refusal: RFC 7628 section 3.2.3)
//!   broker   SASL_AUTHENTICATION_FAILED
//! ```
//!
//! What is checked before anything is sent, so the broker never sees a message it cannot
//! parse (and so the framing cannot be broken by a token or an extension):
//! - the token is an RFC 6750 `b64token`: `A-Za-z0-9-._~+/`, then `=` padding only; a JWS
//!   compact token (base64url parts joined by `.`) always is;
//! - extension keys match `[A-Za-z]+` and are not `auth`; values are one or more of
//!   printable ASCII, space, tab, CR, LF (Kafka's `OAuthBearerClientInitialResponse`
//!   patterns, which the broker applies).
//!
//! A refusal is reported as [`AuthErrorKind::Unsupported`](super::AuthErrorKind): the
//! credentials cannot be expressed in this mechanism, and sending them again cannot work.
//! The messages never show the token, nor an extension's value.

use crate::security::OAuthBearerToken;

/// The separator of the GS2 key-value pairs (`kvsep`).
pub(crate) const KVSEP: u8 = 0x01;

/// The client's initial response for `token`, or why it cannot be made.
pub(crate) fn client_message(token: &OAuthBearerToken) -> Result<Vec<u8>, String> {
    let value = token.value.expose();
    if !is_b64token(value) {
        return Err(
            "the token is not an RFC 6750 bearer token (letters, digits and -._~+/ then \
             optional = padding); its value is not shown"
                .into(),
        );
    }
    for (key, v) in &token.extensions {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(format!(
                "the SASL extension key {:?} is invalid: keys are ASCII letters only",
                super::broker_text(key)
            ));
        }
        if key == "auth" {
            return Err("the SASL extension key \"auth\" is reserved for the token".into());
        }
        let value_ok = !v.is_empty()
            && v.bytes()
                .all(|b| (0x21..=0x7e).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n'));
        if !value_ok {
            return Err(format!(
                "the value of SASL extension {key} is invalid: it must be printable ASCII \
                 (spaces, tabs and line breaks allowed), and not empty"
            ));
        }
    }
    let mut out = Vec::with_capacity(32 + value.len());
    out.extend_from_slice(b"n,,");
    out.push(KVSEP);
    out.extend_from_slice(b"auth=Bearer ");
    out.extend_from_slice(value.as_bytes());
    out.push(KVSEP);
    for (key, v) in &token.extensions {
        out.extend_from_slice(key.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(KVSEP);
    }
    out.push(KVSEP);
    Ok(out)
}

/// Whether `s` is an RFC 6750 `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" /
/// "+" / "/" ) *"="`.
fn is_b64token(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    !body.is_empty()
        && body.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        })
}

/// Longest status we keep, in characters (a real one is a short token).
pub(crate) const MAX_STATUS: usize = 64;

/// The `"status"` member of the broker's JSON error (RFC 7628 section 3.2.2), if the
/// answer holds one: the value of the first string-valued `"status"` key found in key
/// position, unescaped, at most [`MAX_STATUS`] characters. A tiny one-pass scanner rather
/// than a JSON parser: it never fails, never recurses, and only reads what is there.
pub(crate) fn error_status(json: &[u8]) -> Option<String> {
    let mut i = 0;
    // The last byte outside a string that was not whitespace.
    let mut before = 0u8;
    while i < json.len() {
        let b = json[i];
        if b != b'"' {
            if !b.is_ascii_whitespace() {
                before = b;
            }
            i += 1;
            continue;
        }
        let (key, end) = read_string(json, i);
        i = end;
        let in_key_position = matches!(before, b'{' | b',');
        before = b'"';
        if !in_key_position || key.as_deref() != Some("status") {
            continue;
        }
        let mut j = skip_whitespace(json, i);
        if json.get(j) != Some(&b':') {
            continue;
        }
        j = skip_whitespace(json, j + 1);
        if json.get(j) == Some(&b'"') {
            let (value, _) = read_string(json, j);
            if let Some(v) = value {
                return Some(v);
            }
        }
    }
    None
}

/// The index of the first non-whitespace byte at or after `i`.
fn skip_whitespace(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// Reads the JSON string starting with the `"` at `start`: its unescaped value (`None` if
/// it is unterminated or holds invalid UTF-8) and the index after its closing quote. Only
/// the first [`MAX_STATUS`] characters are kept, so a huge string costs no memory.
fn read_string(json: &[u8], start: usize) -> (Option<String>, usize) {
    let mut out = Vec::new();
    let mut i = start + 1;
    let mut chars = 0usize;
    let mut full = false;
    while i < json.len() {
        let b = json[i];
        i += 1;
        let decoded: Option<char> = match b {
            b'"' => {
                return (String::from_utf8(out).ok(), i);
            }
            b'\\' => {
                let Some(&e) = json.get(i) else { break };
                i += 1;
                match e {
                    b'"' => Some('"'),
                    b'\\' => Some('\\'),
                    b'/' => Some('/'),
                    b'b' => Some('\u{8}'),
                    b'f' => Some('\u{c}'),
                    b'n' => Some('\n'),
                    b'r' => Some('\r'),
                    b't' => Some('\t'),
                    b'u' => {
                        let hex = json.get(i..i + 4).and_then(|h| std::str::from_utf8(h).ok());
                        let code = hex.and_then(|h| u32::from_str_radix(h, 16).ok());
                        if code.is_some() {
                            i += 4;
                        }
                        // Surrogates (and so pairs) come out as U+FFFD: a status is ASCII.
                        Some(code.and_then(char::from_u32).unwrap_or('\u{fffd}'))
                    }
                    _ => Some('\u{fffd}'),
                }
            }
            _ => None,
        };
        // Keep the first MAX_STATUS characters whole (a character starts at an escape or
        // at a byte that is not a UTF-8 continuation byte); skip the rest.
        let starts_char = decoded.is_some() || b & 0xc0 != 0x80;
        if starts_char && chars == MAX_STATUS {
            full = true;
        }
        if full {
            continue;
        }
        if starts_char {
            chars += 1;
        }
        match decoded {
            Some(c) => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            None => out.push(b),
        }
    }
    (None, json.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::Secret;

    fn token(value: &str, extensions: &[(&str, &str)]) -> OAuthBearerToken {
        OAuthBearerToken {
            value: Secret::from(value),
            expires_at: std::time::UNIX_EPOCH,
            principal: "alice".into(),
            extensions: extensions
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn the_initial_response_is_kafkas_gs2_message() {
        let m = client_message(&token("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.", &[])).unwrap();
        assert_eq!(
            m,
            b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.\x01\x01"
        );
        let m = client_message(&token(
            "abc==",
            &[("traceId", "7 x"), ("logicalCluster", "lkc-1")],
        ))
        .unwrap();
        assert_eq!(
            m,
            b"n,,\x01auth=Bearer abc==\x01traceId=7 x\x01logicalCluster=lkc-1\x01\x01"
        );
    }

    #[test]
    fn tokens_that_are_not_bearer_tokens_are_refused_without_showing_them() {
        for bad in ["", "==", "a b", "a\x01b", "abc=d", "t\u{e9}", "a,b"] {
            let e = client_message(&token(bad, &[])).unwrap_err();
            assert!(e.contains("not an RFC 6750 bearer token"), "{bad:?}: {e}");
        }
        for ok in ["a", "A-._~+/z==", "0"] {
            client_message(&token(ok, &[])).unwrap();
        }
        let e = client_message(&token("secret token", &[])).unwrap_err();
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn extension_keys_must_be_letters_and_not_auth() {
        for bad in ["", "a1", "a-b", "a=b", "\u{e9}t\u{e9}"] {
            let e = client_message(&token("t", &[(bad, "v")])).unwrap_err();
            assert!(e.contains("keys are ASCII letters only"), "{bad:?}: {e}");
        }
        let e = client_message(&token("t", &[("auth", "v")])).unwrap_err();
        assert!(e.contains("reserved"), "{e}");
        // "Auth" is another key (Kafka's check is case-sensitive too).
        client_message(&token("t", &[("Auth", "v")])).unwrap();
    }

    #[test]
    fn extension_values_must_be_printable_ascii_and_not_empty() {
        for bad in ["", "a\x01b", "caf\u{e9}", "\x7f", "\0"] {
            let e = client_message(&token("t", &[("k", bad)])).unwrap_err();
            assert!(
                e.contains("value of SASL extension k is invalid"),
                "{bad:?}: {e}"
            );
            assert!(bad.is_empty() || !e.contains(bad), "{e}");
        }
        client_message(&token("t", &[("k", " ~!\t\r\n=")])).unwrap();
    }

    #[test]
    fn the_status_is_read_from_the_brokers_json_error() {
        let s = |j: &str| error_status(j.as_bytes());
        assert_eq!(
            s(r#"{"status":"invalid_token"}"#).as_deref(),
            Some("invalid_token")
        );
        assert_eq!(
            s(r#" { "scope" : "a b", "status" : "insufficient_scope" } "#).as_deref(),
            Some("insufficient_scope")
        );
        assert_eq!(
            s(r#"{"openid-configuration":"x","status":"invalid\u005ftoken\n"}"#).as_deref(),
            Some("invalid_token\n")
        );
        assert_eq!(s(r#"{"a":{"status":"nested"}}"#).as_deref(), Some("nested"));
    }

    #[test]
    fn a_status_that_is_not_a_key_with_a_string_value_is_not_taken() {
        let s = |j: &str| error_status(j.as_bytes());
        assert_eq!(s(r#"{"scope":"status","x":"y"}"#), None); // a value, not a key
        assert_eq!(s(r#"["status","x"]"#), None);
        assert_eq!(s(r#"{"status":401}"#), None);
        assert_eq!(
            s(r#"{"status":null,"status":"second"}"#).as_deref(),
            Some("second")
        );
        assert_eq!(s(r#"{"stat\"us":"x"}"#), None);
        assert_eq!(s(r#"{"status""#), None);
        assert_eq!(s(r#"{"status":"unterminated"#), None);
        assert_eq!(s(r#"{"status":"bad escape at the end\"#), None);
        assert_eq!(s(""), None);
        assert_eq!(s("not json at all"), None);
        assert_eq!(error_status(b"{\"status\":\"\xff\xfe\"}"), None);
    }

    #[test]
    fn odd_escapes_become_replacement_characters_and_long_statuses_are_cut() {
        let s = |j: &str| error_status(j.as_bytes());
        assert_eq!(s(r#"{"status":"a\qb"}"#).as_deref(), Some("a\u{fffd}b"));
        assert_eq!(s(r#"{"status":"\ud800x"}"#).as_deref(), Some("\u{fffd}x"));
        assert_eq!(s(r#"{"status":"\u12"}"#).as_deref(), Some("\u{fffd}12"));
        let long = format!(r#"{{"status":"{}","x":"y"}}"#, "\u{e9}".repeat(10_000));
        let got = s(&long).unwrap();
        assert_eq!(got.chars().count(), MAX_STATUS);
        assert!(got.chars().all(|c| c == '\u{e9}'));
    }
}
