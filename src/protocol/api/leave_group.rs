//! LeaveGroup (key 13): a member of a classic-protocol group leaves it, so the coordinator
//! rebalances at once instead of waiting for its session to expire.
//!
//! We speak v0..=5 (flexible from v4). v0-2 name the one leaving member in `member_id` (v1
//! adds the response's throttle time, v2 only changes when the broker throttles). v3
//! (KIP-345) batches: the request lists `members` (member id and `group_instance_id`), the
//! response answers each in `members` with its own error code besides the top-level one.
//! v4 is the first flexible version, v5 adds each member's `reason` (KIP-800).
//!
//! [`LeaveGroupRequest::for_member`] fills the fields of the negotiated version, and
//! [`LeaveGroupResponse::error_for`] reads the answer the same way whatever the version.
//!
//! Layouts follow `LeaveGroupRequest.json` / `LeaveGroupResponse.json`; neither declares
//! tagged fields.

use super::Api;
use crate::protocol::wire::DecodeError;
use crate::protocol::wire_struct;

/// The first version that lists the leaving members (`members`; KIP-345).
pub const BATCHED_VERSION: i16 = 3;

wire_struct! {
    /// LeaveGroup request.
    pub struct LeaveGroupRequest {
        group_id: String, since 0;
        /// The leaving member (v0-2).
        member_id: String, since 0, until 2;
        /// The leaving members (v3+).
        members: Vec<MemberIdentity>, since 3;
    }

    /// One leaving member (v3+).
    pub struct MemberIdentity {
        member_id: String, since 3;
        /// Its `group.instance.id`, if static.
        group_instance_id: Option<String>, since 3;
        /// Why it leaves, for the broker's log (v5+).
        reason: Option<String>, since 5;
    }

    /// LeaveGroup response.
    pub struct LeaveGroupResponse {
        throttle_time_ms: i32, since 1;
        error_code: i16, since 0;
        /// The answer for each member that asked to leave (v3+).
        members: Vec<MemberResponse>, since 3;
    }

    /// The answer for one leaving member (v3+).
    pub struct MemberResponse {
        member_id: String, since 3;
        /// The schema has no default for this nullable field: the empty string.
        group_instance_id: Option<String>, since 3, default Some(String::new());
        error_code: i16, since 3;
    }
}

impl Api for LeaveGroupRequest {
    const KEY: i16 = 13;
    const NAME: &'static str = "LeaveGroup";
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 5;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = LeaveGroupResponse;
    fn throttle_time_ms(resp: &LeaveGroupResponse) -> i32 {
        resp.throttle_time_ms
    }
}

impl LeaveGroupRequest {
    /// Member `member_id` (static as `group_instance_id`, if any) leaves `group_id`, with the
    /// fields version `v` carries: `member_id` up to v2, a one-element `members` from v3
    /// (the instance id and `reason` go only there, the reason from v5).
    pub fn for_member(
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        reason: Option<&str>,
        v: i16,
    ) -> Self {
        let mut req = LeaveGroupRequest {
            group_id: group_id.to_owned(),
            ..Default::default()
        };
        if v >= BATCHED_VERSION {
            req.members = vec![MemberIdentity {
                member_id: member_id.to_owned(),
                group_instance_id: group_instance_id.map(str::to_owned),
                reason: reason.map(str::to_owned),
            }];
        } else {
            req.member_id = member_id.to_owned();
        }
        req
    }
}

impl LeaveGroupResponse {
    /// The error code for member `member_id` in a response decoded at version `v`: the
    /// top-level error if there is one (coordinator errors), else up to v2 none, and from
    /// v3 that member's entry in `members`; a v3+ response without one is an error.
    pub fn error_for(&self, member_id: &str, v: i16) -> Result<i16, DecodeError> {
        if self.error_code != 0 || v < BATCHED_VERSION {
            return Ok(self.error_code);
        }
        self.members
            .iter()
            .find(|m| m.member_id == member_id)
            .map(|m| m.error_code)
            .ok_or_else(|| {
                DecodeError::invalid("LeaveGroup response has no entry for the member")
                    .context("LeaveGroupResponse.members")
            })
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
        LeaveGroupRequest::MIN_VERSION..=LeaveGroupRequest::MAX_VERSION
    }

    /// A request with every field set away from its default.
    fn request() -> LeaveGroupRequest {
        LeaveGroupRequest {
            group_id: "orders-app".into(),
            member_id: "consumer-1-5f0c".into(),
            members: vec![
                MemberIdentity {
                    member_id: "consumer-1-5f0c".into(),
                    group_instance_id: Some("host-a".into()),
                    reason: Some("closing".into()),
                },
                MemberIdentity {
                    member_id: "consumer-2-77aa".into(),
                    group_instance_id: None,
                    reason: None,
                },
            ],
        }
    }

