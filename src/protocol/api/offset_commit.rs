//! OffsetCommit (key 8): store a group's committed offsets with its coordinator.
//!
//! We speak v2..=9 (flexible from v8). v0 (offsets kept in ZooKeeper) and v1 (per-partition
//! `CommitTimestamp`) are deprecated and not spoken, so the v1-only `CommitTimestamp` is not
//! declared. `retention_time_ms` exists in v2-4 only (from v5 the broker's
//! `offsets.retention.minutes` alone decides); v6 adds the committed leader epoch, v7 the
//! static member's `group_instance_id`. v9 is the first version usable with the KIP-848
//! consumer group protocol (`generation_id_or_member_epoch` then carries the member epoch);
//! its layout is v8's, but the broker may answer `STALE_MEMBER_EPOCH` and
//! `GROUP_ID_NOT_FOUND`. v10 names topics by id instead of by name and is not spoken.
//!
//! Layouts follow `OffsetCommitRequest.json` / `OffsetCommitResponse.json`; neither declares
//! tagged fields.

use super::Api;
use crate::protocol::wire_struct;

wire_struct! {
    /// OffsetCommit request.
    pub struct OffsetCommitRequest {
        group_id: String, since 0;
        /// The generation (classic protocol) or member epoch (KIP-848 protocol); -1 for a
        /// commit from outside the group (only allowed while the group is empty).
        generation_id_or_member_epoch: i32, since 1, default -1;
        /// The member id the coordinator assigned; empty for a commit from outside the group.
        member_id: String, since 1;
        /// The static member's `group.instance.id`, if any.
        group_instance_id: Option<String>, since 7;
        /// How long the broker keeps the offsets, -1 for its default (v2-4).
        retention_time_ms: i64, since 2, until 4, default -1;
        topics: Vec<OffsetCommitRequestTopic>, since 0;
    }

    /// The offsets to commit in one topic.
    pub struct OffsetCommitRequestTopic {
        name: String, since 0;
        partitions: Vec<OffsetCommitRequestPartition>, since 0;
    }

    /// One partition's offset to commit. (`CommitTimestamp` is v1 only.)
    pub struct OffsetCommitRequestPartition {
        partition_index: i32, since 0;
        /// The offset of the next record to consume.
        committed_offset: i64, since 0;
        /// The leader epoch of the last consumed record, -1 if unknown.
        committed_leader_epoch: i32, since 6, default -1;
        committed_metadata: Option<String>, since 0;
    }

    /// OffsetCommit response.
    pub struct OffsetCommitResponse {
        throttle_time_ms: i32, since 3;
        topics: Vec<OffsetCommitResponseTopic>, since 0;
    }

    /// The answers for one topic.
    pub struct OffsetCommitResponseTopic {
        name: String, since 0;
        partitions: Vec<OffsetCommitResponsePartition>, since 0;
    }

    /// The answer for one partition.
    pub struct OffsetCommitResponsePartition {
        partition_index: i32, since 0;
        error_code: i16, since 0;
    }
}

impl Api for OffsetCommitRequest {
    const KEY: i16 = 8;
    const NAME: &'static str = "OffsetCommit";
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 9;
    const FLEXIBLE_FROM: i16 = 8;
    type Response = OffsetCommitResponse;
    fn throttle_time_ms(resp: &OffsetCommitResponse) -> i32 {
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
        OffsetCommitRequest::MIN_VERSION..=OffsetCommitRequest::MAX_VERSION
    }

    /// A request with every field set away from its default.
    fn request() -> OffsetCommitRequest {
        OffsetCommitRequest {
            group_id: "orders-app".into(),
            generation_id_or_member_epoch: 14,
            member_id: "consumer-1-5f0c".into(),
            group_instance_id: Some("host-a".into()),
            retention_time_ms: 86_400_000,
            topics: vec![
                OffsetCommitRequestTopic {
                    name: "orders".into(),
                    partitions: vec![
                        OffsetCommitRequestPartition {
                            partition_index: 0,
                            committed_offset: 1_234,
                            committed_leader_epoch: 7,
                            committed_metadata: Some("m".into()),
                        },
                        OffsetCommitRequestPartition {
                            partition_index: 5,
                            committed_offset: 0,
                            committed_leader_epoch: 8,
                            committed_metadata: None,
                        },
                    ],
                },
                OffsetCommitRequestTopic {
                    name: "audit".into(),
                    partitions: vec![],
                },
            ],
        }
    }

