//! Heartbeat (key 12): a member of a classic-protocol group tells its coordinator it is
//! alive, and learns whether the group is rebalancing.
//!
//! We speak v0..=4 (flexible from v4). v1 adds the throttle time to the response, v2 only
//! changes when the broker throttles (it answers first), v3 adds the static member's
//! `group_instance_id` to the request. The answer is an error code alone:
//! `REBALANCE_IN_PROGRESS` asks the member to rejoin, `ILLEGAL_GENERATION`,
//! `UNKNOWN_MEMBER_ID` and `FENCED_INSTANCE_ID` that it is no longer part of the group.
//!
//! Layouts follow `HeartbeatRequest.json` / `HeartbeatResponse.json`; neither declares
//! tagged fields.

use super::Api;
use crate::protocol::wire_struct;

wire_struct! {
    /// Heartbeat request.
    pub struct HeartbeatRequest {
        group_id: String, since 0;
        /// The generation the member joined (from JoinGroup).
        generation_id: i32, since 0;
        /// The member id the coordinator assigned.
        member_id: String, since 0;
        /// The static member's `group.instance.id`, if any (v3+).
        group_instance_id: Option<String>, since 3;
    }

    /// Heartbeat response.
    pub struct HeartbeatResponse {
        throttle_time_ms: i32, since 1;
        error_code: i16, since 0;
    }
}

impl Api for HeartbeatRequest {
    const KEY: i16 = 12;
    const NAME: &'static str = "Heartbeat";
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 4;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = HeartbeatResponse;
    fn throttle_time_ms(resp: &HeartbeatResponse) -> i32 {
        resp.throttle_time_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::{
        decode_request, decode_response, encode_request, encode_response,
    };

    fn versions() -> std::ops::RangeInclusive<i16> {
        HeartbeatRequest::MIN_VERSION..=HeartbeatRequest::MAX_VERSION
    }

    /// A request with every field set away from its default.
    fn request() -> HeartbeatRequest {
        HeartbeatRequest {
            group_id: "orders-app".into(),
            generation_id: 12,
            member_id: "consumer-1-5f0c".into(),
            group_instance_id: Some("host-a".into()),
        }
    }

    /// What the broker decodes from `request()` sent at `v`.
    fn request_seen_at(v: i16) -> HeartbeatRequest {
        let mut r = request();
        if v < 3 {
            r.group_instance_id = None;
        }
        r
    }

    fn response() -> HeartbeatResponse {
        HeartbeatResponse {
            throttle_time_ms: 40,
            error_code: 27,
        }
    }

    fn response_seen_at(v: i16) -> HeartbeatResponse {
        let mut r = response();
        if v < 1 {
            r.throttle_time_ms = 0;
        }
        r
    }

    #[test]
    fn claims_v0_to_v4_flexible_from_v4() {
        assert_eq!(
            (
                HeartbeatRequest::KEY,
                HeartbeatRequest::MIN_VERSION,
                HeartbeatRequest::MAX_VERSION,
                HeartbeatRequest::FLEXIBLE_FROM
            ),
            (12, 0, 4, 4)
        );
        assert_eq!(HeartbeatRequest::throttle_time_ms(&response()), 40);
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 6, "me");
            let (ver, corr, back) = decode_request::<HeartbeatRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 6));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<HeartbeatRequest>(&response(), v, 6);
            let back = decode_response::<HeartbeatRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn defaults_are_the_schema_defaults() {
        let r = HeartbeatRequest::default();
        assert_eq!(
            (r.generation_id, r.member_id.as_str(), r.group_instance_id),
            (0, "", None)
        );
        assert_eq!(HeartbeatResponse::default().throttle_time_ms, 0);
    }

    #[test]
    fn v0_and_v3_requests_match_the_schema_byte_for_byte() {
        let frame = encode_request(&request(), 0, 7, "c");
        let mut want = vec![0, 12, 0, 0, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0, 10]);
        want.extend_from_slice(b"orders-app"); // group_id
        want.extend_from_slice(&[0, 0, 0, 12]); // generation_id
        want.extend_from_slice(&[0, 15]);
        want.extend_from_slice(b"consumer-1-5f0c"); // member_id (no instance id before v3)
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
        // v3 appends the instance id; a null one is -1.
        let mut req = request();
        req.group_instance_id = None;
        let frame = encode_request(&req, 3, 7, "c");
        want[3] = 3;
        want.extend_from_slice(&[0xff, 0xff]);
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v4_request_matches_the_schema_byte_for_byte() {
        let req = HeartbeatRequest {
            group_id: "g".into(),
            generation_id: 2,
            member_id: "m".into(),
            group_instance_id: Some("i".into()),
        };
        let frame = encode_request(&req, 4, 7, "c");
        let mut want = vec![0, 12, 0, 4, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.extend_from_slice(&[2, b'g']); // group_id, compact
        want.extend_from_slice(&[0, 0, 0, 2]); // generation_id
        want.extend_from_slice(&[2, b'm']); // member_id
        want.extend_from_slice(&[2, b'i']); // group_instance_id
        want.push(0); // tags
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v0_v1_and_v4_responses_are_decoded_as_the_schema_lays_them_out() {
        // v0: correlation id, error code.
        let resp = decode_response::<HeartbeatRequest>(&[0, 0, 0, 3, 0, 27], 0).unwrap();
        assert_eq!(
            resp,
            HeartbeatResponse {
                throttle_time_ms: 0,
                error_code: 27
            }
        );
        // v1: throttle time first.
        let b = [0, 0, 0, 3, 0, 0, 0, 9, 0, 25];
        let resp = decode_response::<HeartbeatRequest>(&b, 1).unwrap();
        assert_eq!((resp.throttle_time_ms, resp.error_code), (9, 25));
        // v4: header tags, then the fields, then body tags (an unknown one is skipped).
        let b = [0, 0, 0, 3, 0, 0, 0, 0, 9, 0, 82, 1, 7, 1, 0xee];
        let resp = decode_response::<HeartbeatRequest>(&b, 4).unwrap();
        assert_eq!((resp.throttle_time_ms, resp.error_code), (9, 82));
        // Trailing bytes after the body are an error.
        assert!(decode_response::<HeartbeatRequest>(&[0, 0, 0, 3, 0, 27, 0], 0).is_err());
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in versions() {
            let frame = encode_response::<HeartbeatRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<HeartbeatRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<HeartbeatRequest>(&frame[4..cut]).is_err());
            }
        }
    }

    #[test]
    fn impossible_lengths_are_rejected_before_allocating() {
        // A v4 request whose group id claims 2^32 - 2 bytes.
        let mut frame = encode_request(&request(), 4, 1, "c");
        let at = 4 + 12; // size, header v2
        assert_eq!(frame[at], 11);
        frame.splice(at..at + 1, [0xff, 0xff, 0xff, 0xff, 0x07]);
        assert!(decode_request::<HeartbeatRequest>(&frame[4..]).is_err());
        // A v0 request whose member id claims 32767 bytes.
        let mut frame = encode_request(&request(), 0, 1, "c");
        let at = 4 + 11 + 12 + 4;
        assert_eq!(frame[at..at + 2], [0, 15]);
        frame[at..at + 2].copy_from_slice(&[0x7f, 0xff]);
        assert!(decode_request::<HeartbeatRequest>(&frame[4..]).is_err());
    }
}
