//! ApiVersions (key 18): which versions of each API the broker speaks.
//!
//! We send v3 (flexible). A broker that does not know v3 answers UNSUPPORTED_VERSION with a
//! v0-shaped body listing its ranges; the connection then retries with the highest version
//! it offers ([`fallback_version`]). The response header is always v0.

use super::Api;
use crate::protocol::message::{Version, Wire};
use crate::protocol::wire::Reader;
use crate::protocol::wire_struct;

wire_struct! {
    /// ApiVersions request.
    pub struct ApiVersionsRequest {
        client_software_name: String, since 3;
        client_software_version: String, since 3;
    }

    /// ApiVersions response.
    pub struct ApiVersionsResponse {
        error_code: i16, since 0;
        api_keys: Vec<ApiVersion>, since 0;
        throttle_time_ms: i32, since 1;
    }

    /// One API's supported range.
    pub struct ApiVersion {
        api_key: i16, since 0;
        min_version: i16, since 0;
        max_version: i16, since 0;
    }
}

impl Api for ApiVersionsRequest {
    const KEY: i16 = 18;
    const NAME: &'static str = "ApiVersions";
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 3;
    const FLEXIBLE_FROM: i16 = 3;
    const TAGGED_RESPONSE_HEADER: bool = false;
    type Response = ApiVersionsResponse;
    fn throttle_time_ms(resp: &ApiVersionsResponse) -> i32 {
        resp.throttle_time_ms
    }
}

/// After an UNSUPPORTED_VERSION answer, decodes its body as v0 and returns the highest
/// ApiVersions version the broker offers (capped at ours), if it lists one.
pub fn fallback_version(body: &[u8]) -> Option<i16> {
    let mut r = Reader::new(body);
    r.i32().ok()?; // correlation id (response header v0)
    let v0 = Version {
        v: 0,
        flexible: false,
    };
    let resp = ApiVersionsResponse::read(&mut r, v0).ok()?;
    resp.api_keys
        .iter()
        .find(|k| k.api_key == ApiVersionsRequest::KEY)
        .map(|k| k.max_version.min(ApiVersionsRequest::MAX_VERSION))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::{
        decode_request, decode_response, encode_request, encode_response,
    };

    fn sample() -> ApiVersionsResponse {
        ApiVersionsResponse {
            error_code: 0,
            api_keys: vec![
                ApiVersion {
                    api_key: 1,
                    min_version: 4,
                    max_version: 17,
                },
                ApiVersion {
                    api_key: 18,
                    min_version: 0,
                    max_version: 4,
                },
            ],
            throttle_time_ms: 0,
        }
    }

    #[test]
    fn round_trips_every_version() {
        for v in 0..=ApiVersionsRequest::MAX_VERSION {
            let req = ApiVersionsRequest {
                client_software_name: if v >= 3 {
                    "kafka-consumer".into()
                } else {
                    String::new()
                },
                client_software_version: if v >= 3 {
                    "0.1.0".into()
                } else {
                    String::new()
                },
            };
            let frame = encode_request(&req, v, 7, "me");
            let (ver, corr, back) = decode_request::<ApiVersionsRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 7));
            assert_eq!(back, req);
            let resp = sample();
            let frame = encode_response::<ApiVersionsRequest>(&resp, v, 7);
            let back = decode_response::<ApiVersionsRequest>(&frame[4..], v).unwrap();
            assert_eq!(back.api_keys, resp.api_keys);
        }
    }

    #[test]
    fn v3_response_header_has_no_tagged_fields() {
        // Hand-built v3 response: correlation id, then body directly (header v0).
        let mut b = vec![0, 0, 0, 9];
        b.extend_from_slice(&[0, 0]); // error code
        b.push(2); // compact array of 1
        b.extend_from_slice(&[0, 18, 0, 0, 0, 4, 0]); // key 18, 0..4, no tags
        b.extend_from_slice(&[0, 0, 0, 0]); // throttle
        b.push(0); // tagged fields
        let resp = decode_response::<ApiVersionsRequest>(&b, 3).unwrap();
        assert_eq!(
            resp.api_keys,
            vec![ApiVersion {
                api_key: 18,
                min_version: 0,
                max_version: 4
            }]
        );
    }

    #[test]
    fn unsupported_version_fallback_reads_v0_body() {
        let mut resp = sample();
        resp.error_code = 35;
        resp.api_keys[1].max_version = 2;
        let frame = encode_response::<ApiVersionsRequest>(&resp, 0, 1);
        assert_eq!(fallback_version(&frame[4..]), Some(2));
    }

    #[test]
    fn truncated_response_is_an_error() {
        let frame = encode_response::<ApiVersionsRequest>(&sample(), 3, 1);
        for cut in 4..frame.len() - 1 {
            assert!(decode_response::<ApiVersionsRequest>(&frame[4..cut], 3).is_err());
        }
    }
}