    /// What the broker decodes from `request()` sent at `v`.
    fn request_seen_at(v: i16) -> LeaveGroupRequest {
        let mut r = request();
        if v >= 3 {
            r.member_id.clear();
        } else {
            r.members.clear();
        }
        if v < 5 {
            for m in &mut r.members {
                m.reason = None;
            }
        }
        r
    }

    fn response() -> LeaveGroupResponse {
        LeaveGroupResponse {
            throttle_time_ms: 30,
            error_code: 15,
            members: vec![
                MemberResponse {
                    member_id: "consumer-1-5f0c".into(),
                    group_instance_id: Some("host-a".into()),
                    error_code: 0,
                },
                MemberResponse {
                    member_id: "consumer-2-77aa".into(),
                    group_instance_id: None,
                    error_code: 25,
                },
            ],
        }
    }

    fn response_seen_at(v: i16) -> LeaveGroupResponse {
        let mut r = response();
        if v < 1 {
            r.throttle_time_ms = 0;
        }
        if v < 3 {
            r.members.clear();
        }
        r
    }

    #[test]
    fn claims_v0_to_v5_flexible_from_v4() {
        assert_eq!(
            (
                LeaveGroupRequest::KEY,
                LeaveGroupRequest::MIN_VERSION,
                LeaveGroupRequest::MAX_VERSION,
                LeaveGroupRequest::FLEXIBLE_FROM
            ),
            (13, 0, 5, 4)
        );
        assert_eq!(LeaveGroupRequest::throttle_time_ms(&response()), 30);
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 6, "me");
            let (ver, corr, back) = decode_request::<LeaveGroupRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 6));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<LeaveGroupRequest>(&response(), v, 6);
            let back = decode_response::<LeaveGroupRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn defaults_are_the_schema_defaults() {
        let r = LeaveGroupRequest::default();
        assert_eq!((r.member_id.as_str(), r.members.len()), ("", 0));
        let m = MemberIdentity::default();
        assert_eq!((m.group_instance_id, m.reason), (None, None));
        assert_eq!(
            MemberResponse::default().group_instance_id.as_deref(),
            Some("")
        );
    }

    #[test]
    fn v0_and_v3_requests_match_the_schema_byte_for_byte() {
        let frame = encode_request(
            &LeaveGroupRequest::for_member("g", "m", None, None, 0),
            0,
            7,
            "c",
        );
        let mut want = vec![0, 13, 0, 0, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0, 1, b'g']); // group_id
        want.extend_from_slice(&[0, 1, b'm']); // member_id
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
        // v3: a members array instead of member_id; the reason is not sent before v5.
        let req = LeaveGroupRequest::for_member("g", "m", Some("i"), Some("r"), 3);
        let frame = encode_request(&req, 3, 7, "c");
        let mut want = vec![0, 13, 0, 3, 0, 0, 0, 7, 0, 1, b'c'];
        want.extend_from_slice(&[0, 1, b'g']); // group_id
        want.extend_from_slice(&[0, 0, 0, 1]); // members: 1
        want.extend_from_slice(&[0, 1, b'm']); // member_id
        want.extend_from_slice(&[0, 1, b'i']); // group_instance_id
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v4_and_v5_requests_match_the_schema_byte_for_byte() {
        let req = LeaveGroupRequest::for_member("g", "m", None, Some("r"), 5);
        let frame = encode_request(&req, 5, 7, "c");
        let mut want = vec![0, 13, 0, 5, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.extend_from_slice(&[2, b'g']); // group_id
        want.push(2); // members: 1
        want.extend_from_slice(&[2, b'm']); // member_id
        want.push(0); // group_instance_id null
        want.extend_from_slice(&[2, b'r']); // reason
        want.push(0); // member tags
        want.push(0); // request tags
        assert_eq!(&frame[4..], &want[..]);
        // v4: no reason.
        let frame = encode_request(&req, 4, 7, "c");
        want[3] = 4;
        want.drain(18..20);
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn for_member_and_error_for_work_at_every_version() {
        for v in versions() {
            let req = LeaveGroupRequest::for_member("grp", "m-1", Some("i-1"), Some("bye"), v);
            let frame = encode_request(&req, v, 1, "c");
            let (_, _, back) = decode_request::<LeaveGroupRequest>(&frame[4..]).unwrap();
            assert_eq!(back.group_id, "grp");
            if v >= 3 {
                assert_eq!(back.member_id, "");
                assert_eq!(
                    back.members,
                    vec![MemberIdentity {
                        member_id: "m-1".into(),
                        group_instance_id: Some("i-1".into()),
                        reason: (v >= 5).then(|| "bye".into()),
                    }],
                    "v{v}"
                );
            } else {
                assert_eq!((back.member_id.as_str(), back.members.len()), ("m-1", 0));
            }

            // The broker's answer for m-1, as version v has it.
            let mut resp = LeaveGroupResponse::default();
            if v >= 3 {
                resp.members = vec![
                    MemberResponse {
                        member_id: "other".into(),
                        group_instance_id: None,
                        error_code: 0,
                    },
                    MemberResponse {
                        member_id: "m-1".into(),
                        group_instance_id: Some("i-1".into()),
                        error_code: 82,
                    },
                ];
            }
            let frame = encode_response::<LeaveGroupRequest>(&resp, v, 1);
            let back = decode_response::<LeaveGroupRequest>(&frame[4..], v).unwrap();
            let want = if v >= 3 { 82 } else { 0 };
            assert_eq!(back.error_for("m-1", v).unwrap(), want, "v{v}");
            if v >= 3 {
                assert!(back.error_for("missing", v).is_err(), "v{v}");
            }
            // A top-level error answers for every member.
            resp.error_code = 16;
            let frame = encode_response::<LeaveGroupRequest>(&resp, v, 1);
            let back = decode_response::<LeaveGroupRequest>(&frame[4..], v).unwrap();
            assert_eq!(back.error_for("missing", v).unwrap(), 16, "v{v}");
        }
    }

    #[test]
    fn v0_response_is_decoded_as_the_schema_lays_it_out() {
        let resp = decode_response::<LeaveGroupRequest>(&[0, 0, 0, 3, 0, 25], 0).unwrap();
        assert_eq!(
            resp,
            LeaveGroupResponse {
                throttle_time_ms: 0,
                error_code: 25,
                members: vec![],
            }
        );
    }

    /// A v3 response with one member.
    fn v3_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3]; // correlation id
        b.extend_from_slice(&[0, 0, 0, 4]); // throttle_time_ms
        b.extend_from_slice(&[0, 0]); // error_code
        b.extend_from_slice(&[0, 0, 0, 1]); // members: 1
        b.extend_from_slice(&[0, 1, b'm']); // member_id
        b.extend_from_slice(&[0xff, 0xff]); // group_instance_id null
        b.extend_from_slice(&[0, 25]); // error_code UNKNOWN_MEMBER_ID
        b
    }

    /// A v4 (flexible) response with one member.
    fn v4_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 4]); // throttle_time_ms
        b.extend_from_slice(&[0, 0]); // error_code
        b.push(2); // members: 1
        b.extend_from_slice(&[2, b'm']); // member_id
        b.extend_from_slice(&[2, b'i']); // group_instance_id
        b.extend_from_slice(&[0, 82]); // error_code FENCED_INSTANCE_ID
        b.push(0); // member tags
        b.push(0); // response tags
        b
    }

    #[test]
    fn v3_and_v4_responses_are_decoded_as_the_schema_lays_them_out() {
        let resp = decode_response::<LeaveGroupRequest>(&v3_body(), 3).unwrap();
        assert_eq!(
            resp,
            LeaveGroupResponse {
                throttle_time_ms: 4,
                error_code: 0,
                members: vec![MemberResponse {
                    member_id: "m".into(),
                    group_instance_id: None,
                    error_code: 25,
                }],
            }
        );
        for v in [4, 5] {
            let resp = decode_response::<LeaveGroupRequest>(&v4_body(), v).unwrap();
            assert_eq!(
                resp.members,
                vec![MemberResponse {
                    member_id: "m".into(),
                    group_instance_id: Some("i".into()),
                    error_code: 82,
                }],
                "v{v}"
            );
            assert_eq!(resp.error_for("m", v).unwrap(), 82);
        }
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in versions() {
            let frame = encode_response::<LeaveGroupRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<LeaveGroupRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<LeaveGroupRequest>(&frame[4..cut]).is_err());
            }
        }
        for (body, v) in [(v3_body(), 3), (v4_body(), 4)] {
            for cut in 0..body.len() {
                assert!(decode_response::<LeaveGroupRequest>(&body[..cut], v).is_err());
            }
        }
    }

    #[test]
    fn impossible_counts_are_rejected_before_allocating() {
        // v3: members count i32::MAX.
        let mut body = v3_body();
        body[10..14].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = decode_response::<LeaveGroupRequest>(&body, 3).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v4: members compact count 2^31 (2^31 - 1 entries).
        let mut body = v4_body();
        assert_eq!(body[11], 2);
        body.splice(11..12, [0x80, 0x80, 0x80, 0x80, 0x08]);
        let e = decode_response::<LeaveGroupRequest>(&body, 4).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A v3 request whose members count is i32::MAX.
        let mut frame = encode_request(&request(), 3, 1, "c");
        let at = 4 + 11 + 12;
        assert_eq!(frame[at..at + 4], [0, 0, 0, 2]);
        frame[at..at + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = decode_request::<LeaveGroupRequest>(&frame[4..]).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
    }
}
