//! JoinGroup (key 11): a member of a classic-protocol group (re)joins it through its
//! coordinator, offering the protocols (assignors) it supports with their metadata (for a
//! consumer, a [`ConsumerProtocolSubscription`](crate::protocol::consumer_protocol::ConsumerProtocolSubscription)
//! each), and learns the new generation, the chosen protocol, the leader and (the leader
//! only) every member's metadata.
//!
//! We speak v0..=9 (flexible from v6). Per version:
//! - v1 adds `rebalance_timeout_ms` (v0 brokers use the session timeout for both).
//! - v2 adds the throttle time to the response; v3 only changes when the broker throttles.
//! - v4: a new member (empty `member_id`) is answered `MEMBER_ID_REQUIRED` with the id the
//!   coordinator assigned in `member_id`, and must send JoinGroup again with that id
//!   ([`MEMBER_ID_REQUIRED_VERSION`]).
//! - v5 adds the static member's `group_instance_id` (request, and each member in the
//!   leader's response).
//! - v6 is the first flexible version.
//! - v7: the response carries `protocol_type`, and `protocol_name` may be null.
//! - v8 adds the request's `reason` (KIP-800).
//! - v9 adds the response's `skip_assignment` (KIP-814): the leader, a static member that
//!   rejoined a stable group, gets the members but must not run the assignment.
//!
//! Layouts follow `JoinGroupRequest.json` / `JoinGroupResponse.json`; neither declares
//! tagged fields.

use super::Api;
use crate::protocol::message::Bytes;
use crate::protocol::wire_struct;

/// The first version whose new members must rejoin with the member id the coordinator
/// returned with `MEMBER_ID_REQUIRED` (KIP-394).
pub const MEMBER_ID_REQUIRED_VERSION: i16 = 4;

/// The member id of a member the coordinator has not yet assigned one (`UNKNOWN_MEMBER_ID`
/// in the Java client).
pub const UNKNOWN_MEMBER_ID: &str = "";

/// The generation of a member outside any generation (`UNKNOWN_GENERATION_ID`).
pub const UNKNOWN_GENERATION_ID: i32 = -1;

wire_struct! {
    /// JoinGroup request.
    pub struct JoinGroupRequest {
        group_id: String, since 0;
        /// How long without a heartbeat before the coordinator considers the member dead.
        session_timeout_ms: i32, since 0;
        /// How long the coordinator waits for each member to rejoin during a rebalance
        /// (v1+; v0 brokers use the session timeout).
        rebalance_timeout_ms: i32, since 1, default -1;
        /// [`UNKNOWN_MEMBER_ID`] on the first join, else the id the coordinator assigned.
        member_id: String, since 0;
        /// The static member's `group.instance.id`, if any (v5+).
        group_instance_id: Option<String>, since 5;
        /// `"consumer"` for a consumer group.
        protocol_type: String, since 0;
        /// The protocols (assignors) the member supports, in order of preference.
        protocols: Vec<JoinGroupRequestProtocol>, since 0;
        /// Why the member (re)joins, for the broker's log (v8+).
        reason: Option<String>, since 8;
    }

    /// One protocol the member supports.
    pub struct JoinGroupRequestProtocol {
        /// The assignor's name, e.g. `range` or `cooperative-sticky`.
        name: String, since 0;
        /// Its metadata (for a consumer, an encoded `ConsumerProtocolSubscription`).
        metadata: Bytes, since 0;
    }

    /// JoinGroup response.
    pub struct JoinGroupResponse {
        throttle_time_ms: i32, since 2;
        error_code: i16, since 0;
        generation_id: i32, since 0, default UNKNOWN_GENERATION_ID;
        /// The group's protocol type (v7+).
        protocol_type: Option<String>, since 7;
        /// The protocol the coordinator chose; null only from v7 (the schema's default is
        /// the empty string).
        protocol_name: Option<String>, since 0, default Some(String::new());
        /// The leader's member id.
        leader: String, since 0;
        /// Whether the leader must skip running the assignment (v9+).
        skip_assignment: bool, since 9;
        /// This member's id (on `MEMBER_ID_REQUIRED`, the one to rejoin with).
        member_id: String, since 0;
        /// Every member with its metadata for the leader; empty for the others.
        members: Vec<JoinGroupResponseMember>, since 0;
    }

    /// One member of the group, as the leader sees it.
    pub struct JoinGroupResponseMember {
        member_id: String, since 0;
        /// Its `group.instance.id`, if static (v5+).
        group_instance_id: Option<String>, since 5;
        /// Its metadata for the chosen protocol.
        metadata: Bytes, since 0;
    }
}

