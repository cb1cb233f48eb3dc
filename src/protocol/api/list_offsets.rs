//! ListOffsets (key 2): the offset of a partition at a timestamp, or at one of the special
//! positions ([`LATEST`], [`EARLIEST`], ...).
//!
//! We speak v1..=11 (flexible from v6). v0 (several offsets per partition,
//! `MaxNumOffsets` / `OldStyleOffsets`) is not spoken, so those v0-only fields are not
//! declared. Versions 7, 8, 9 and 11 change no layout: they only admit new special
//! timestamps ([`min_version`]). v10 adds `timeout_ms` (KIP-1075).

use super::Api;
use crate::protocol::wire_struct;

/// Timestamp asking for the offset after the last record (the log end; v1+).
pub const LATEST: i64 = -1;
/// Timestamp asking for the first offset still in the log (v1+).
pub const EARLIEST: i64 = -2;
/// Timestamp asking for the offset of the record with the largest timestamp (v7+, KIP-734).
pub const MAX_TIMESTAMP: i64 = -3;
/// Timestamp asking for the first offset in the broker's local log (v8+, KIP-405).
pub const EARLIEST_LOCAL: i64 = -4;
/// Timestamp asking for the last offset in tiered storage (v9+, KIP-1005).
pub const LATEST_TIERED: i64 = -5;
/// Timestamp asking for the earliest offset pending upload to tiered storage (v11+, KIP-1023).
pub const EARLIEST_PENDING_UPLOAD: i64 = -6;

/// `replica_id` of a consumer.
pub const CONSUMER_REPLICA_ID: i32 = -1;

wire_struct! {
    /// ListOffsets request.
    pub struct ListOffsetsRequest {
        /// [`CONSUMER_REPLICA_ID`] for a consumer.
        replica_id: i32, since 0;
        /// 0 = read uncommitted, 1 = read committed (the answer is bounded by the LSO).
        isolation_level: i8, since 2;
        topics: Vec<ListOffsetsTopic>, since 0;
        /// How long the broker may wait for remote (tiered) storage.
        timeout_ms: i32, since 10;
    }

    /// The partitions asked for in one topic.
    pub struct ListOffsetsTopic {
        name: String, since 0;
        partitions: Vec<ListOffsetsPartition>, since 0;
    }

    /// One partition asked for. (`MaxNumOffsets` is v0 only.)
    pub struct ListOffsetsPartition {
        partition_index: i32, since 0;
        current_leader_epoch: i32, since 4, default -1;
        /// A timestamp in ms, or one of the special values ([`LATEST`], [`EARLIEST`], ...).
        timestamp: i64, since 0;
    }

    /// ListOffsets response.
    pub struct ListOffsetsResponse {
        throttle_time_ms: i32, since 2;
        topics: Vec<ListOffsetsTopicResponse>, since 0;
    }

    /// The answers for one topic.
    pub struct ListOffsetsTopicResponse {
        name: String, since 0;
        partitions: Vec<ListOffsetsPartitionResponse>, since 0;
    }

    /// The answer for one partition. (`OldStyleOffsets` is v0 only.)
    pub struct ListOffsetsPartitionResponse {
        partition_index: i32, since 0;
        error_code: i16, since 0;
        timestamp: i64, since 1, default -1;
        offset: i64, since 1, default -1;
        leader_epoch: i32, since 4, default -1;
    }
}

impl Api for ListOffsetsRequest {
    const KEY: i16 = 2;
    const NAME: &'static str = "ListOffsets";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 11;
    const FLEXIBLE_FROM: i16 = 6;
    type Response = ListOffsetsResponse;
    fn throttle_time_ms(resp: &ListOffsetsResponse) -> i32 {
        resp.throttle_time_ms
    }
}

/// The lowest version that can carry `timestamp` (a special value needs the version that
/// introduced it) with `isolation_level` (read committed needs v2). The broker answers a
/// special timestamp sent at an older version with `UNSUPPORTED_VERSION`, and an older
/// version silently drops the isolation level.
pub fn min_version(timestamp: i64, isolation_level: i8) -> i16 {
    let for_timestamp = match timestamp {
        MAX_TIMESTAMP => 7,
        EARLIEST_LOCAL => 8,
        LATEST_TIERED => 9,
        EARLIEST_PENDING_UPLOAD => 11,
        _ => 1,
    };
    let for_isolation = if isolation_level != 0 { 2 } else { 1 };
    for_timestamp.max(for_isolation)
}

