//! OffsetFetch (key 9): a group's committed offsets, read from its coordinator.
//!
//! We speak v1..=9 (flexible from v6). v0 (offsets kept in ZooKeeper) is not spoken. From
//! v2 a null topic list asks for every partition the group has committed (v1 needs a
//! list), and the response carries a top-level error code; v3 adds the throttle time, v5
//! the committed leader epoch, v7 `require_stable` (the broker then answers
//! `UNSTABLE_OFFSET_COMMIT` for a partition with a pending transactional commit instead of
//! an offset that may still change). v8 (KIP-709) batches groups: the request and the
//! response move everything into `groups`. v9 is the first version usable with the KIP-848
//! consumer group protocol: each group carries the asking member's `member_id` and
//! `member_epoch` (null and -1 from outside the group, or with the classic protocol). v10
//! names topics by id instead of by name and is not spoken.
//!
//! We always ask for one group ([`OffsetFetchRequest::for_group`]) and read its answer the
//! same way whatever the version ([`OffsetFetchResponse::group`]).
//!
//! Layouts follow `OffsetFetchRequest.json` / `OffsetFetchResponse.json`; neither declares
//! tagged fields. The schemas declare the topics (and partitions) of v0-7 and those inside
//! a v8+ group as separate structures (`OffsetFetchRequestTopic` / `...Topics`,
//! `OffsetFetchResponseTopic` / `...Topics`, `OffsetFetchResponsePartition` /
//! `...Partitions`) with the same fields; each pair is declared once here, under the first
//! name. (The leader epoch, v5-7 in the first and v8+ in the second, is `since 5` in the
//! shared declaration, which is the same on the wire.)

use super::Api;
use crate::protocol::wire::DecodeError;
use crate::protocol::wire_struct;

/// The first version that batches groups (`groups` in request and response; KIP-709).
pub const BATCHED_VERSION: i16 = 8;

/// `committed_offset` of a partition the group has no offset for.
pub const NO_OFFSET: i64 = -1;

wire_struct! {
    /// OffsetFetch request.
    pub struct OffsetFetchRequest {
        /// The group asked about (v1-7).
        group_id: String, since 0, until 7;
        /// The partitions asked for (v1-7); `None` (v2+ only) asks for all.
        topics: Option<Vec<OffsetFetchRequestTopic>>, since 0, until 7, default Some(Vec::new());
        /// The groups asked about (v8+).
        groups: Vec<OffsetFetchRequestGroup>, since 8;
        /// Whether the broker must answer `UNSTABLE_OFFSET_COMMIT` rather than an offset with
        /// a pending transactional commit (v7+).
        require_stable: bool, since 7;
    }

    /// The partitions asked for in one topic (the schema's `OffsetFetchRequestTopic` for
    /// v0-7 and `OffsetFetchRequestTopics` inside a v8+ group).
    pub struct OffsetFetchRequestTopic {
        name: String, since 0;
        partition_indexes: Vec<i32>, since 0;
    }

    /// One group asked about (v8+).
    pub struct OffsetFetchRequestGroup {
        group_id: String, since 8;
        /// The asking member's id with the KIP-848 protocol, else null (v9+).
        member_id: Option<String>, since 9;
        /// The asking member's epoch with the KIP-848 protocol, else -1 (v9+).
        member_epoch: i32, since 9, default -1;
        /// The partitions asked for; `None` asks for all.
        topics: Option<Vec<OffsetFetchRequestTopic>>, since 8, default Some(Vec::new());
    }

    /// OffsetFetch response.
    pub struct OffsetFetchResponse {
        throttle_time_ms: i32, since 3;
        /// The answers for the one group asked about (v1-7).
        topics: Vec<OffsetFetchResponseTopic>, since 0, until 7;
        /// The group-level error (v2-7).
        error_code: i16, since 2, until 7;
        /// One answer per group asked about (v8+).
        groups: Vec<OffsetFetchResponseGroup>, since 8;
    }

    /// The answers for one topic (the schema's `OffsetFetchResponseTopic` for v0-7 and
    /// `OffsetFetchResponseTopics` inside a v8+ group).
    pub struct OffsetFetchResponseTopic {
        name: String, since 0;
        partitions: Vec<OffsetFetchResponsePartition>, since 0;
    }

    /// The answer for one partition (the schema's `OffsetFetchResponsePartition` for v0-7
    /// and `OffsetFetchResponsePartitions` inside a v8+ group).
    pub struct OffsetFetchResponsePartition {
        partition_index: i32, since 0;
        /// [`NO_OFFSET`] when the group has committed none.
        committed_offset: i64, since 0;
        committed_leader_epoch: i32, since 5, default -1;
        metadata: Option<String>, since 0;
        error_code: i16, since 0;
    }

    /// The answer for one group (v8+).
    pub struct OffsetFetchResponseGroup {
        group_id: String, since 8;
        topics: Vec<OffsetFetchResponseTopic>, since 8;
        error_code: i16, since 8;
    }
}

