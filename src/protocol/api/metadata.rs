//! Metadata (key 3): the brokers of the cluster, and the leader, epoch and replicas of each
//! partition of the topics asked for.
//!
//! We speak v1..=13 (flexible from v9). From v1 a null topic list asks for every topic and an
//! empty one for none. Request topics carry an id from v10, but brokers honour ids (and a
//! null name) only from v12: at v10 and v11 send names and leave the id zero. v13 adds a
//! top-level error code (`REBOOTSTRAP_REQUIRED`, KIP-1102) after the topics.
//!
//! Layouts follow `MetadataRequest.json` / `MetadataResponse.json`; v0 (empty list = all
//! topics) is not spoken.

use super::Api;
use crate::protocol::message::Uuid;
use crate::protocol::wire_struct;

/// The value of the `*_authorized_operations` fields when they were not requested.
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

wire_struct! {
    /// Metadata request.
    pub struct MetadataRequest {
        /// The topics to describe; `None` asks for every topic, `Some(vec![])` for none.
        topics: Option<Vec<MetadataRequestTopic>>, since 0, default Some(Vec::new());
        /// Whether the broker may auto-create requested topics (if it is configured to).
        allow_auto_topic_creation: bool, since 4, default true;
        include_cluster_authorized_operations: bool, since 8, until 10;
        include_topic_authorized_operations: bool, since 8;
    }

    /// One topic asked for, by name or (v12+) by id.
    pub struct MetadataRequestTopic {
        topic_id: Uuid, since 10;
        /// Must be `Some` below v10 (a null is only legal from v10, and honoured from v12).
        name: Option<String>, since 0;
    }

    /// Metadata response.
    pub struct MetadataResponse {
        throttle_time_ms: i32, since 3;
        brokers: Vec<MetadataResponseBroker>, since 0;
        cluster_id: Option<String>, since 2;
        controller_id: i32, since 1, default -1;
        topics: Vec<MetadataResponseTopic>, since 0;
        cluster_authorized_operations: i32, since 8, until 10, default AUTHORIZED_OPERATIONS_OMITTED;
        /// Top-level error (v13+), e.g. `REBOOTSTRAP_REQUIRED`.
        error_code: i16, since 13;
    }

    /// One broker of the cluster.
    pub struct MetadataResponseBroker {
        node_id: i32, since 0;
        host: String, since 0;
        port: i32, since 0;
        rack: Option<String>, since 1;
    }

    /// One topic. `name` is null (v12+) only for an unknown topic asked for by id.
    pub struct MetadataResponseTopic {
        error_code: i16, since 0;
        name: Option<String>, since 0;
        topic_id: Uuid, since 10;
        is_internal: bool, since 1;
        partitions: Vec<MetadataResponsePartition>, since 0;
        topic_authorized_operations: i32, since 8, default AUTHORIZED_OPERATIONS_OMITTED;
    }

    /// One partition of a topic.
    pub struct MetadataResponsePartition {
        error_code: i16, since 0;
        partition_index: i32, since 0;
        leader_id: i32, since 0;
        leader_epoch: i32, since 7, default -1;
        replica_nodes: Vec<i32>, since 0;
        isr_nodes: Vec<i32>, since 0;
        offline_replicas: Vec<i32>, since 5;
    }
}

impl Api for MetadataRequest {
    const KEY: i16 = 3;
    const NAME: &'static str = "Metadata";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 13;
    const FLEXIBLE_FROM: i16 = 9;
    type Response = MetadataResponse;
    fn throttle_time_ms(resp: &MetadataResponse) -> i32 {
        resp.throttle_time_ms
    }
}

/// The first version whose brokers look topics up by id (and accept a null name).
pub const TOPIC_ID_LOOKUP_VERSION: i16 = 12;

impl MetadataRequest {
    /// Asks for every topic in the cluster.
    pub fn all_topics() -> Self {
        MetadataRequest {
            topics: None,
            ..Default::default()
        }
    }

    /// Asks for the named topics (an empty list asks for brokers only).
    pub fn for_topics<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let topics = names
            .into_iter()
            .map(|n| MetadataRequestTopic {
                topic_id: Uuid::ZERO,
                name: Some(n.into()),
            })
            .collect();
        MetadataRequest {
            topics: Some(topics),
            ..Default::default()
        }
    }

    /// Asks for topics by id, with null names. Only for v12+ ([`TOPIC_ID_LOOKUP_VERSION`]).
    pub fn for_topic_ids<I: IntoIterator<Item = Uuid>>(ids: I) -> Self {
        let topics = ids
            .into_iter()
            .map(|id| MetadataRequestTopic {
                topic_id: id,
                name: None,
            })
            .collect();
        MetadataRequest {
            topics: Some(topics),
            ..Default::default()
        }
    }
}

impl MetadataResponse {
    /// The broker with id `node_id`, if listed.
    pub fn broker(&self, node_id: i32) -> Option<&MetadataResponseBroker> {
        self.brokers.iter().find(|b| b.node_id == node_id)
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
        MetadataRequest::MIN_VERSION..=MetadataRequest::MAX_VERSION
    }