impl ListOffsetsRequest {
    /// A consumer's request (replica id -1) at `isolation_level`, with no topics yet.
    pub fn for_consumer(isolation_level: i8) -> Self {
        ListOffsetsRequest {
            replica_id: CONSUMER_REPLICA_ID,
            isolation_level,
            ..Default::default()
        }
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
        ListOffsetsRequest::MIN_VERSION..=ListOffsetsRequest::MAX_VERSION
    }

    fn request() -> ListOffsetsRequest {
        ListOffsetsRequest {
            replica_id: CONSUMER_REPLICA_ID,
            isolation_level: 1,
            topics: vec![
                ListOffsetsTopic {
                    name: "orders".into(),
                    partitions: vec![
                        ListOffsetsPartition {
                            partition_index: 0,
                            current_leader_epoch: 4,
                            timestamp: EARLIEST,
                        },
                        ListOffsetsPartition {
                            partition_index: 3,
                            current_leader_epoch: 5,
                            timestamp: 1_700_000_000_000,
                        },
                    ],
                },
                ListOffsetsTopic {
                    name: "audit".into(),
                    partitions: vec![],
                },
            ],
            timeout_ms: 30_000,
        }
    }

    /// What the broker decodes from `request()` sent at `v`.
    fn request_seen_at(v: i16) -> ListOffsetsRequest {
        let mut r = request();
        if v < 2 {
            r.isolation_level = 0;
        }
        if v < 10 {
            r.timeout_ms = 0;
        }
        for p in r.topics.iter_mut().flat_map(|t| &mut t.partitions) {
            if v < 4 {
                p.current_leader_epoch = -1;
            }
        }
        r
    }

    fn response() -> ListOffsetsResponse {
        ListOffsetsResponse {
            throttle_time_ms: 25,
            topics: vec![ListOffsetsTopicResponse {
                name: "orders".into(),
                partitions: vec![
                    ListOffsetsPartitionResponse {
                        partition_index: 0,
                        error_code: 0,
                        timestamp: 1_700_000_000_123,
                        offset: 42,
                        leader_epoch: 4,
                    },
                    ListOffsetsPartitionResponse {
                        partition_index: 3,
                        error_code: 6,
                        timestamp: -1,
                        offset: -1,
                        leader_epoch: 5,
                    },
                ],
            }],
        }
    }

    fn response_seen_at(v: i16) -> ListOffsetsResponse {
        let mut r = response();
        if v < 2 {
            r.throttle_time_ms = 0;
        }
        for p in r.topics.iter_mut().flat_map(|t| &mut t.partitions) {
            if v < 4 {
                p.leader_epoch = -1;
            }
        }
        r
    }

