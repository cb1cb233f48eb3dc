//! SaslHandshake (key 17): the client names the SASL mechanism it will use; the broker
//! answers whether it enables it, and lists the mechanisms it does.
//!
//! We speak v1 only: v0 (removed in Kafka 4.0) carried the SASL tokens as raw frames after
//! the handshake, where v1 wraps them in SaslAuthenticate requests (key 36). Neither
//! version is flexible. The answer's `error_code` is 0, `UNSUPPORTED_SASL_MECHANISM` (33:
//! `mechanisms` lists what the broker enables) or `ILLEGAL_SASL_STATE` (34: a handshake
//! where the broker expects none).
//!
//! Layouts follow `SaslHandshakeRequest.json` / `SaslHandshakeResponse.json`.

use super::Api;
use crate::protocol::wire_struct;

wire_struct! {
    /// SaslHandshake request.
    pub struct SaslHandshakeRequest {
        /// The mechanism's name (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER`).
        mechanism: String, since 0;
    }

    /// SaslHandshake response.
    pub struct SaslHandshakeResponse {
        error_code: i16, since 0;
        /// The mechanisms the broker enables on this listener.
        mechanisms: Vec<String>, since 0;
    }
}

impl Api for SaslHandshakeRequest {
    const KEY: i16 = 17;
    const NAME: &'static str = "SaslHandshake";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 1;
    /// No version is flexible.
    const FLEXIBLE_FROM: i16 = i16::MAX;
    type Response = SaslHandshakeResponse;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::{
        decode_request, decode_response, encode_request, encode_response,
    };

    fn request() -> SaslHandshakeRequest {
        SaslHandshakeRequest {
            mechanism: "SCRAM-SHA-512".into(),
        }
    }

    fn response() -> SaslHandshakeResponse {
        SaslHandshakeResponse {
            error_code: 33,
            mechanisms: vec!["PLAIN".into(), "OAUTHBEARER".into()],
        }
    }

    #[test]
    fn claims_v1_only_and_no_flexible_version() {
        assert_eq!(
            (
                SaslHandshakeRequest::KEY,
                SaslHandshakeRequest::MIN_VERSION,
                SaslHandshakeRequest::MAX_VERSION
            ),
            (17, 1, 1)
        );
        const { assert!(SaslHandshakeRequest::FLEXIBLE_FROM > SaslHandshakeRequest::MAX_VERSION) };
        assert_eq!(SaslHandshakeRequest::throttle_time_ms(&response()), 0);
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in SaslHandshakeRequest::MIN_VERSION..=SaslHandshakeRequest::MAX_VERSION {
            let frame = encode_request(&request(), v, 4, "me");
            let (ver, corr, back) = decode_request::<SaslHandshakeRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 4));
            assert_eq!(back, request(), "request v{v}");

            let frame = encode_response::<SaslHandshakeRequest>(&response(), v, 4);
            let back = decode_response::<SaslHandshakeRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response(), "response v{v}");
        }
    }

    #[test]
    fn defaults_are_the_schema_defaults() {
        assert_eq!(SaslHandshakeRequest::default().mechanism, "");
        let r = SaslHandshakeResponse::default();
        assert_eq!((r.error_code, r.mechanisms.len()), (0, 0));
    }

    #[test]
    fn v1_request_matches_the_schema_byte_for_byte() {
        let req = SaslHandshakeRequest {
            mechanism: "PLAIN".into(),
        };
        let frame = encode_request(&req, 1, 7, "c");
        let mut want = vec![0, 17, 0, 1, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0, 5]);
        want.extend_from_slice(b"PLAIN"); // mechanism
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
    }

    #[test]
    fn v1_response_is_decoded_as_the_schema_lays_it_out() {
        // Correlation id, error code, array of two strings.
        let mut b = vec![0, 0, 0, 3, 0, 33, 0, 0, 0, 2];
        b.extend_from_slice(&[0, 5]);
        b.extend_from_slice(b"PLAIN");
        b.extend_from_slice(&[0, 11]);
        b.extend_from_slice(b"OAUTHBEARER");
        assert_eq!(
            decode_response::<SaslHandshakeRequest>(&b, 1).unwrap(),
            response()
        );
        // Trailing bytes after the body are an error.
        b.push(0);
        assert!(decode_response::<SaslHandshakeRequest>(&b, 1).is_err());
    }

    #[test]
    fn truncated_frames_and_impossible_counts_are_errors() {
        let frame = encode_response::<SaslHandshakeRequest>(&response(), 1, 1);
        for cut in 4..frame.len() {
            assert!(decode_response::<SaslHandshakeRequest>(&frame[4..cut], 1).is_err());
        }
        let frame = encode_request(&request(), 1, 1, "c");
        for cut in 4..frame.len() {
            assert!(decode_request::<SaslHandshakeRequest>(&frame[4..cut]).is_err());
        }
        // A mechanism list claiming 2^31 - 1 entries is rejected before allocating.
        let b = [0, 0, 0, 3, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 1, b'x'];
        assert!(decode_response::<SaslHandshakeRequest>(&b, 1).is_err());
        // A null mechanism list is an error (the schema's array is not nullable).
        let b = [0, 0, 0, 3, 0, 0, 0xff, 0xff, 0xff, 0xff];
        assert!(decode_response::<SaslHandshakeRequest>(&b, 1).is_err());
    }
}
