//! Fetch (key 1): records of many partitions in one round trip, with fetch sessions (v7+).
//!
//! We speak v4..=18 (flexible from v12). v4 is the first with record batches (magic 2) and
//! transactional reads; v13 replaces topic names with topic ids. The record set of each
//! partition is not copied: [`PartitionData::records`] is the byte range it occupies in the
//! response frame (the body handed to `decode_response`, without the size prefix).
//!
//! Tagged fields are not declared (skipped on read, never written): request `ClusterId`
//! (tag 0, v12+) and `ReplicaState` (tag 1, v15+); request partition `ReplicaDirectoryId`
//! (tag 0, v17+) and `HighWatermark` (tag 1, v18+, a follower's); response partition
//! `DivergingEpoch` (tag 0), `CurrentLeader` (tag 1) and `SnapshotId` (tag 2), all v12+;
//! response `NodeEndpoints` (tag 0, v16+). v15..=18 differ from v14 only in tagged fields
//! and in dropping `replica_id`.

use super::Api;
use crate::protocol::message::{RecordsRef, Uuid};
use crate::protocol::wire_struct;

wire_struct! {
    /// Fetch request.
    pub struct FetchRequest {
        /// -1 for a consumer. Not sent from v15 (replaced by the tagged `ReplicaState`).
        replica_id: i32, since 0, until 14, default -1;
        max_wait_ms: i32, since 0;
        min_bytes: i32, since 0;
        max_bytes: i32, since 3, default i32::MAX;
        /// 0 = read uncommitted, 1 = read committed.
        isolation_level: i8, since 4, default 0;
        /// 0 = no session (full fetch) or ask for a new one with `session_epoch` 0.
        session_id: i32, since 7, default 0;
        /// -1 = full fetch without a session.
        session_epoch: i32, since 7, default -1;
        topics: Vec<FetchTopic>, since 0;
        /// Partitions to drop from an incremental fetch session.
        forgotten_topics_data: Vec<ForgottenTopic>, since 7;
        rack_id: String, since 11, default String::new();
    }

    /// The partitions to fetch of one topic: by name up to v12, by id from v13.
    pub struct FetchTopic {
        topic: String, since 0, until 12;
        topic_id: Uuid, since 13;
        partitions: Vec<FetchPartition>, since 0;
    }

    /// One partition to fetch.
    pub struct FetchPartition {
        partition: i32, since 0;
        current_leader_epoch: i32, since 9, default -1;
        fetch_offset: i64, since 0;
        last_fetched_epoch: i32, since 12, default -1;
        /// Only meaningful from a follower.
        log_start_offset: i64, since 5, default -1;
        partition_max_bytes: i32, since 0;
    }

    /// Partitions leaving an incremental fetch session.
    pub struct ForgottenTopic {
        topic: String, since 7, until 12;
        topic_id: Uuid, since 13;
        partitions: Vec<i32>, since 7;
    }

    /// Fetch response.
    pub struct FetchResponse {
        throttle_time_ms: i32, since 1;
        error_code: i16, since 7;
        session_id: i32, since 7, default 0;
        responses: Vec<FetchableTopicResponse>, since 0;
    }

    /// The partitions of one topic: by name up to v12, by id from v13.
    pub struct FetchableTopicResponse {
        topic: String, since 0, until 12;
        topic_id: Uuid, since 13;
        partitions: Vec<PartitionData>, since 0;
    }

    /// One partition's answer.
    pub struct PartitionData {
        partition_index: i32, since 0;
        error_code: i16, since 0;
        high_watermark: i64, since 0;
        last_stable_offset: i64, since 4, default -1;
        log_start_offset: i64, since 5, default -1;
        /// Null unless read committed and the range has aborted transactions.
        aborted_transactions: Option<Vec<AbortedTransaction>>, since 4;
        preferred_read_replica: i32, since 11, default -1;
        /// Where the record batches lie in the frame (len 0 for a null or empty set).
        records: RecordsRef, since 0;
    }

    /// An aborted transaction overlapping the fetched range.
    pub struct AbortedTransaction {
        producer_id: i64, since 4;
        first_offset: i64, since 4;
    }
}