    fn id(b: u8) -> Uuid {
        Uuid([b; 16])
    }

    /// A request with every field set away from its default, as far as `v` can carry it.
    fn request(v: i16) -> MetadataRequest {
        let mut topics = vec![MetadataRequestTopic {
            topic_id: id(1),
            name: Some("orders".into()),
        }];
        if v >= TOPIC_ID_LOOKUP_VERSION {
            topics.push(MetadataRequestTopic {
                topic_id: id(2),
                name: None,
            });
        }
        MetadataRequest {
            topics: Some(topics),
            allow_auto_topic_creation: false,
            include_cluster_authorized_operations: true,
            include_topic_authorized_operations: true,
        }
    }

    /// What the broker decodes from `request(v)` sent at `v`: fields `v` lacks are defaults.
    fn request_seen_at(v: i16) -> MetadataRequest {
        let mut r = request(v);
        if v < 10 {
            for t in r.topics.iter_mut().flatten() {
                t.topic_id = Uuid::ZERO;
            }
        }
        if v < 4 {
            r.allow_auto_topic_creation = true;
        }
        if !(8..=10).contains(&v) {
            r.include_cluster_authorized_operations = false;
        }
        if v < 8 {
            r.include_topic_authorized_operations = false;
        }
        r
    }

    fn partition(index: i32) -> MetadataResponsePartition {
        MetadataResponsePartition {
            error_code: 9,
            partition_index: index,
            leader_id: 2,
            leader_epoch: 11,
            replica_nodes: vec![2, 1, 3],
            isr_nodes: vec![2, 1],
            offline_replicas: vec![3],
        }
    }

    fn response(v: i16) -> MetadataResponse {
        let mut topics = vec![MetadataResponseTopic {
            error_code: 0,
            name: Some("orders".into()),
            topic_id: id(1),
            is_internal: true,
            partitions: vec![partition(0), partition(1)],
            topic_authorized_operations: 0x0ff8,
        }];
        if v >= 12 {
            topics.push(MetadataResponseTopic {
                error_code: 100,
                name: None,
                topic_id: id(2),
                is_internal: false,
                partitions: vec![],
                topic_authorized_operations: 0,
            });
        }
        MetadataResponse {
            throttle_time_ms: 17,
            brokers: vec![
                MetadataResponseBroker {
                    node_id: 1,
                    host: "kafka-1".into(),
                    port: 9092,
                    rack: Some("rack-a".into()),
                },
                MetadataResponseBroker {
                    node_id: 2,
                    host: "kafka-2".into(),
                    port: 9093,
                    rack: None,
                },
            ],
            cluster_id: Some("cluster-x".into()),
            controller_id: 2,
            topics,
            cluster_authorized_operations: 0x0f00,
            error_code: 129,
        }
    }

    fn response_seen_at(v: i16) -> MetadataResponse {
        let mut r = response(v);
        if v < 3 {
            r.throttle_time_ms = 0;
        }
        if v < 2 {
            r.cluster_id = None;
        }
        if !(8..=10).contains(&v) {
            r.cluster_authorized_operations = AUTHORIZED_OPERATIONS_OMITTED;
        }
        if v < 13 {
            r.error_code = 0;
        }
        for t in &mut r.topics {
            if v < 10 {
                t.topic_id = Uuid::ZERO;
            }
            if v < 8 {
                t.topic_authorized_operations = AUTHORIZED_OPERATIONS_OMITTED;
            }
            for p in &mut t.partitions {
                if v < 7 {
                    p.leader_epoch = -1;
                }
                if v < 5 {
                    p.offline_replicas.clear();
                }
            }
        }
        r
    }