    #[test]
    fn claims_v1_to_v11_flexible_from_v6() {
        assert_eq!(
            (
                ListOffsetsRequest::KEY,
                ListOffsetsRequest::MIN_VERSION,
                ListOffsetsRequest::MAX_VERSION,
                ListOffsetsRequest::FLEXIBLE_FROM
            ),
            (2, 1, 11, 6)
        );
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 9, "me");
            let (ver, corr, back) = decode_request::<ListOffsetsRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 9));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<ListOffsetsRequest>(&response(), v, 9);
            let back = decode_response::<ListOffsetsRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn special_timestamps_need_the_version_that_introduced_them() {
        assert_eq!(min_version(LATEST, 0), 1);
        assert_eq!(min_version(EARLIEST, 0), 1);
        assert_eq!(min_version(1_700_000_000_000, 0), 1);
        assert_eq!(min_version(LATEST, 1), 2);
        assert_eq!(min_version(MAX_TIMESTAMP, 0), 7);
        assert_eq!(min_version(EARLIEST_LOCAL, 1), 8);
        assert_eq!(min_version(LATEST_TIERED, 0), 9);
        assert_eq!(min_version(EARLIEST_PENDING_UPLOAD, 0), 11);
        assert_eq!(ListOffsetsRequest::for_consumer(1).replica_id, -1);
    }

    #[test]
    fn v1_request_matches_the_schema_byte_for_byte() {
        let mut req = ListOffsetsRequest::for_consumer(1); // isolation level not in v1
        req.topics = vec![ListOffsetsTopic {
            name: "t".into(),
            partitions: vec![ListOffsetsPartition {
                partition_index: 2,
                current_leader_epoch: 9, // not in v1
                timestamp: LATEST,
            }],
        }];
        let frame = encode_request(&req, 1, 7, "c");
        let mut want = vec![0, 2, 0, 1, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // replica_id -1
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics: 1, "t"
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]); // partitions: 1, index 2
        want.extend_from_slice(&[0xff; 8]); // timestamp -1
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
    }

    #[test]
    fn v10_request_ends_with_the_timeout() {
        let mut req = ListOffsetsRequest::for_consumer(0);
        req.timeout_ms = 0x0102_0304;
        let frame = encode_request(&req, 10, 7, "c");
        // header v2 (12 bytes), replica_id, isolation_level, compact empty topics, timeout, tags
        let want = [0xff, 0xff, 0xff, 0xff, 0, 1, 1, 2, 3, 4, 0];
        assert_eq!(&frame[4 + 12..], &want);
    }

    /// A v6 (first flexible) response with one partition.
    fn v6_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 10]); // throttle_time_ms
        b.push(2); // topics: 1
        b.extend_from_slice(&[2, b't']); // name "t"
        b.push(2); // partitions: 1
        b.extend_from_slice(&[0, 0, 0, 1, 0, 0]); // index 1, error 0
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5]); // timestamp 5
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 0]); // offset 256
        b.extend_from_slice(&[0, 0, 0, 3]); // leader_epoch 3
        b.extend_from_slice(&[0, 0, 0]); // partition, topic, response tags
        b
    }

    #[test]
    fn v6_response_is_decoded_as_the_schema_lays_it_out() {
        let resp = decode_response::<ListOffsetsRequest>(&v6_body(), 6).unwrap();
        assert_eq!(
            resp,
            ListOffsetsResponse {
                throttle_time_ms: 10,
                topics: vec![ListOffsetsTopicResponse {
                    name: "t".into(),
                    partitions: vec![ListOffsetsPartitionResponse {
                        partition_index: 1,
                        error_code: 0,
                        timestamp: 5,
                        offset: 256,
                        leader_epoch: 3,
                    }],
                }],
            }
        );
    }

    #[test]
    fn v1_response_has_no_throttle_time_and_no_epoch() {
        let mut b = vec![0, 0, 0, 3]; // correlation id
        b.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics: 1, "t"
        b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 1]); // partitions: 1, index 0, error 1
        b.extend_from_slice(&[0xff; 8]); // timestamp -1
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7]); // offset 7
        let resp = decode_response::<ListOffsetsRequest>(&b, 1).unwrap();
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            (p.error_code, p.timestamp, p.offset, p.leader_epoch),
            (1, -1, 7, -1)
        );
        assert_eq!(resp.throttle_time_ms, 0);
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in [1, 5, 6, 11] {
            let frame = encode_response::<ListOffsetsRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<ListOffsetsRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<ListOffsetsRequest>(&frame[4..cut]).is_err());
            }
        }
    }

    #[test]
    fn impossible_counts_are_rejected_before_allocating() {
        // v2: topics count i32::MAX.
        let body = [0, 0, 0, 1, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0];
        let e = decode_response::<ListOffsetsRequest>(&body, 2).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v6: partitions compact count 2^31 (2^31 - 1 entries).
        let mut body = v6_body();
        let at = 12; // after header (5), throttle (4), topics count (1), name (2)
        assert_eq!(body[at], 2);
        body.splice(at..at + 1, [0x80, 0x80, 0x80, 0x80, 0x08]);
        let e = decode_response::<ListOffsetsRequest>(&body, 6).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A topic name longer than the frame.
        let mut body = v6_body();
        body[10] = 0x7f;
        assert!(decode_response::<ListOffsetsRequest>(&body, 6).is_err());
    }
}