impl Api for FetchRequest {
    const KEY: i16 = 1;
    const NAME: &'static str = "Fetch";
    const MIN_VERSION: i16 = 4;
    const MAX_VERSION: i16 = 18;
    const FLEXIBLE_FROM: i16 = 12;
    type Response = FetchResponse;
    fn throttle_time_ms(resp: &FetchResponse) -> i32 {
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
        FetchRequest::MIN_VERSION..=FetchRequest::MAX_VERSION
    }

    fn id(b: u8) -> Uuid {
        Uuid([b; 16])
    }

    fn fetch_partition(partition: i32) -> FetchPartition {
        FetchPartition {
            partition,
            current_leader_epoch: 7,
            fetch_offset: 1_000 + partition as i64,
            last_fetched_epoch: 6,
            log_start_offset: 12,
            partition_max_bytes: 1 << 20,
        }
    }

    fn request() -> FetchRequest {
        FetchRequest {
            replica_id: -1,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 50 << 20,
            isolation_level: 1,
            session_id: 0x1234,
            session_epoch: 3,
            topics: vec![
                FetchTopic {
                    topic: "orders".into(),
                    topic_id: id(1),
                    partitions: vec![fetch_partition(0), fetch_partition(2)],
                },
                FetchTopic {
                    topic: "audit".into(),
                    topic_id: id(2),
                    partitions: vec![fetch_partition(1)],
                },
            ],
            forgotten_topics_data: vec![ForgottenTopic {
                topic: "old".into(),
                topic_id: id(3),
                partitions: vec![4, 5],
            }],
            rack_id: "rack-a".into(),
        }
    }

    /// What the broker decodes from `request()` sent at `v`.
    fn request_seen_at(v: i16) -> FetchRequest {
        let mut r = request();
        if v > 14 {
            r.replica_id = -1;
        }
        if v < 7 {
            r.session_id = 0;
            r.session_epoch = -1;
            r.forgotten_topics_data.clear();
        }
        if v < 11 {
            r.rack_id.clear();
        }
        for t in &mut r.topics {
            if v > 12 {
                t.topic.clear();
            } else {
                t.topic_id = Uuid::ZERO;
            }
            for p in &mut t.partitions {
                if v < 5 {
                    p.log_start_offset = -1;
                }
                if v < 9 {
                    p.current_leader_epoch = -1;
                }
                if v < 12 {
                    p.last_fetched_epoch = -1;
                }
            }
        }
        for f in &mut r.forgotten_topics_data {
            if v > 12 {
                f.topic.clear();
            } else {
                f.topic_id = Uuid::ZERO;
            }
        }
        r
    }

    fn partition_data(index: i32, aborted: bool) -> PartitionData {
        PartitionData {
            partition_index: index,
            error_code: if aborted { 0 } else { 1 },
            high_watermark: 5_000,
            last_stable_offset: 4_900,
            log_start_offset: 100,
            aborted_transactions: aborted.then(|| {
                vec![
                    AbortedTransaction {
                        producer_id: 77,
                        first_offset: 4_800,
                    },
                    AbortedTransaction {
                        producer_id: 78,
                        first_offset: 4_850,
                    },
                ]
            }),
            preferred_read_replica: 3,
            records: RecordsRef::default(),
        }
    }

    fn response() -> FetchResponse {
        FetchResponse {
            throttle_time_ms: 40,
            error_code: 0,
            session_id: 0x1234,
            responses: vec![
                FetchableTopicResponse {
                    topic: "orders".into(),
                    topic_id: id(1),
                    partitions: vec![partition_data(0, true), partition_data(2, false)],
                },
                FetchableTopicResponse {
                    topic: "audit".into(),
                    topic_id: id(2),
                    partitions: vec![],
                },
            ],
        }
    }