    #[test]
    fn claims_v1_to_v13_flexible_from_v9() {
        assert_eq!(
            (
                MetadataRequest::KEY,
                MetadataRequest::MIN_VERSION,
                MetadataRequest::MAX_VERSION,
                MetadataRequest::FLEXIBLE_FROM
            ),
            (3, 1, 13, 9)
        );
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(v), v, 5, "me");
            let (ver, corr, back) = decode_request::<MetadataRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 5));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<MetadataRequest>(&response(v), v, 5);
            let back = decode_response::<MetadataRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn null_topics_means_all_and_empty_means_none_in_every_version() {
        for v in versions() {
            for req in [
                MetadataRequest::all_topics(),
                MetadataRequest::for_topics([""; 0]),
            ] {
                let frame = encode_request(&req, v, 1, "c");
                let (_, _, back) = decode_request::<MetadataRequest>(&frame[4..]).unwrap();
                assert_eq!(back.topics, req.topics, "v{v}");
            }
        }
    }

    #[test]
    fn v1_request_matches_the_schema_byte_for_byte() {
        let frame = encode_request(&MetadataRequest::for_topics(["ab"]), 1, 7, "c");
        let mut want = vec![0, 0, 0, 19];
        want.extend_from_slice(&[0, 3, 0, 1, 0, 0, 0, 7, 0, 1, b'c']); // header v1
        want.extend_from_slice(&[0, 0, 0, 1, 0, 2, b'a', b'b']); // topics: [name]
        assert_eq!(frame, want);
        // All topics: a null array.
        let frame = encode_request(&MetadataRequest::all_topics(), 1, 7, "c");
        assert_eq!(&frame[15..], &[0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn v12_request_by_id_matches_the_schema_byte_for_byte() {
        let mut req = MetadataRequest::for_topic_ids([id(0xab)]);
        req.allow_auto_topic_creation = false;
        req.include_topic_authorized_operations = true;
        let frame = encode_request(&req, 12, 7, "c");
        let mut want = vec![0, 3, 0, 12, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.push(2); // compact array of 1
        want.extend_from_slice(&[0xab; 16]); // topic_id
        want.push(0); // name: compact null
        want.push(0); // topic tagged fields
        want.push(0); // allow_auto_topic_creation
        want.push(1); // include_topic_authorized_operations (no cluster flag after v10)
        want.push(0); // tagged fields
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame.len() - 4, want.len());
    }

    /// A v13 response: compact encodings, a null rack, and the top-level error at the end.
    fn v13_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tagged fields
        b.extend_from_slice(&[0, 0, 0, 0]); // throttle_time_ms
        b.push(2); // brokers: 1
        b.extend_from_slice(&[0, 0, 0, 1, 2, b'h', 0, 0, 0x23, 0x84, 0, 0]); // 1, "h", 9092, rack null, tags
        b.extend_from_slice(&[2, b'c']); // cluster_id "c"
        b.extend_from_slice(&[0, 0, 0, 1]); // controller_id
        b.push(2); // topics: 1
        b.extend_from_slice(&[0, 0, 2, b't']); // error_code, name "t"
        b.extend_from_slice(&[7; 16]); // topic_id
        b.push(1); // is_internal
        b.push(2); // partitions: 1
        b.extend_from_slice(&[0, 0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 5]); // error, index 4, leader 1, epoch 5
        b.extend_from_slice(&[2, 0, 0, 0, 1]); // replica_nodes [1]
        b.extend_from_slice(&[2, 0, 0, 0, 1]); // isr_nodes [1]
        b.push(1); // offline_replicas []
        b.push(0); // partition tags
        b.extend_from_slice(&[0x80, 0, 0, 0]); // topic_authorized_operations
        b.push(0); // topic tags
        b.extend_from_slice(&[0, 129]); // error_code REBOOTSTRAP_REQUIRED (no cluster ops after v10)
        b.push(0); // tags
        b
    }

    #[test]
    fn v13_response_is_decoded_as_the_schema_lays_it_out() {
        let resp = decode_response::<MetadataRequest>(&v13_body(), 13).unwrap();
        assert_eq!(
            resp,
            MetadataResponse {
                throttle_time_ms: 0,
                brokers: vec![MetadataResponseBroker {
                    node_id: 1,
                    host: "h".into(),
                    port: 9092,
                    rack: None,
                }],
                cluster_id: Some("c".into()),
                controller_id: 1,
                topics: vec![MetadataResponseTopic {
                    error_code: 0,
                    name: Some("t".into()),
                    topic_id: id(7),
                    is_internal: true,
                    partitions: vec![MetadataResponsePartition {
                        error_code: 0,
                        partition_index: 4,
                        leader_id: 1,
                        leader_epoch: 5,
                        replica_nodes: vec![1],
                        isr_nodes: vec![1],
                        offline_replicas: vec![],
                    }],
                    topic_authorized_operations: AUTHORIZED_OPERATIONS_OMITTED,
                }],
                cluster_authorized_operations: AUTHORIZED_OPERATIONS_OMITTED,
                error_code: 129,
            }
        );
        assert_eq!(resp.broker(1).map(|b| b.port), Some(9092));
        assert!(resp.broker(2).is_none());
        // The same bytes without the trailing error code and tags are a v12 body.
        let body = v13_body();
        let v12 = [&body[..body.len() - 3], &[0u8][..]].concat();
        assert_eq!(
            decode_response::<MetadataRequest>(&v12, 12)
                .unwrap()
                .error_code,
            0
        );
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in [1, 8, 9, 13] {
            let frame = encode_response::<MetadataRequest>(&response(v), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<MetadataRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(v), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<MetadataRequest>(&frame[4..cut]).is_err());
            }
        }
    }

    #[test]
    fn impossible_counts_are_rejected_before_allocating() {
        // v1: brokers count i32::MAX with nothing behind it.
        let body = [0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff];
        let e = decode_response::<MetadataRequest>(&body, 1).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v13: replica_nodes claims 2^31 - 1 entries (compact count 2^31).
        let mut body = v13_body();
        let at = body.len() - 20; // replica_nodes count
        assert_eq!(body[at], 2);
        body.splice(at..at + 1, [0x80, 0x80, 0x80, 0x80, 0x08]);
        let e = decode_response::<MetadataRequest>(&body, 13).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A negative count other than null.
        let body = [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe];
        assert!(decode_response::<MetadataRequest>(&body, 1).is_err());
        // A null where the brokers array is required.
        let body = [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
        assert!(decode_response::<MetadataRequest>(&body, 1).is_err());
    }
}