impl Api for OffsetFetchRequest {
    const KEY: i16 = 9;
    const NAME: &'static str = "OffsetFetch";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 9;
    const FLEXIBLE_FROM: i16 = 6;
    type Response = OffsetFetchResponse;
    fn throttle_time_ms(resp: &OffsetFetchResponse) -> i32 {
        resp.throttle_time_ms
    }
}

/// One partition's committed offset, as read by [`OffsetFetchResponse::group`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedOffset<'a> {
    /// The topic name.
    pub topic: &'a str,
    /// The partition index.
    pub partition: i32,
    /// The committed offset, or [`NO_OFFSET`].
    pub offset: i64,
    /// The committed leader epoch, -1 if unknown (always before v5).
    pub leader_epoch: i32,
    /// The metadata committed with the offset.
    pub metadata: Option<&'a str>,
    /// The partition-level error code.
    pub error_code: i16,
}

impl OffsetFetchRequest {
    /// Asks for the committed offsets of `group_id` in the given partitions of each topic,
    /// filling the fields version `v` carries: `group_id` and `topics` up to v7, one entry
    /// of `groups` from v8. Set `require_stable` (v7+) and, for a KIP-848 member,
    /// `groups[0].member_id` / `member_epoch` (v9+) on the result.
    pub fn for_group<I, S, P>(group_id: &str, topics: I, v: i16) -> Self
    where
        I: IntoIterator<Item = (S, P)>,
        S: Into<String>,
        P: IntoIterator<Item = i32>,
    {
        let topics: Vec<OffsetFetchRequestTopic> = topics
            .into_iter()
            .map(|(name, partitions)| OffsetFetchRequestTopic {
                name: name.into(),
                partition_indexes: partitions.into_iter().collect(),
            })
            .collect();
        if v >= BATCHED_VERSION {
            OffsetFetchRequest {
                groups: vec![OffsetFetchRequestGroup {
                    group_id: group_id.to_owned(),
                    topics: Some(topics),
                    ..Default::default()
                }],
                ..Default::default()
            }
        } else {
            OffsetFetchRequest {
                group_id: group_id.to_owned(),
                topics: Some(topics),
                ..Default::default()
            }
        }
    }
}