    /// What we decode from `response()` sent at `v`, record ranges aside.
    fn response_seen_at(v: i16) -> FetchResponse {
        let mut r = response();
        if v < 7 {
            r.error_code = 0;
            r.session_id = 0;
        }
        for t in &mut r.responses {
            if v > 12 {
                t.topic.clear();
            } else {
                t.topic_id = Uuid::ZERO;
            }
            for p in &mut t.partitions {
                if v < 5 {
                    p.log_start_offset = -1;
                }
                if v < 11 {
                    p.preferred_read_replica = -1;
                }
            }
        }
        r
    }

    /// Record ranges depend on where they fell in the frame; compare the rest.
    fn without_records(mut r: FetchResponse) -> FetchResponse {
        for p in r.responses.iter_mut().flat_map(|t| &mut t.partitions) {
            p.records = RecordsRef::default();
        }
        r
    }

    #[test]
    fn claims_v4_to_v18_flexible_from_v12() {
        assert_eq!(
            (
                FetchRequest::KEY,
                FetchRequest::MIN_VERSION,
                FetchRequest::MAX_VERSION,
                FetchRequest::FLEXIBLE_FROM
            ),
            (1, 4, 18, 12)
        );
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 11, "me");
            let (ver, corr, back) = decode_request::<FetchRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 11));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<FetchRequest>(&response(), v, 11);
            let back = decode_response::<FetchRequest>(&frame[4..], v).unwrap();
            for p in back.responses.iter().flat_map(|t| &t.partitions) {
                assert_eq!(p.records.len, 0, "v{v}: records are encoded as null");
                assert!(p.records.start <= frame.len() - 4);
            }
            assert_eq!(without_records(back), response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn v4_request_matches_the_schema_byte_for_byte() {
        let req = FetchRequest {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 0x0010_0000,
            isolation_level: 1,
            topics: vec![FetchTopic {
                topic: "t".into(),
                topic_id: id(9), // not in v4
                partitions: vec![FetchPartition {
                    partition: 2,
                    fetch_offset: 42,
                    partition_max_bytes: 0x0001_0000,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        let frame = encode_request(&req, 4, 7, "c");
        let mut want = vec![0, 1, 0, 4, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // replica_id -1
        want.extend_from_slice(&[0, 0, 1, 0xf4, 0, 0, 0, 1]); // max_wait_ms, min_bytes
        want.extend_from_slice(&[0, 0x10, 0, 0, 1]); // max_bytes, isolation_level
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics: 1, "t"
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]); // partitions: 1, partition 2
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 42]); // fetch_offset
        want.extend_from_slice(&[0, 1, 0, 0]); // partition_max_bytes (no log_start_offset in v4)
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
    }

    #[test]
    fn v15_request_by_topic_id_matches_the_schema_byte_for_byte() {
        let req = FetchRequest {
            replica_id: 5, // not sent from v15
            max_wait_ms: 1,
            min_bytes: 2,
            max_bytes: 3,
            isolation_level: 0,
            session_id: 4,
            session_epoch: 0,
            topics: vec![FetchTopic {
                topic: "t".into(), // not sent from v13
                topic_id: id(0xaa),
                partitions: vec![FetchPartition {
                    partition: 1,
                    current_leader_epoch: 2,
                    fetch_offset: 3,
                    last_fetched_epoch: 4,
                    log_start_offset: -1,
                    partition_max_bytes: 5,
                }],
            }],
            forgotten_topics_data: vec![ForgottenTopic {
                topic: "old".into(),
                topic_id: id(0xbb),
                partitions: vec![6],
            }],
            rack_id: "r".into(),
        };
        let frame = encode_request(&req, 15, 7, "c");
        let mut want = vec![0, 1, 0, 15, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]); // wait, min, max
        want.extend_from_slice(&[0, 0, 0, 0, 4, 0, 0, 0, 0]); // isolation, session id, epoch
        want.push(2); // topics: 1
        want.extend_from_slice(&[0xaa; 16]); // topic_id
        want.push(2); // partitions: 1
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]); // partition, current_leader_epoch
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 3]); // fetch_offset
        want.extend_from_slice(&[0, 0, 0, 4]); // last_fetched_epoch
        want.extend_from_slice(&[0xff; 8]); // log_start_offset
        want.extend_from_slice(&[0, 0, 0, 5, 0]); // partition_max_bytes, partition tags
        want.push(0); // topic tags
        want.push(2); // forgotten: 1
        want.extend_from_slice(&[0xbb; 16]); // topic_id
        want.extend_from_slice(&[2, 0, 0, 0, 6, 0]); // partitions [6], tags
        want.extend_from_slice(&[2, b'r', 0]); // rack_id "r", request tags
        assert_eq!(&frame[4..], &want[..]);
    }

    /// A v4 response: one topic, one partition with one aborted transaction and `records`.
    fn v4_body(records: &[u8]) -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3]; // correlation id
        b.extend_from_slice(&[0, 0, 0, 0]); // throttle_time_ms
        b.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // responses: 1, "t"
        b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0]); // partitions: 1, index 2, error 0
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 100]); // high_watermark
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 90]); // last_stable_offset (no log start in v4)
        b.extend_from_slice(&[0, 0, 0, 1]); // aborted_transactions: 1
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 50]);
        b.extend_from_slice(&(records.len() as i32).to_be_bytes());
        b.extend_from_slice(records);
        b
    }

    #[test]
    fn v4_response_records_point_into_the_frame() {
        let records = b"batch-bytes-here";
        let body = v4_body(records);
        let resp = decode_response::<FetchRequest>(&body, 4).unwrap();
        assert_eq!((resp.error_code, resp.session_id), (0, 0));
        let t = &resp.responses[0];
        assert_eq!((t.topic.as_str(), t.topic_id), ("t", Uuid::ZERO));
        let p = &t.partitions[0];
        assert_eq!(
            (
                p.partition_index,
                p.high_watermark,
                p.last_stable_offset,
                p.log_start_offset,
                p.preferred_read_replica
            ),
            (2, 100, 90, -1, -1)
        );
        assert_eq!(
            p.aborted_transactions,
            Some(vec![AbortedTransaction {
                producer_id: 7,
                first_offset: 50
            }])
        );
        assert_eq!(p.records.start, body.len() - records.len());
        assert_eq!(p.records.len, records.len());
        assert_eq!(&body[p.records.start..][..p.records.len], records);
    }

    #[test]
    fn v4_response_with_null_aborted_transactions_and_null_records() {
        let mut b = vec![0, 0, 0, 3, 0, 0, 0, 0];
        b.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&[0; 16]); // high_watermark, last_stable_offset
        b.extend_from_slice(&[0xff; 4]); // aborted_transactions: null
        b.extend_from_slice(&[0xff; 4]); // records: null
        let resp = decode_response::<FetchRequest>(&b, 4).unwrap();
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.aborted_transactions, None);
        assert_eq!(p.records.len, 0);
    }

    /// A v13 response: topic id, compact records (200 bytes: a two-byte length varint) and a
    /// tagged `CurrentLeader` after them, which is skipped.
    fn v13_body(records: &[u8]) -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 9]); // throttle, error, session_id 9
        b.push(2); // responses: 1
        b.extend_from_slice(&[0x5a; 16]); // topic_id
        b.push(2); // partitions: 1
        b.extend_from_slice(&[0, 0, 0, 1, 0, 0]); // index 1, error 0
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 0]); // high_watermark 256
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0xff]); // last_stable_offset 255
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 4]); // log_start_offset 4
        b.push(0); // aborted_transactions: null
        b.extend_from_slice(&[0, 0, 0, 2]); // preferred_read_replica 2
        let n = records.len() as u32 + 1; // compact length, < 2^14 here
        b.extend_from_slice(&[(n as u8) | 0x80, (n >> 7) as u8]);
        b.extend_from_slice(records);
        b.extend_from_slice(&[1, 1, 9, 0, 0, 0, 5, 0, 0, 0, 6, 0]); // tags: CurrentLeader{5, 6}
        b.push(0); // topic tags
        b.push(0); // response tags
        b
    }

    #[test]
    fn v13_flexible_response_records_point_into_the_frame() {
        let records: Vec<u8> = (0..200u8).collect();
        let body = v13_body(&records);
        let resp = decode_response::<FetchRequest>(&body, 13).unwrap();
        assert_eq!(resp.session_id, 9);
        let t = &resp.responses[0];
        assert_eq!((t.topic.as_str(), t.topic_id), ("", id(0x5a)));
        let p = &t.partitions[0];
        assert_eq!(
            (
                p.partition_index,
                p.high_watermark,
                p.last_stable_offset,
                p.log_start_offset,
                p.preferred_read_replica
            ),
            (1, 256, 255, 4, 2)
        );
        assert_eq!(p.aborted_transactions, None);
        assert_eq!(p.records.start, body.len() - 2 - 12 - records.len());
        assert_eq!(p.records.len, 200);
        assert_eq!(&body[p.records.start..][..p.records.len], &records[..]);
    }

    #[test]
    fn v16_response_skips_node_endpoints() {
        let records = [1u8, 2, 3];
        let mut body = v13_body(&records);
        body.pop();
        // NodeEndpoints (tag 0): [{node 5, "h", 9092, rack null}]
        let endpoints = [2, 0, 0, 0, 5, 2, b'h', 0, 0, 0x23, 0x84, 0, 0];
        body.extend_from_slice(&[1, 0, endpoints.len() as u8]);
        body.extend_from_slice(&endpoints);
        let resp = decode_response::<FetchRequest>(&body, 16).unwrap();
        let p = &resp.responses[0].partitions[0];
        assert_eq!(&body[p.records.start..][..p.records.len], &records);
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in [4, 7, 11, 12, 13, 18] {
            let frame = encode_response::<FetchRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<FetchRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<FetchRequest>(&frame[4..cut]).is_err());
            }
        }
        let body = v13_body(&[7; 200]);
        for cut in 0..body.len() {
            assert!(decode_response::<FetchRequest>(&body[..cut], 13).is_err());
        }
    }

    #[test]
    fn a_topic_count_of_2_pow_31_minus_1_fails_at_the_count() {
        // v7: throttle, error, session, then responses count i32::MAX and nothing else.
        let mut body = vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        body.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = decode_response::<FetchRequest>(&body, 7).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v12: the same as a compact count (2^31, varint), with some bytes after it.
        let mut body = vec![0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        body.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08]);
        body.extend_from_slice(&[0; 64]);
        let e = decode_response::<FetchRequest>(&body, 12).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
    }

    #[test]
    fn impossible_nested_counts_and_lengths_are_errors() {
        // Partitions count i32::MAX inside a v4 topic.
        let mut body = v4_body(b"xyz");
        body[15..19].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = decode_response::<FetchRequest>(&body, 4).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // Aborted transactions count i32::MAX.
        let mut body = v4_body(b"xyz");
        body[41..45].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        assert!(decode_response::<FetchRequest>(&body, 4).is_err());
        // A record set longer than the frame.
        let mut body = v4_body(b"xyz");
        let at = body.len() - 7;
        body[at..at + 4].copy_from_slice(&[0, 0, 0, 4]);
        let e = decode_response::<FetchRequest>(&body, 4).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(4));
        // A negative record set length other than null.
        body[at..at + 4].copy_from_slice(&[0xff, 0xff, 0xff, 0xfe]);
        assert!(decode_response::<FetchRequest>(&body, 4).is_err());
        // A null where the responses array is required.
        let body = [0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        assert!(decode_response::<FetchRequest>(&body, 4).is_err());
    }
}
