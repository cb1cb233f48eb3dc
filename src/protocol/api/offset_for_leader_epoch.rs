//! OffsetForLeaderEpoch (key 23): where a leader epoch ended in a partition's log, as its
//! leader sees it now. A consumer asks for the epoch of the last record it read (KIP-320):
//! an end offset below its position means the log was truncated under it.
//!
//! We speak v3..=4 (flexible from v4). v3 is the first with `ReplicaId`, which a consumer
//! sets to -1 so the answer is bounded by the high watermark (v2 reads as a "debug" replica
//! that may see past it); Kafka 4.0 removed v0 and v1. A broker with no v3 gets no
//! validation, as in the Java client.

use super::Api;
use crate::protocol::wire_struct;

/// `replica_id` of a consumer.
pub const CONSUMER_REPLICA_ID: i32 = -1;

wire_struct! {
    /// OffsetForLeaderEpoch request.
    pub struct OffsetForLeaderEpochRequest {
        /// [`CONSUMER_REPLICA_ID`] for a consumer.
        replica_id: i32, since 3, default -2;
        topics: Vec<OffsetForLeaderTopic>, since 0;
    }

    /// The partitions asked for in one topic.
    pub struct OffsetForLeaderTopic {
        topic: String, since 0;
        partitions: Vec<OffsetForLeaderPartition>, since 0;
    }

    /// One partition asked for.
    pub struct OffsetForLeaderPartition {
        partition: i32, since 0;
        /// The leader epoch the metadata names: the broker refuses an older one
        /// (FENCED_LEADER_EPOCH) or a newer one (UNKNOWN_LEADER_EPOCH).
        current_leader_epoch: i32, since 2, default -1;
        /// The epoch whose end offset is wanted: that of the last record read.
        leader_epoch: i32, since 0;
    }

    /// OffsetForLeaderEpoch response.
    pub struct OffsetForLeaderEpochResponse {
        throttle_time_ms: i32, since 2;
        topics: Vec<OffsetForLeaderTopicResult>, since 0;
    }

    /// The answers for one topic.
    pub struct OffsetForLeaderTopicResult {
        topic: String, since 0;
        partitions: Vec<EpochEndOffset>, since 0;
    }

    /// The answer for one partition: the largest epoch at most the one asked for, and the
    /// offset where it ended (the log end for the current epoch); -1 for both when the
    /// leader knows no such epoch.
    pub struct EpochEndOffset {
        error_code: i16, since 0;
        partition: i32, since 0;
        leader_epoch: i32, since 1, default -1;
        end_offset: i64, since 0, default -1;
    }
}

impl Api for OffsetForLeaderEpochRequest {
    const KEY: i16 = 23;
    const NAME: &'static str = "OffsetForLeaderEpoch";
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 4;
    const FLEXIBLE_FROM: i16 = 4;
    type Response = OffsetForLeaderEpochResponse;
    fn throttle_time_ms(resp: &OffsetForLeaderEpochResponse) -> i32 {
        resp.throttle_time_ms
    }
}

impl OffsetForLeaderEpochRequest {
    /// A consumer's request (replica id -1) with no topics yet.
    pub fn for_consumer() -> Self {
        OffsetForLeaderEpochRequest {
            replica_id: CONSUMER_REPLICA_ID,
            topics: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::{
        decode_request, decode_response, encode_request, encode_response,
    };

    fn request() -> OffsetForLeaderEpochRequest {
        OffsetForLeaderEpochRequest {
            replica_id: CONSUMER_REPLICA_ID,
            topics: vec![OffsetForLeaderTopic {
                topic: "orders".into(),
                partitions: vec![
                    OffsetForLeaderPartition {
                        partition: 0,
                        current_leader_epoch: 7,
                        leader_epoch: 5,
                    },
                    OffsetForLeaderPartition {
                        partition: 4,
                        current_leader_epoch: 2,
                        leader_epoch: 2,
                    },
                ],
            }],
        }
    }

    fn response() -> OffsetForLeaderEpochResponse {
        OffsetForLeaderEpochResponse {
            throttle_time_ms: 12,
            topics: vec![OffsetForLeaderTopicResult {
                topic: "orders".into(),
                partitions: vec![
                    EpochEndOffset {
                        error_code: 0,
                        partition: 0,
                        leader_epoch: 5,
                        end_offset: 1_000,
                    },
                    EpochEndOffset {
                        error_code: 74,
                        partition: 4,
                        leader_epoch: -1,
                        end_offset: -1,
                    },
                ],
            }],
        }
    }

    #[test]
    fn claims_v3_to_v4_flexible_from_v4() {
        assert_eq!(
            (
                OffsetForLeaderEpochRequest::KEY,
                OffsetForLeaderEpochRequest::MIN_VERSION,
                OffsetForLeaderEpochRequest::MAX_VERSION,
                OffsetForLeaderEpochRequest::FLEXIBLE_FROM
            ),
            (23, 3, 4, 4)
        );
        assert_eq!(OffsetForLeaderEpochRequest::for_consumer().replica_id, -1);
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in 3..=4 {
            let frame = encode_request(&request(), v, 9, "me");
            let (ver, corr, back) =
                decode_request::<OffsetForLeaderEpochRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 9));
            assert_eq!(back, request(), "request v{v}");

            let frame = encode_response::<OffsetForLeaderEpochRequest>(&response(), v, 9);
            let back = decode_response::<OffsetForLeaderEpochRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response(), "response v{v}");
        }
    }

    #[test]
    fn v3_request_matches_the_schema_byte_for_byte() {
        let mut req = OffsetForLeaderEpochRequest::for_consumer();
        req.topics = vec![OffsetForLeaderTopic {
            topic: "t".into(),
            partitions: vec![OffsetForLeaderPartition {
                partition: 2,
                current_leader_epoch: 9,
                leader_epoch: 8,
            }],
        }];
        let frame = encode_request(&req, 3, 7, "c");
        let mut want = vec![0, 23, 0, 3, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // replica_id -1
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics: 1, "t"
        want.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]); // partitions: 1, partition 2
        want.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 8]); // current epoch 9, epoch 8
        assert_eq!(&frame[4..], &want[..]);
    }

    #[test]
    fn v4_response_reads_compact_fields_and_tags() {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 0]); // throttle_time_ms
        b.push(2); // topics: 1
        b.extend_from_slice(&[2, b't']); // "t"
        b.push(2); // partitions: 1
        b.extend_from_slice(&[0, 0, 0, 0, 0, 1]); // error 0, partition 1
        b.extend_from_slice(&[0, 0, 0, 6]); // leader epoch 6
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 40]); // end offset 40
        b.extend_from_slice(&[0, 0, 0]); // partition, topic, response tags
        let r = decode_response::<OffsetForLeaderEpochRequest>(&b, 4).unwrap();
        let p = &r.topics[0].partitions[0];
        assert_eq!((p.partition, p.leader_epoch, p.end_offset), (1, 6, 40));
    }
}