impl OffsetFetchResponse {
    /// The answer for `group_id` in a response decoded at version `v`: the group-level error
    /// code and every partition's committed offset, in response order. Up to v7 these are
    /// the top-level fields (which answer the one group asked about; before v2 there is no
    /// group-level error, the broker reports it on every partition); from v8 they are the
    /// entry for `group_id` in `groups`, and a response without one is an error.
    pub fn group(
        &self,
        group_id: &str,
        v: i16,
    ) -> Result<(i16, Vec<FetchedOffset<'_>>), DecodeError> {
        let (error_code, topics) = if v < BATCHED_VERSION {
            (self.error_code, &self.topics)
        } else {
            let g = self
                .groups
                .iter()
                .find(|g| g.group_id == group_id)
                .ok_or_else(|| {
                    DecodeError::invalid(
                        "OffsetFetch response has no entry for the group asked for",
                    )
                    .context("OffsetFetchResponse.groups")
                })?;
            (g.error_code, &g.topics)
        };
        let offsets = topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| FetchedOffset {
                    topic: &t.name,
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.metadata.as_deref(),
                    error_code: p.error_code,
                })
            })
            .collect();
        Ok((error_code, offsets))
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
        OffsetFetchRequest::MIN_VERSION..=OffsetFetchRequest::MAX_VERSION
    }

    fn topic(name: &str, partitions: &[i32]) -> OffsetFetchRequestTopic {
        OffsetFetchRequestTopic {
            name: name.into(),
            partition_indexes: partitions.to_vec(),
        }
    }

    /// A request with every field set away from its default.
    fn request() -> OffsetFetchRequest {
        OffsetFetchRequest {
            group_id: "orders-app".into(),
            topics: Some(vec![topic("orders", &[0, 1, 2]), topic("audit", &[])]),
            groups: vec![
                OffsetFetchRequestGroup {
                    group_id: "orders-app".into(),
                    member_id: Some("m-1".into()),
                    member_epoch: 12,
                    topics: Some(vec![topic("orders", &[0, 1, 2])]),
                },
                OffsetFetchRequestGroup {
                    group_id: "billing".into(),
                    member_id: None,
                    member_epoch: 3,
                    topics: None,
                },
            ],
            require_stable: true,
        }
    }

    /// What the broker decodes from `request()` sent at `v`.
    fn request_seen_at(v: i16) -> OffsetFetchRequest {
        let mut r = request();
        if v >= 8 {
            r.group_id.clear();
            r.topics = Some(Vec::new());
        } else {
            r.groups.clear();
        }
        if v < 7 {
            r.require_stable = false;
        }
        for g in &mut r.groups {
            if v < 9 {
                g.member_id = None;
                g.member_epoch = -1;
            }
        }
        r
    }

    fn partition(index: i32, epoch: i32) -> OffsetFetchResponsePartition {
        OffsetFetchResponsePartition {
            partition_index: index,
            committed_offset: 1_000 + index as i64,
            committed_leader_epoch: epoch,
            metadata: (index % 2 == 0).then(|| format!("meta-{index}")),
            error_code: if index == 2 { 88 } else { 0 },
        }
    }

    fn response() -> OffsetFetchResponse {
        OffsetFetchResponse {
            throttle_time_ms: 8,
            topics: vec![
                OffsetFetchResponseTopic {
                    name: "orders".into(),
                    partitions: vec![partition(0, 5), partition(1, 5), partition(2, 6)],
                },
                OffsetFetchResponseTopic {
                    name: "audit".into(),
                    partitions: vec![],
                },
            ],
            error_code: 14,
            groups: vec![
                OffsetFetchResponseGroup {
                    group_id: "orders-app".into(),
                    topics: vec![OffsetFetchResponseTopic {
                        name: "orders".into(),
                        partitions: vec![partition(0, 5), partition(2, 6)],
                    }],
                    error_code: 0,
                },
                OffsetFetchResponseGroup {
                    group_id: "billing".into(),
                    topics: vec![],
                    error_code: 69,
                },
            ],
        }
    }

    fn response_seen_at(v: i16) -> OffsetFetchResponse {
        let mut r = response();
        if v < 3 {
            r.throttle_time_ms = 0;
        }
        if !(2..=7).contains(&v) {
            r.error_code = 0;
        }
        if v >= 8 {
            r.topics.clear();
        } else {
            r.groups.clear();
        }
        for p in r.topics.iter_mut().flat_map(|t| &mut t.partitions) {
            if v < 5 {
                p.committed_leader_epoch = -1;
            }
        }
        r
    }

    #[test]
    fn claims_v1_to_v9_flexible_from_v6() {
        assert_eq!(
            (
                OffsetFetchRequest::KEY,
                OffsetFetchRequest::MIN_VERSION,
                OffsetFetchRequest::MAX_VERSION,
                OffsetFetchRequest::FLEXIBLE_FROM
            ),
            (9, 1, 9, 6)
        );
    }

    #[test]
    fn every_version_round_trips_what_it_carries() {
        for v in versions() {
            let frame = encode_request(&request(), v, 8, "me");
            let (ver, corr, back) = decode_request::<OffsetFetchRequest>(&frame[4..]).unwrap();
            assert_eq!((ver, corr), (v, 8));
            assert_eq!(back, request_seen_at(v), "request v{v}");

            let frame = encode_response::<OffsetFetchRequest>(&response(), v, 8);
            let back = decode_response::<OffsetFetchRequest>(&frame[4..], v).unwrap();
            assert_eq!(back, response_seen_at(v), "response v{v}");
        }
    }

    #[test]
    fn null_topics_ask_for_all_from_v2() {
        for v in 2..=OffsetFetchRequest::MAX_VERSION {
            let mut req = OffsetFetchRequest::for_group("g", [("t", [0])], v);
            if v >= 8 {
                req.groups[0].topics = None;
            } else {
                req.topics = None;
            }
            let frame = encode_request(&req, v, 1, "c");
            let (_, _, back) = decode_request::<OffsetFetchRequest>(&frame[4..]).unwrap();
            assert_eq!(back, req, "v{v}");
        }
    }

    #[test]
    fn v1_request_matches_the_schema_byte_for_byte() {
        let req = OffsetFetchRequest::for_group("g", [("t", [2, 3])], 1);
        let frame = encode_request(&req, 1, 7, "c");
        let mut want = vec![0, 9, 0, 1, 0, 0, 0, 7, 0, 1, b'c']; // header v1
        want.extend_from_slice(&[0, 1, b'g']); // group_id
        want.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics: 1, "t"
        want.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3]); // partition_indexes [2, 3]
        assert_eq!(&frame[4..], &want[..]);
        assert_eq!(frame[..4], (want.len() as i32).to_be_bytes());
        // v2: all topics is a null array.
        let mut req = OffsetFetchRequest::for_group("g", [("t", [0]); 0], 2);
        req.topics = None;
        let frame = encode_request(&req, 2, 7, "c");
        assert_eq!(&frame[4 + 11 + 3..], &[0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn flexible_requests_match_the_schema_byte_for_byte() {
        // v7: compact strings and arrays, tags after each topic, require_stable last.
        let mut req = OffsetFetchRequest::for_group("g", [("t", [2])], 7);
        req.require_stable = true;
        let frame = encode_request(&req, 7, 7, "c");
        let mut want = vec![0, 9, 0, 7, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.extend_from_slice(&[2, b'g']); // group_id
        want.extend_from_slice(&[2, 2, b't']); // topics: 1, "t"
        want.extend_from_slice(&[2, 0, 0, 0, 2]); // partition_indexes [2]
        want.push(0); // topic tags
        want.push(1); // require_stable
        want.push(0); // request tags
        assert_eq!(&frame[4..], &want[..]);

        // v9: one group with the member's id and epoch, then require_stable.
        let mut req = OffsetFetchRequest::for_group("g", [("t", [2])], 9);
        req.require_stable = true;
        req.groups[0].member_id = Some("m".into());
        req.groups[0].member_epoch = 5;
        let frame = encode_request(&req, 9, 7, "c");
        let mut want = vec![0, 9, 0, 9, 0, 0, 0, 7, 0, 1, b'c', 0]; // header v2
        want.push(2); // groups: 1
        want.extend_from_slice(&[2, b'g']); // group_id
        want.extend_from_slice(&[2, b'm']); // member_id
        want.extend_from_slice(&[0, 0, 0, 5]); // member_epoch
        want.extend_from_slice(&[2, 2, b't', 2, 0, 0, 0, 2, 0]); // topics: ["t", [2]], tags
        want.push(0); // group tags
        want.push(1); // require_stable
        want.push(0); // request tags
        assert_eq!(&frame[4..], &want[..]);

        // v8: no member fields; a null member id and all topics are compact nulls at v9.
        let frame = encode_request(
            &OffsetFetchRequest::for_group("g", [("t", [2])], 8),
            8,
            7,
            "c",
        );
        let mut want = vec![0, 9, 0, 8, 0, 0, 0, 7, 0, 1, b'c', 0];
        want.extend_from_slice(&[2, 2, b'g', 2, 2, b't', 2, 0, 0, 0, 2, 0, 0, 0, 0]);
        assert_eq!(&frame[4..], &want[..]);
        let mut req = OffsetFetchRequest::for_group("g", [("t", [0]); 0], 9);
        req.groups[0].topics = None;
        let frame = encode_request(&req, 9, 7, "c");
        let tail = [2, 2, b'g', 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert_eq!(&frame[4 + 12..], &tail);
    }

    /// A v7 response: one topic, one partition, a top-level error code.
    fn v7_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 0]); // throttle_time_ms
        b.push(2); // topics: 1
        b.extend_from_slice(&[2, b't']); // name "t"
        b.push(2); // partitions: 1
        b.extend_from_slice(&[0, 0, 0, 1]); // partition_index
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 0]); // committed_offset 256
        b.extend_from_slice(&[0, 0, 0, 4]); // committed_leader_epoch
        b.extend_from_slice(&[2, b'x']); // metadata "x"
        b.extend_from_slice(&[0, 88]); // error_code UNSTABLE_OFFSET_COMMIT
        b.extend_from_slice(&[0, 0]); // partition, topic tags
        b.extend_from_slice(&[0, 0]); // error_code
        b.push(0); // response tags
        b
    }

    /// A v8 response: one group with one partition that has no committed offset.
    fn v8_body() -> Vec<u8> {
        let mut b = vec![0, 0, 0, 3, 0]; // correlation id, header tags
        b.extend_from_slice(&[0, 0, 0, 0]); // throttle_time_ms
        b.push(2); // groups: 1
        b.extend_from_slice(&[2, b'g']); // group_id "g"
        b.push(2); // topics: 1
        b.extend_from_slice(&[2, b't']); // name "t"
        b.push(2); // partitions: 1
        b.extend_from_slice(&[0, 0, 0, 1]); // partition_index
        b.extend_from_slice(&[0xff; 8]); // committed_offset -1
        b.extend_from_slice(&[0xff; 4]); // committed_leader_epoch -1
        b.push(0); // metadata null
        b.extend_from_slice(&[0, 0]); // error_code
        b.extend_from_slice(&[0, 0]); // partition, topic tags
        b.extend_from_slice(&[0, 16]); // group error_code NOT_COORDINATOR
        b.push(0); // group tags
        b.push(0); // response tags
        b
    }

    #[test]
    fn v7_response_is_decoded_as_the_schema_lays_it_out() {
        let resp = decode_response::<OffsetFetchRequest>(&v7_body(), 7).unwrap();
        assert_eq!(
            resp,
            OffsetFetchResponse {
                throttle_time_ms: 0,
                topics: vec![OffsetFetchResponseTopic {
                    name: "t".into(),
                    partitions: vec![OffsetFetchResponsePartition {
                        partition_index: 1,
                        committed_offset: 256,
                        committed_leader_epoch: 4,
                        metadata: Some("x".into()),
                        error_code: 88,
                    }],
                }],
                error_code: 0,
                groups: vec![],
            }
        );
        assert_eq!(
            resp.group("g", 7).unwrap(),
            (
                0,
                vec![FetchedOffset {
                    topic: "t",
                    partition: 1,
                    offset: 256,
                    leader_epoch: 4,
                    metadata: Some("x"),
                    error_code: 88,
                }]
            )
        );
    }

    #[test]
    fn v8_and_v9_responses_are_decoded_as_the_schema_lays_them_out() {
        for v in [8, 9] {
            let resp = decode_response::<OffsetFetchRequest>(&v8_body(), v).unwrap();
            assert_eq!(
                resp,
                OffsetFetchResponse {
                    groups: vec![OffsetFetchResponseGroup {
                        group_id: "g".into(),
                        topics: vec![OffsetFetchResponseTopic {
                            name: "t".into(),
                            partitions: vec![OffsetFetchResponsePartition {
                                partition_index: 1,
                                committed_offset: NO_OFFSET,
                                committed_leader_epoch: -1,
                                metadata: None,
                                error_code: 0,
                            }],
                        }],
                        error_code: 16,
                    }],
                    ..Default::default()
                },
                "v{v}"
            );
            let (error, offsets) = resp.group("g", v).unwrap();
            assert_eq!(error, 16);
            assert_eq!((offsets[0].partition, offsets[0].offset), (1, NO_OFFSET));
            assert!(resp.group("h", v).is_err());
        }
    }

    #[test]
    fn v1_response_has_no_throttle_time_no_epoch_and_no_group_error() {
        let mut b = vec![0, 0, 0, 3]; // correlation id
        b.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']); // topics: 1, "t"
        b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]); // partitions: 1, index 0
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9]); // committed_offset 9
        b.extend_from_slice(&[0, 0]); // metadata ""
        b.extend_from_slice(&[0, 25]); // error_code UNKNOWN_MEMBER_ID
        let resp = decode_response::<OffsetFetchRequest>(&b, 1).unwrap();
        let (error, offsets) = resp.group("g", 1).unwrap();
        assert_eq!(error, 0);
        assert_eq!(
            offsets,
            vec![FetchedOffset {
                topic: "t",
                partition: 0,
                offset: 9,
                leader_epoch: -1,
                metadata: Some(""),
                error_code: 25,
            }]
        );
        assert_eq!(resp.throttle_time_ms, 0);
    }

    #[test]
    fn for_group_and_group_work_at_every_version() {
        for v in versions() {
            let req = OffsetFetchRequest::for_group("grp", [("a", vec![0, 1]), ("b", vec![3])], v);
            let frame = encode_request(&req, v, 1, "c");
            let (_, _, back) = decode_request::<OffsetFetchRequest>(&frame[4..]).unwrap();
            assert_eq!(back, req, "v{v}");
            let want_topics = Some(vec![topic("a", &[0, 1]), topic("b", &[3])]);
            if v >= 8 {
                assert_eq!(back.group_id, "", "v{v}");
                assert_eq!(back.groups.len(), 1, "v{v}");
                let g = &back.groups[0];
                assert_eq!((g.group_id.as_str(), &g.topics), ("grp", &want_topics));
                assert_eq!((g.member_id.as_deref(), g.member_epoch), (None, -1));
            } else {
                assert_eq!(
                    (back.group_id.as_str(), &back.topics),
                    ("grp", &want_topics)
                );
                assert!(back.groups.is_empty(), "v{v}");
            }

            // The broker's answer for "grp", laid out as version v has it.
            let topics = vec![
                OffsetFetchResponseTopic {
                    name: "a".into(),
                    partitions: vec![partition(0, 5), partition(1, 5)],
                },
                OffsetFetchResponseTopic {
                    name: "b".into(),
                    partitions: vec![partition(3, 6)],
                },
            ];
            let mut resp = OffsetFetchResponse::default();
            if v >= 8 {
                resp.groups = vec![
                    OffsetFetchResponseGroup {
                        group_id: "other".into(),
                        topics: vec![],
                        error_code: 30,
                    },
                    OffsetFetchResponseGroup {
                        group_id: "grp".into(),
                        topics,
                        error_code: 15,
                    },
                ];
            } else {
                resp.topics = topics;
                resp.error_code = 15;
            }
            let frame = encode_response::<OffsetFetchRequest>(&resp, v, 1);
            let back = decode_response::<OffsetFetchRequest>(&frame[4..], v).unwrap();
            let (error, offsets) = back.group("grp", v).unwrap();
            assert_eq!(error, if v >= 2 { 15 } else { 0 }, "v{v}");
            let epoch = |e| if v >= 5 { e } else { -1 };
            let got: Vec<_> = offsets
                .iter()
                .map(|o| {
                    let metadata = o.metadata.map(str::to_owned);
                    (
                        o.topic,
                        o.partition,
                        o.offset,
                        o.leader_epoch,
                        metadata,
                        o.error_code,
                    )
                })
                .collect();
            let want: Vec<_> = [("a", 0, 5), ("a", 1, 5), ("b", 3, 6)]
                .into_iter()
                .map(|(topic, i, e)| {
                    let p = partition(i, e);
                    (
                        topic,
                        i,
                        p.committed_offset,
                        epoch(e),
                        p.metadata,
                        p.error_code,
                    )
                })
                .collect();
            assert_eq!(got, want, "v{v}");
            if v >= 8 {
                assert!(back.group("missing", v).is_err(), "v{v}");
                assert!(OffsetFetchResponse::default().group("grp", v).is_err());
            }
        }
    }

    #[test]
    fn truncated_frames_are_errors() {
        for v in versions() {
            let frame = encode_response::<OffsetFetchRequest>(&response(), v, 1);
            for cut in 4..frame.len() {
                assert!(decode_response::<OffsetFetchRequest>(&frame[4..cut], v).is_err());
            }
            let frame = encode_request(&request(), v, 1, "c");
            for cut in 4..frame.len() {
                assert!(decode_request::<OffsetFetchRequest>(&frame[4..cut]).is_err());
            }
        }
        for (body, v) in [(v7_body(), 7), (v8_body(), 8)] {
            for cut in 0..body.len() {
                assert!(decode_response::<OffsetFetchRequest>(&body[..cut], v).is_err());
            }
        }
    }

    #[test]
    fn impossible_counts_are_rejected_before_allocating() {
        // v1: topics count i32::MAX with nothing behind it.
        let body = [0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff];
        let e = decode_response::<OffsetFetchRequest>(&body, 1).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v8: groups compact count 2^31 (2^31 - 1 entries).
        let mut body = v8_body();
        let at = 9; // after header (5), throttle (4)
        assert_eq!(body[at], 2);
        body.splice(at..at + 1, [0x80, 0x80, 0x80, 0x80, 0x08]);
        let e = decode_response::<OffsetFetchRequest>(&body, 8).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // v7: partitions compact count 2^31.
        let mut body = v7_body();
        let at = 12; // after header (5), throttle (4), topics count (1), name (2)
        assert_eq!(body[at], 2);
        body.splice(at..at + 1, [0x80, 0x80, 0x80, 0x80, 0x08]);
        let e = decode_response::<OffsetFetchRequest>(&body, 7).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A v1 request whose partition_indexes count is i32::MAX.
        let mut frame = encode_request(
            &OffsetFetchRequest::for_group("g", [("t", [0])], 1),
            1,
            1,
            "c",
        );
        let at = 4 + 11 + 3 + 4 + 3; // size, header, group, topics count, name
        assert_eq!(frame[at..at + 4], [0, 0, 0, 1]);
        frame[at..at + 4].copy_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        let e = decode_request::<OffsetFetchRequest>(&frame[4..]).unwrap_err();
        assert_eq!(e.kind(), &DecodeErrorKind::BadLength(i32::MAX as i64));
        // A null where the v8 groups array is required.
        let mut body = v8_body();
        body[9] = 0;
        assert!(decode_response::<OffsetFetchRequest>(&body, 8).is_err());
    }
}
