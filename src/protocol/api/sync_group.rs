//! SyncGroup (key 14): after JoinGroup, every member of a classic-protocol group asks its
//! coordinator for its assignment; the leader sends everyone's along (for a consumer, a
//! [`ConsumerProtocolAssignment`](crate::protocol::consumer_protocol::ConsumerProtocolAssignment)
//! each).
//!
//! We speak v0..=5 (flexible from v4). v1 adds the throttle time to the response, v2 only
//! changes when the broker throttles, v3 adds the static member's `group_instance_id`, v4 is
//! the first flexible version. v5 (KIP-559) adds `protocol_type` and `protocol_name` to both
//! sides: the member sends those JoinGroup returned and the broker rejects the request with
//! `INCONSISTENT_GROUP_PROTOCOL` if they differ from the group's; the response echoes them.
//!
//! The assignment in the response is empty when the leader assigned nothing to this member
//! (or the group is rebalancing); a consumer must not decode empty bytes as an assignment.
//!
//! Layouts follow `SyncGroupRequest.json` / `SyncGroupResponse.json`; neither declares
//! tagged fields.

use super::Api;
use crate::protocol::message::Bytes;
use crate::protocol::wire_struct;

wire_struct! {
    /// SyncGroup request.
    pub struct SyncGroupRequest {
        group_id: String, since 0;
        /// The generation JoinGroup returned.
        generation_id: i32, since 0;
        /// The member id JoinGroup returned.
        member_id: String, since 0;
        /// The static member's `group.instance.id`, if any (v3+).
        group_instance_id: Option<String>, since 3;
        /// The protocol type JoinGroup returned (v5+).
        protocol_type: Option<String>, since 5;
        /// The protocol name JoinGroup returned (v5+).
        protocol_name: Option<String>, since 5;
        /// The leader's assignment for every member; empty from the other members.
        assignments: Vec<SyncGroupRequestAssignment>, since 0;
    }

    /// One member's assignment, sent by the leader.
    pub struct SyncGroupRequestAssignment {
        member_id: String, since 0;
        /// For a consumer, an encoded `ConsumerProtocolAssignment`.
        assignment: Bytes, since 0;
    }

    /// SyncGroup response.
    pub struct SyncGroupResponse {
        throttle_time_ms: i32, since 1;
        error_code: i16, since 0;
        /// The group's protocol type (v5+).
        protocol_type: Option<String>, since 5;
        /// The group's protocol name (v5+).
        protocol_name: Option<String>, since 5;
        /// This member's assignment (possibly empty).
        assignment: Bytes, since 0;
    }
}

