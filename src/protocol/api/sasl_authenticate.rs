//! SaslAuthenticate (key 36): one round of a SASL exchange, after a SaslHandshake v1 named
//! the mechanism. The request carries the client's mechanism message, the response the
//! broker's (or its error).
//!
//! We speak v0..=2 (flexible from v2). v1 adds `session_lifetime_ms` to the response
//! (KIP-368: how long the broker accepts the session before it must re-authenticate; 0 =
//! no limit). The answer's `error_code` is 0, `SASL_AUTHENTICATION_FAILED` (58, with the
//! broker's reason in `error_message`) or `ILLEGAL_SASL_STATE` (34).
//!
//! The request's bytes may hold a password (PLAIN) or a token (OAUTHBEARER): they are an
//! [`AuthBytes`], whose `Debug` prints only the length.
//!
//! Layouts follow `SaslAuthenticateRequest.json` / `SaslAuthenticateResponse.json`; neither
//! declares tagged fields.

use std::fmt;

use super::Api;
use crate::protocol::message::{Bytes, Version, Wire};
use crate::protocol::wire::{DecodeError, Reader, Writer};
use crate::protocol::wire_struct;

/// Opaque SASL bytes (`BYTES`, non-null) that may be secret: `Debug` shows the length only.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct AuthBytes(pub Vec<u8>);

impl fmt::Debug for AuthBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuthBytes({} bytes)", self.0.len())
    }
}

impl Wire for AuthBytes {
    fn write(&self, w: &mut Writer, v: Version) {
        w.nullable_bytes(Some(&self.0), v.flexible);
    }
    fn read(r: &mut Reader<'_>, v: Version) -> Result<Self, DecodeError> {
        match r.nullable_bytes(v.flexible)? {
            Some(b) => Ok(AuthBytes(b.to_vec())),
            None => Err(DecodeError::invalid("null where bytes are required")),
        }
    }
}

wire_struct! {
    /// SaslAuthenticate request.
    pub struct SaslAuthenticateRequest {
        /// The client's message of the mechanism (secret for PLAIN and OAUTHBEARER).
        auth_bytes: AuthBytes, since 0;
    }

    /// SaslAuthenticate response.
    pub struct SaslAuthenticateResponse {
        error_code: i16, since 0;
        /// The broker's reason for an error, or null.
        error_message: Option<String>, since 0;
        /// The broker's message of the mechanism.
        auth_bytes: Bytes, since 0;
        /// KIP-368: milliseconds the session may last before re-authentication (0 = no
        /// limit; v1+).
        session_lifetime_ms: i64, since 1;
    }
}

impl Api for SaslAuthenticateRequest {
    const KEY: i16 = 36;
    const NAME: &'static str = "SaslAuthenticate";
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 2;
    const FLEXIBLE_FROM: i16 = 2;
    type Response = SaslAuthenticateResponse;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::{
        decode_request, decode_response, encode_request, encode_response,
    };

    fn versions() -> std::ops::RangeInclusive<i16> {
        SaslAuthenticateRequest::MIN_VERSION..=SaslAuthenticateRequest::MAX_VERSION
    }

    fn request() -> SaslAuthenticateRequest {
        SaslAuthenticateRequest {
            auth_bytes: AuthBytes(b"\0alice\0secret".to_vec()),
        }
    }

    /// A response with every field set away from its default.
    fn response() -> SaslAuthenticateResponse {
        SaslAuthenticateResponse {
            error_code: 58,
            error_message: Some("Authentication failed".into()),
            auth_bytes: Bytes(b"v=abc".to_vec()),
            session_lifetime_ms: 3_600_000,
        }
    }

    fn response_seen_at(v: i16) -> SaslAuthenticateResponse {
        let mut r = response();
        if v < 1 {
            r.session_lifetime_ms = 0;
        }
        r
    }