impl Api for JoinGroupRequest {
    const KEY: i16 = 11;
    const NAME: &'static str = "JoinGroup";
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 9;
    const FLEXIBLE_FROM: i16 = 6;
    type Response = JoinGroupResponse;
    fn throttle_time_ms(resp: &JoinGroupResponse) -> i32 {
        resp.throttle_time_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::error_code::ErrorCode;
    use crate::protocol::frame::{
        decode_request, decode_response, encode_request, encode_response,
    };
    use crate::protocol::wire::DecodeErrorKind;

    fn versions() -> std::ops::RangeInclusive<i16> {
        JoinGroupRequest::MIN_VERSION..=JoinGroupRequest::MAX_VERSION
    }

    /// A request with every field set away from its default.
    fn request() -> JoinGroupRequest {
        JoinGroupRequest {
            group_id: "orders-app".into(),
            session_timeout_ms: 45_000,
            rebalance_timeout_ms: 300_000,
            member_id: "consumer-1-5f0c".into(),
            group_instance_id: Some("host-a".into()),
            protocol_type: "consumer".into(),
            protocols: vec![
                JoinGroupRequestProtocol {
                    name: "cooperative-sticky".into(),
                    metadata: Bytes(vec![0, 3, 0, 0, 0, 1, 0, 1, b't']),
                },
                JoinGroupRequestProtocol {
                    name: "range".into(),
                    metadata: Bytes(vec![]),
                },
            ],
            reason: Some("rebalance failed".into()),
        }
    }

    /// What the broker decodes from `request()` sent at `v`.
    fn request_seen_at(v: i16) -> JoinGroupRequest {
        let mut r = request();
        if v < 1 {
            r.rebalance_timeout_ms = -1;
        }
        if v < 5 {
            r.group_instance_id = None;
        }
        if v < 8 {
            r.reason = None;
        }
        r
    }

    fn response() -> JoinGroupResponse {
        JoinGroupResponse {
            throttle_time_ms: 30,
            error_code: 79,
            generation_id: 17,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            leader: "consumer-1-5f0c".into(),
            skip_assignment: true,
            member_id: "consumer-2-77aa".into(),
            members: vec![
                JoinGroupResponseMember {
                    member_id: "consumer-1-5f0c".into(),
                    group_instance_id: Some("host-a".into()),
                    metadata: Bytes(vec![0, 3, 1, 2]),
                },
                JoinGroupResponseMember {
                    member_id: "consumer-2-77aa".into(),
                    group_instance_id: None,
                    metadata: Bytes(vec![]),
                },
            ],
        }
    }

    fn response_seen_at(v: i16) -> JoinGroupResponse {
        let mut r = response();
        if v < 2 {
            r.throttle_time_ms = 0;
        }
        if v < 5 {
            for m in &mut r.members {
                m.group_instance_id = None;
            }
        }
        if v < 7 {
            r.protocol_type = None;
        }
        if v < 9 {
            r.skip_assignment = false;
        }
        r
    }

    #[test]
    fn claims_v0_to_v9_flexible_from_v6() {
        assert_eq!(
            (
                JoinGroupRequest::KEY,
                JoinGroupRequest::MIN_VERSION,
                JoinGroupRequest::MAX_VERSION,
                JoinGroupRequest::FLEXIBLE_FROM
            ),
            (11, 0, 9, 6)
        );
        assert_eq!(JoinGroupRequest::throttle_time_ms(&response()), 30);
        assert_eq!(
            ErrorCode::from_code(response().error_code),
            ErrorCode::MEMBER_ID_REQUIRED
        );
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 6, "me");
            let (ver, corr, back) = decode_request::<JoinGroupRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 6));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<JoinGroupRequest>(&response(), v, 6);
            let back = decode_response::<JoinGroupRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
        // From v7 the protocol name may be null.
        for v in 7..=9 {
            let mut resp = response();
            resp.protocol_name = None;
            resp.protocol_type = None;
            let frame = encode_response::<JoinGroupRequest>(&resp, v, 6);
            let back = decode_response::<JoinGroupRequest>(&frame[4..], v).unwrap();
            assert_eq!((back.protocol_type, back.protocol_name), (None, None));
        }
    }

    #[test]
    fn defaults_are_the_schema_defaults() {
        let r = JoinGroupRequest::default();
        assert_eq!(
            (
                r.rebalance_timeout_ms,
                r.member_id.as_str(),
                r.group_instance_id.as_deref(),
                r.reason.as_deref()
            ),
            (-1, UNKNOWN_MEMBER_ID, None, None)
        );
        let r = JoinGroupResponse::default();
        assert_eq!(
            (
                r.generation_id,
                r.protocol_type.as_deref(),
                r.protocol_name.as_deref(),
                r.skip_assignment
            ),
            (UNKNOWN_GENERATION_ID, None, Some(""), false)
        );
    }

    /// A small request, one protocol.
    fn small_request() -> JoinGroupRequest {
        JoinGroupRequest {
            group_id: "g".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 20_000,
            member_id: String::new(),
            group_instance_id: Some("i".into()),
            protocol_type: "consumer".into(),
            protocols: vec![JoinGroupRequestProtocol {
                name: "range".into(),
                metadata: Bytes(vec![0xaa, 0xbb]),
            }],
            reason: Some("r".into()),
        }
    }

    #[test]
    fn v0_and_v5_requests_match_the_schema_byte_for_byte() {
        let frame = encode_request(&small_request(), 0, 7, "c");
        let mut want = vec![0, 11, 0, 0, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0, 1, b'g']); // group_id
        want.extend_from_slice(&[0, 0, 0x27, 0x10]); // session_timeout_ms 10000
        want.extend_from_slice(&[0, 0]); // member_id ""
        want.extend_from_slice(&[0, 8]);
        want.extend_from_slice(b"consumer"); // protocol_type
        want.extend_from_slice(&[0, 0, 0, 1, 0, 5]);
        want.extend_from_slice(b"range"); // protocols: 1, name
        want.extend_from_slice(&[0, 0, 0, 2, 0xaa, 0xbb]); // metadata: int32 length
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
        // v5: the rebalance timeout after the session timeout, the instance id after the
        // member id.
        let frame = encode_request(&small_request(), 5, 7, "c");
        let mut want = vec![0, 11, 0, 5, 0, 0, 0, 7, 0, 1, b'c'];
        want.extend_from_slice(&[0, 1, b'g', 0, 0, 0x27, 0x10]);
        want.extend_from_slice(&[0, 0, 0x4e, 0x20]); // rebalance_timeout_ms 20000
        want.extend_from_slice(&[0, 0]); // member_id
        want.extend_from_slice(&[0, 1, b'i']); // group_instance_id
        want.extend_from_slice(&[0, 8]);
        want.extend_from_slice(b"consumer");
        want.extend_from_slice(&[0, 0, 0, 1, 0, 5]);
        want.extend_from_slice(b"range");
        want.extend_from_slice(&[0, 0, 0, 2, 0xaa, 0xbb]);
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v8_request_matches_the_schema_byte_for_byte() {
        let frame = encode_request(&small_request(), 8, 7, "c");
        let mut want = vec![0, 11, 0, 8, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.extend_from_slice(&[2, b'g']); // group_id, compact
        want.extend_from_slice(&[0, 0, 0x27, 0x10]); // session_timeout_ms
        want.extend_from_slice(&[0, 0, 0x4e, 0x20]); // rebalance_timeout_ms
        want.push(1); // member_id "" (compact: length + 1)
        want.extend_from_slice(&[2, b'i']); // group_instance_id
        want.push(9);
        want.extend_from_slice(b"consumer"); // protocol_type
        want.push(2); // protocols: 1
        want.push(6);
        want.extend_from_slice(b"range"); // name
        want.extend_from_slice(&[3, 0xaa, 0xbb]); // metadata, compact bytes
        want.push(0); // protocol tags
        want.extend_from_slice(&[2, b'r']); // reason
        want.push(0); // request tags
        assert_eq!(&frame[4..], &want[..]);
        // v6 and v7 have no reason; a null instance id is a compact null.
        let mut req = small_request();
        req.group_instance_id = None;
        let frame = encode_request(&req, 6, 7, "c");
        want[3] = 6;
        want.splice(23..25, [0]); // group_instance_id null
        let at = want.len() - 3;
        want.drain(at..at + 2); // no reason
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v0_response_is_decoded_as_the_schema_lays_it_out() {
        let mut b = vec![0, 0, 0, 3]; // correlation id (no throttle time before v2)
        b.extend_from_slice(&[0, 0]); // error_code
        b.extend_from_slice(&[0, 0, 0, 5]); // generation_id
        b.extend_from_slice(&[0, 5]);
        b.extend_from_slice(b"range"); // protocol_name
        b.extend_from_slice(&[0, 1, b'a']); // leader
        b.extend_from_slice(&[0, 1, b'a']); // member_id
        b.extend_from_slice(&[0, 0, 0, 2]); // members: 2
        b.extend_from_slice(&[0, 1, b'a', 0, 0, 0, 1, 0x11]); // "a", metadata [0x11]
        b.extend_from_slice(&[0, 1, b'b', 0, 0, 0, 0]); // "b", metadata []
        let resp = decode_response::<JoinGroupRequest>(&b, 0).unwrap();
        assert_eq!(
            resp,
            JoinGroupResponse {
                throttle_time_ms: 0,
                error_code: 0,
                generation_id: 5,
                protocol_type: None,
                protocol_name: Some("range".into()),
                leader: "a".into(),
                skip_assignment: false,
                member_id: "a".into(),
                members: vec![
                    JoinGroupResponseMember {
                        member_id: "a".into(),
                        group_instance_id: None,
                        metadata: Bytes(vec![0x11]),
                    },
                    JoinGroupResponseMember {
                        member_id: "b".into(),
                        group_instance_id: None,
                        metadata: Bytes(vec![]),
                    },
                ],
            }
        );
    }

    /// A v4 `MEMBER_ID_REQUIRED` answer: no generation, no protocol, the assigned id.
    fn v4_member_id_required_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3]; // correlation id
        b.extend_from_slice(&[0, 0, 0, 0]); // throttle_time_ms
        b.extend_from_slice(&[0, 79]); // MEMBER_ID_REQUIRED
        b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // generation_id -1
        b.extend_from_slice(&[0, 0]); // protocol_name ""
        b.extend_from_slice(&[0, 0]); // leader ""
        b.extend_from_slice(&[0, 3, b'm', b'-', b'1']); // member_id "m-1"
        b.extend_from_slice(&[0, 0, 0, 0]); // members: 0
        b
    }

    #[test]
    fn v4_member_id_required_carries_the_id_to_rejoin_with() {
        let resp = decode_response::<JoinGroupRequest>(&v4_member_id_required_body(), 4).unwrap();
        assert_eq!(
            ErrorCode::from_code(resp.error_code),
            ErrorCode::MEMBER_ID_REQUIRED
        );
        assert_eq!((resp.generation_id, resp.member_id.as_str()), (-1, "m-1"));
        assert!(resp.members.is_empty());
    }

    /// A v9 (flexible) leader's response with one static member.
    fn v9_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 8]); // throttle_time_ms
        b.extend_from_slice(&[0, 0]); // error_code
        b.extend_from_slice(&[0, 0, 0, 2]); // generation_id
        b.push(9);
        b.extend_from_slice(b"consumer"); // protocol_type
        b.push(6);
        b.extend_from_slice(b"range"); // protocol_name
        b.extend_from_slice(&[2, b'a']); // leader
        b.push(1); // skip_assignment
        b.extend_from_slice(&[2, b'a']); // member_id
        b.push(2); // members: 1
        b.extend_from_slice(&[2, b'a']); // member_id
        b.extend_from_slice(&[2, b'i']); // group_instance_id
        b.extend_from_slice(&[3, 0x01, 0x02]); // metadata
        b.push(0); // member tags
        b.push(0); // response tags
        b
    }

    #[test]
    fn v9_response_is_decoded_as_the_schema_lays_it_out() {
        let want = JoinGroupResponse {
            throttle_time_ms: 8,
            error_code: 0,
            generation_id: 2,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            leader: "a".into(),
            skip_assignment: true,
            member_id: "a".into(),
            members: vec![JoinGroupResponseMember {
                member_id: "a".into(),
                group_instance_id: Some("i".into()),
                metadata: Bytes(vec![1, 2]),
            }],
        };
        assert_eq!(
            decode_response::<JoinGroupRequest>(&v9_body(), 9).unwrap(),
            want
        );
        // v7 and v8 have no skip_assignment.
        let mut body = v9_body();
        let at = 5 + 4 + 2 + 4 + 9 + 6 + 2;
        assert_eq!(body.remove(at), 1);
        let mut v7 = want.clone();
        v7.skip_assignment = false;
        for v in [7, 8] {
            assert_eq!(decode_response::<JoinGroupRequest>(&body, v).unwrap(), v7);
        }
        // A null protocol type and name (v7+) are compact nulls; an unknown tagged field on
        // a member is skipped.
        let mut body = v9_body();
        body.splice(15..30, [0, 0]);
        let at = body.len() - 2;
        body.splice(at..at + 1, [1, 3, 1, 0xcc]);
        let resp = decode_response::<JoinGroupRequest>(&body, 9).unwrap();
        assert_eq!((resp.protocol_type, resp.protocol_name), (None, None));
        assert_eq!(resp.members, want.members);
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in versions() {
            let frame = encode_response::<JoinGroupRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<JoinGroupRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<JoinGroupRequest>(&frame[4..cut]).is_err());
            }
        }
        for (body, v) in [(v4_member_id_required_body(), 4), (v9_body(), 9)] {
            for cut in 0..body.len() {
                assert!(decode_response::<JoinGroupRequest>(&body[..cut], v).is_err());
            }
        }
    }

    #[test]
    fn impossible_counts_are_rejected_before_allocating() {
        // v4: members count i32::MAX with nothing behind it.
        let mut body = v4_member_id_required_body();
        let at = body.len() - 4;
        body[at..].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = decode_response::<JoinGroupRequest>(&body, 4).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v9: members compact count 2^31 (2^31 - 1 entries).
        let mut body = v9_body();
        let at = 5 + 4 + 2 + 4 + 9 + 6 + 2 + 1 + 2;
        assert_eq!(body[at], 2);
        body.splice(at..at + 1, [0x80, 0x80, 0x80, 0x80, 0x08]);
        let e = decode_response::<JoinGroupRequest>(&body, 9).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v0 request: a protocol's metadata claiming i32::MAX bytes.
        let mut frame = encode_request(&small_request(), 0, 1, "c");
        let at = frame.len() - 6;
        assert_eq!(frame[at..at + 4], [0, 0, 0, 2]);
        frame[at..at + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = decode_request::<JoinGroupRequest>(&frame[4..]).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A null where a member's metadata is required.
        let mut body = v4_member_id_required_body();
        let at = body.len() - 4;
        body[at..].copy_from_slice(&[0, 0, 0, 1]);
        body.extend_from_slice(&[0, 1, b'a', 0xff, 0xff, 0xff, 0xff]);
        assert!(decode_response::<JoinGroupRequest>(&body, 4).is_err());
    }
}