impl Api for SyncGroupRequest {
    const KEY: i16 = 14;
    const NAME: &'static str = "SyncGroup";
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 5;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = SyncGroupResponse;
    fn throttle_time_ms(resp: &SyncGroupResponse) -> i32 {
        resp.throttle_time_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::{
        decode_request, decode_response, encode_request, encode_response,
    };
    use crate::protocol::wire::DecodeErrorKind;

    fn versions() -> std::ops::RangeInclusive<i16> {
        SyncGroupRequest::MIN_VERSION..=SyncGroupRequest::MAX_VERSION
    }

    /// A request with every field set away from its default.
    fn request() -> SyncGroupRequest {
        SyncGroupRequest {
            group_id: "orders-app".into(),
            generation_id: 17,
            member_id: "consumer-1-5f0c".into(),
            group_instance_id: Some("host-a".into()),
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: vec![
                SyncGroupRequestAssignment {
                    member_id: "consumer-1-5f0c".into(),
                    assignment: Bytes(vec![0, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]),
                },
                SyncGroupRequestAssignment {
                    member_id: "consumer-2-77aa".into(),
                    assignment: Bytes(vec![]),
                },
            ],
        }
    }

    /// What the broker decodes from `request()` sent at `v`.
    fn request_seen_at(v: i16) -> SyncGroupRequest {
        let mut r = request();
        if v < 3 {
            r.group_instance_id = None;
        }
        if v < 5 {
            r.protocol_type = None;
            r.protocol_name = None;
        }
        r
    }

    fn response() -> SyncGroupResponse {
        SyncGroupResponse {
            throttle_time_ms: 30,
            error_code: 27,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignment: Bytes(vec![0, 3, 0, 0, 0, 1]),
        }
    }

    fn response_seen_at(v: i16) -> SyncGroupResponse {
        let mut r = response();
        if v < 1 {
            r.throttle_time_ms = 0;
        }
        if v < 5 {
            r.protocol_type = None;
            r.protocol_name = None;
        }
        r
    }

    #[test]
    fn claims_v0_to_v5_flexible_from_v4() {
        assert_eq!(
            (
                SyncGroupRequest::KEY,
                SyncGroupRequest::MIN_VERSION,
                SyncGroupRequest::MAX_VERSION,
                SyncGroupRequest::FLEXIBLE_FROM
            ),
            (14, 0, 5, 4)
        );
        assert_eq!(SyncGroupRequest::throttle_time_ms(&response()), 30);
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 6, "me");
            let (ver, corr, back) = decode_request::<SyncGroupRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 6));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<SyncGroupRequest>(&response(), v, 6);
            let back = decode_response::<SyncGroupRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn defaults_are_the_schema_defaults() {
        let r = SyncGroupRequest::default();
        assert_eq!(
            (
                r.group_instance_id.as_deref(),
                r.protocol_type.as_deref(),
                r.protocol_name.as_deref()
            ),
            (None, None, None)
        );
        let r = SyncGroupResponse::default();
        assert_eq!(
            (r.protocol_type.as_deref(), r.protocol_name.as_deref()),
            (None, None)
        );
        assert!(r.assignment.0.is_empty());
    }

    #[test]
    fn v0_and_v3_requests_match_the_schema_byte_for_byte() {
        let req = SyncGroupRequest {
            group_id: "g".into(),
            generation_id: 3,
            member_id: "m".into(),
            group_instance_id: Some("i".into()),
            protocol_type: Some("consumer".into()), // not before v5
            protocol_name: Some("range".into()),    // not before v5
            assignments: vec![SyncGroupRequestAssignment {
                member_id: "m".into(),
                assignment: Bytes(vec![0xaa]),
            }],
        };
        let frame = encode_request(&req, 0, 7, "c");
        let mut want = vec![0, 14, 0, 0, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0, 1, b'g']); // group_id
        want.extend_from_slice(&[0, 0, 0, 3]); // generation_id
        want.extend_from_slice(&[0, 1, b'm']); // member_id
        want.extend_from_slice(&[0, 0, 0, 1]); // assignments: 1
        want.extend_from_slice(&[0, 1, b'm', 0, 0, 0, 1, 0xaa]); // member_id, assignment
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
        // v3: the instance id before the assignments.
        let frame = encode_request(&req, 3, 7, "c");
        want[3] = 3;
        want.splice(21..21, [0, 1, b'i']);
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v4_and_v5_requests_match_the_schema_byte_for_byte() {
        let req = SyncGroupRequest {
            group_id: "g".into(),
            generation_id: 3,
            member_id: "m".into(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: vec![],
        };
        let frame = encode_request(&req, 5, 7, "c");
        let mut want = vec![0, 14, 0, 5, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.extend_from_slice(&[2, b'g']); // group_id
        want.extend_from_slice(&[0, 0, 0, 3]); // generation_id
        want.extend_from_slice(&[2, b'm']); // member_id
        want.push(0); // group_instance_id null
        want.push(9);
        want.extend_from_slice(b"consumer"); // protocol_type
        want.push(6);
        want.extend_from_slice(b"range"); // protocol_name
        want.push(1); // assignments: 0
        want.push(0); // tags
        assert_eq!(&frame[4..], &want[..]);
        // v4: no protocol type or name.
        let frame = encode_request(&req, 4, 7, "c");
        want[3] = 4;
        want.drain(21..36);
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v0_and_v1_responses_are_decoded_as_the_schema_lays_them_out() {
        let mut b = vec![0, 0, 0, 3]; // correlation id
        b.extend_from_slice(&[0, 0]); // error_code
        b.extend_from_slice(&[0, 0, 0, 3, 1, 2, 3]); // assignment
        let resp = decode_response::<SyncGroupRequest>(&b, 0).unwrap();
        assert_eq!(
            resp,
            SyncGroupResponse {
                assignment: Bytes(vec![1, 2, 3]),
                ..Default::default()
            }
        );
        // v1: the throttle time first; an empty assignment.
        let b = [0, 0, 0, 3, 0, 0, 0, 7, 0, 27, 0, 0, 0, 0];
        let resp = decode_response::<SyncGroupRequest>(&b, 1).unwrap();
        assert_eq!(
            (resp.throttle_time_ms, resp.error_code, resp.assignment),
            (7, 27, Bytes(vec![]))
        );
    }

    /// A v5 (flexible) response.
    fn v5_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 7]); // throttle_time_ms
        b.extend_from_slice(&[0, 0]); // error_code
        b.push(9);
        b.extend_from_slice(b"consumer"); // protocol_type
        b.push(6);
        b.extend_from_slice(b"range"); // protocol_name
        b.extend_from_slice(&[4, 9, 8, 7]); // assignment, compact bytes
        b.push(0); // tags
        b
    }

    #[test]
    fn v4_and_v5_responses_are_decoded_as_the_schema_lays_them_out() {
        let want = SyncGroupResponse {
            throttle_time_ms: 7,
            error_code: 0,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignment: Bytes(vec![9, 8, 7]),
        };
        assert_eq!(
            decode_response::<SyncGroupRequest>(&v5_body(), 5).unwrap(),
            want
        );
        // v4: without the protocol; an unknown tagged field is skipped.
        let mut body = v5_body();
        body.drain(11..26);
        let at = body.len() - 1;
        body.splice(at.., [1, 0, 2, 0xaa, 0xbb]);
        let resp = decode_response::<SyncGroupRequest>(&body, 4).unwrap();
        assert_eq!(
            resp,
            SyncGroupResponse {
                protocol_type: None,
                protocol_name: None,
                ..want
            }
        );
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in versions() {
            let frame = encode_response::<SyncGroupRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<SyncGroupRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<SyncGroupRequest>(&frame[4..cut]).is_err());
            }
        }
        let body = v5_body();
        for cut in 0..body.len() {
            assert!(decode_response::<SyncGroupRequest>(&body[..cut], 5).is_err());
        }
    }

    #[test]
    fn impossible_lengths_are_rejected_before_allocating() {
        // v0: an assignment claiming i32::MAX bytes.
        let b = [0, 0, 0, 3, 0, 0, 0x7f, 0xff, 0xff, 0xff, 1];
        let e = decode_response::<SyncGroupRequest>(&b, 0).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v5: an assignment claiming 2^32 - 2 bytes (compact).
        let mut body = v5_body();
        let at = body.len() - 5;
        assert_eq!(body[at], 4);
        body.splice(at..at + 1, [0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode_response::<SyncGroupRequest>(&body, 5).is_err());
        // A null where the assignment is required.
        let b = [0, 0, 0, 3, 0, 0, 0xff, 0xff, 0xff, 0xff];
        assert!(decode_response::<SyncGroupRequest>(&b, 0).is_err());
        // v0 request: assignments count i32::MAX.
        let mut frame = encode_request(&request(), 0, 1, "c");
        let at = 4 + 11 + 12 + 4 + 17;
        assert_eq!(frame[at..at + 4], [0, 0, 0, 2]);
        frame[at..at + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = decode_request::<SyncGroupRequest>(&frame[4..]).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
    }
}