    #[test]
    fn claims_v0_to_v2_flexible_from_v2() {
        assert_eq!(
            (
                SaslAuthenticateRequest::KEY,
                SaslAuthenticateRequest::MIN_VERSION,
                SaslAuthenticateRequest::MAX_VERSION,
                SaslAuthenticateRequest::FLEXIBLE_FROM
            ),
            (36, 0, 2, 2)
        );
        assert_eq!(SaslAuthenticateRequest::throttle_time_ms(&response()), 0);
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 6, "me");
            let (ver, corr, back) = decode_request::<SaslAuthenticateRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 6));
            assert_eq!(back, request(), "request v{v}");

            let frame = encode_response::<SaslAuthenticateRequest>(&response(), v, 6);
            let back = decode_response::<SaslAuthenticateRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn defaults_are_the_schema_defaults() {
        let r = SaslAuthenticateResponse::default();
        assert_eq!(
            (
                r.error_code,
                r.error_message,
                r.auth_bytes.0.len(),
                r.session_lifetime_ms
            ),
            (0, None, 0, 0)
        );
        assert!(SaslAuthenticateRequest::default().auth_bytes.0.is_empty());
    }

    #[test]
    fn the_request_debug_output_shows_no_auth_bytes() {
        let shown = format!("{:?}", request());
        assert!(
            !shown.contains("secret") && !shown.contains("115"),
            "{shown}"
        );
        assert!(shown.contains("13 bytes"), "{shown}");
    }

    #[test]
    fn v0_and_v2_requests_match_the_schema_byte_for_byte() {
        let req = SaslAuthenticateRequest {
            auth_bytes: AuthBytes(vec![0, b'u', 0, b'p']),
        };
        let frame = encode_request(&req, 0, 7, "c");
        let mut want = vec![0, 36, 0, 0, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0, 0, 0, 4, 0, b'u', 0, b'p']); // auth_bytes, int32 length
        assert_eq!(&frame[4..], &want[..]);
        let frame = encode_request(&req, 2, 7, "c");
        let mut want = vec![0, 36, 0, 2, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.extend_from_slice(&[5, 0, b'u', 0, b'p']); // auth_bytes, compact
        want.push(0); // tags
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v0_v1_and_v2_responses_are_decoded_as_the_schema_lays_them_out() {
        // v0: correlation id, error code, null message, two auth bytes.
        let b = [0, 0, 0, 3, 0, 0, 0xff, 0xff, 0, 0, 0, 2, b'o', b'k'];
        let resp = decode_response::<SaslAuthenticateRequest>(&b, 0).unwrap();
        assert_eq!(
            resp,
            SaslAuthenticateResponse {
                auth_bytes: Bytes(b"ok".to_vec()),
                ..Default::default()
            }
        );
        // v1: the session lifetime follows.
        let mut b = b.to_vec();
        b.extend_from_slice(&1000i64.to_be_bytes());
        let resp = decode_response::<SaslAuthenticateRequest>(&b, 1).unwrap();
        assert_eq!(resp.session_lifetime_ms, 1000);
        // v2: header tags, error code, compact message "no", compact empty bytes, lifetime,
        // body tags (an unknown one is skipped).
        let mut b = vec![0, 0, 0, 3, 0, 0, 58, 3, b'n', b'o', 1];
        b.extend_from_slice(&7i64.to_be_bytes());
        b.extend_from_slice(&[1, 9, 1, 0xee]);
        let resp = decode_response::<SaslAuthenticateRequest>(&b, 2).unwrap();
        assert_eq!(
            (
                resp.error_code,
                resp.error_message.as_deref(),
                resp.session_lifetime_ms
            ),
            (58, Some("no"), 7)
        );
        assert!(resp.auth_bytes.0.is_empty());
    }

    #[test]
    fn null_auth_bytes_truncated_frames_and_impossible_lengths_are_errors() {
        let b = [0, 0, 0, 3, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert!(decode_response::<SaslAuthenticateRequest>(&b, 0).is_err());
        for v in versions() {
            let frame = encode_response::<SaslAuthenticateRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<SaslAuthenticateRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<SaslAuthenticateRequest>(&frame[4..cut]).is_err());
            }
        }
        // Auth bytes claiming 2^31 - 1 bytes are rejected before allocating.
        let b = [0, 0, 0, 3, 0, 0, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 1];
        assert!(decode_response::<SaslAuthenticateRequest>(&b, 0).is_err());
    }
}