    /// What the broker decodes from `request()` sent at `v`.
    fn request_seen_at(v: i16) -> OffsetCommitRequest {
        let mut r = request();
        if v < 7 {
            r.group_instance_id = None;
        }
        if v > 4 {
            r.retention_time_ms = -1;
        }
        for p in r.topics.iter_mut().flat_map(|t| &mut t.partitions) {
            if v < 6 {
                p.committed_leader_epoch = -1;
            }
        }
        r
    }

    fn response() -> OffsetCommitResponse {
        OffsetCommitResponse {
            throttle_time_ms: 30,
            topics: vec![
                OffsetCommitResponseTopic {
                    name: "orders".into(),
                    partitions: vec![
                        OffsetCommitResponsePartition {
                            partition_index: 0,
                            error_code: 0,
                        },
                        OffsetCommitResponsePartition {
                            partition_index: 5,
                            error_code: 22,
                        },
                    ],
                },
                OffsetCommitResponseTopic {
                    name: "audit".into(),
                    partitions: vec![],
                },
            ],
        }
    }

    fn response_seen_at(v: i16) -> OffsetCommitResponse {
        let mut r = response();
        if v < 3 {
            r.throttle_time_ms = 0;
        }
        r
    }

    #[test]
    fn claims_v2_to_v9_flexible_from_v8() {
        assert_eq!(
            (
                OffsetCommitRequest::KEY,
                OffsetCommitRequest::MIN_VERSION,
                OffsetCommitRequest::MAX_VERSION,
                OffsetCommitRequest::FLEXIBLE_FROM
            ),
            (8, 2, 9, 8)
        );
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 6, "me");
            let (ver, corr, back) = decode_request::<OffsetCommitRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 6));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<OffsetCommitRequest>(&response(), v, 6);
            let back = decode_response::<OffsetCommitRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn defaults_are_the_schema_defaults() {
        let r = OffsetCommitRequest::default();
        assert_eq!(
            (
                r.generation_id_or_member_epoch,
                r.member_id.as_str(),
                r.group_instance_id.as_deref(),
                r.retention_time_ms
            ),
            (-1, "", None, -1)
        );
        assert_eq!(
            OffsetCommitRequestPartition::default().committed_leader_epoch,
            -1
        );
    }

    /// A v2 request: one partition of one topic.
    fn v2_request() -> OffsetCommitRequest {
        OffsetCommitRequest {
            group_id: "g".into(),
            generation_id_or_member_epoch: 3,
            member_id: "m".into(),
            group_instance_id: Some("i".into()), // not in v2
            retention_time_ms: -1,
            topics: vec![OffsetCommitRequestTopic {
                name: "t".into(),
                partitions: vec![OffsetCommitRequestPartition {
                    partition_index: 2,
                    committed_offset: 42,
                    committed_leader_epoch: 9, // not in v2
                    committed_metadata: None,
                }],
            }],
        }
    }

    #[test]
    fn v2_request_matches_the_schema_byte_for_byte() {
        let frame = encode_request(&v2_request(), 2, 7, "c");
        let mut want = vec![0, 8, 0, 2, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0, 1, b'g']); // group_id
        want.extend_from_slice(&[0, 0, 0, 3]); // generation_id
        want.extend_from_slice(&[0, 1, b'm']); // member_id
        want.extend_from_slice(&[0xff; 8]); // retention_time_ms -1
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics: 1, "t"
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]); // partitions: 1, index 2
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 42]); // committed_offset
        want.extend_from_slice(&[0xff, 0xff]); // committed_metadata null
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
        // v5 drops the retention time, v6 adds the leader epoch before the metadata.
        let frame = encode_request(&v2_request(), 6, 7, "c");
        let mut want = vec![0, 8, 0, 6, 0, 0, 0, 7, 0, 1, b'c'];
        want.extend_from_slice(&[0, 1, b'g', 0, 0, 0, 3, 0, 1, b'm']);
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 2]);
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 9, 0xff, 0xff]);
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v8_request_matches_the_schema_byte_for_byte() {
        let mut req = v2_request();
        req.topics[0].partitions[0].committed_metadata = Some("x".into());
        let frame = encode_request(&req, 8, 7, "c");
        let mut want = vec![0, 8, 0, 8, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.extend_from_slice(&[2, b'g']); // group_id, compact
        want.extend_from_slice(&[0, 0, 0, 3]); // generation_id_or_member_epoch
        want.extend_from_slice(&[2, b'm']); // member_id
        want.extend_from_slice(&[2, b'i']); // group_instance_id (no retention after v4)
        want.extend_from_slice(&[2, 2, b't']); // topics: 1, "t"
        want.extend_from_slice(&[2, 0, 0, 0, 2]); // partitions: 1, index 2
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 42]); // committed_offset
        want.extend_from_slice(&[0, 0, 0, 9]); // committed_leader_epoch
        want.extend_from_slice(&[2, b'x']); // committed_metadata
        want.push(0); // partition tags
        want.push(0); // topic tags
        want.push(0); // request tags
        assert_eq!(&frame[4..], &want[..]);
        // v9 is laid out as v8; a null instance id and metadata are compact nulls.
        req.group_instance_id = None;
        req.topics[0].partitions[0].committed_metadata = None;
        let frame = encode_request(&req, 9, 7, "c");
        want[3] = 9;
        want.splice(20..22, [0]); // group_instance_id null
        let at = want.len() - 5;
        want.splice(at..at + 2, [0]); // committed_metadata null
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v2_response_is_decoded_as_the_schema_lays_it_out() {
        let mut b = vec![0, 0, 0, 3]; // correlation id (no throttle time before v3)
        b.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics: 1, "t"
        b.extend_from_slice(&[0, 0, 0, 2]); // partitions: 2
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // index 0, error 0
        b.extend_from_slice(&[0, 0, 0, 1, 0, 25]); // index 1, UNKNOWN_MEMBER_ID
        let resp = decode_response::<OffsetCommitRequest>(&b, 2).unwrap();
        assert_eq!(
            resp,
            OffsetCommitResponse {
                throttle_time_ms: 0,
                topics: vec![OffsetCommitResponseTopic {
                    name: "t".into(),
                    partitions: vec![
                        OffsetCommitResponsePartition {
                            partition_index: 0,
                            error_code: 0,
                        },
                        OffsetCommitResponsePartition {
                            partition_index: 1,
                            error_code: 25,
                        },
                    ],
                }],
            }
        );
    }

    /// A v8 (first flexible) response with one partition.
    fn v8_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 10]); // throttle_time_ms
        b.push(2); // topics: 1
        b.extend_from_slice(&[2, b't']); // name "t"
        b.push(2); // partitions: 1
        b.extend_from_slice(&[0, 0, 0, 4, 0, 27]); // index 4, REBALANCE_IN_PROGRESS
        b.extend_from_slice(&[0, 0, 0]); // partition, topic, response tags
        b
    }

    #[test]
    fn v8_response_is_decoded_as_the_schema_lays_it_out() {
        let want = OffsetCommitResponse {
            throttle_time_ms: 10,
            topics: vec![OffsetCommitResponseTopic {
                name: "t".into(),
                partitions: vec![OffsetCommitResponsePartition {
                    partition_index: 4,
                    error_code: 27,
                }],
            }],
        };
        for v in [8, 9] {
            let resp = decode_response::<OffsetCommitRequest>(&v8_body(), v).unwrap();
            assert_eq!(resp, want, "v{v}");
        }
        // An unknown tagged field on a partition is skipped.
        let mut body = v8_body();
        let at = body.len() - 3;
        body.splice(at..at + 1, [1, 5, 2, 0xaa, 0xbb]);
        let resp = decode_response::<OffsetCommitRequest>(&body, 8).unwrap();
        assert_eq!(resp, want);
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in versions() {
            let frame = encode_response::<OffsetCommitRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<OffsetCommitRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<OffsetCommitRequest>(&frame[4..cut]).is_err());
            }
        }
        let body = v8_body();
        for cut in 0..body.len() {
            assert!(decode_response::<OffsetCommitRequest>(&body[..cut], 8).is_err());
        }
    }

    #[test]
    fn impossible_counts_are_rejected_before_allocating() {
        // v2: topics count i32::MAX with nothing behind it.
        let body = [0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff];
        let e = decode_response::<OffsetCommitRequest>(&body, 2).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v8: partitions compact count 2^31 (2^31 - 1 entries).
        let mut body = v8_body();
        let at = 12; // after header (5), throttle (4), topics count (1), name (2)
        assert_eq!(body[at], 2);
        body.splice(at..at + 1, [0x80, 0x80, 0x80, 0x80, 0x08]);
        let e = decode_response::<OffsetCommitRequest>(&body, 8).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A v2 request whose topics count is i32::MAX.
        let mut frame = encode_request(&v2_request(), 2, 1, "c");
        let at = 4 + 11 + 3 + 4 + 3 + 8; // size, header, group, generation, member, retention
        assert_eq!(frame[at..at + 4], [0, 0, 0, 1]);
        frame[at..at + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = decode_request::<OffsetCommitRequest>(&frame[4..]).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A null where the topics array is required.
        let body = [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
        assert!(decode_response::<OffsetCommitRequest>(&body, 2).is_err());
    }
}
