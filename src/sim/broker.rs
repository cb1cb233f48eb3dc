//! The simulated brokers: a [`SimBroker`] decodes the requests a component hands out as
//! [`Transmit`]s and answers them from a small model of a cluster (brokers, topics,
//! partition logs, fetch sessions, committed offsets) in the exact response bodies the
//! components' `handle_response` take: Metadata, ListOffsets, Fetch, FindCoordinator,
//! OffsetCommit and OffsetFetch. Also the request and response helpers the tests use to
//! answer by hand, record batches, and a cluster fed the broker's metadata.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::cluster::Cluster;
use crate::link::{LinkState, Transmit};
use crate::protocol::api::fetch::FetchRequest;
use crate::protocol::api::find_coordinator::{
    Coordinator as CoordinatorEntry, FindCoordinatorRequest, FindCoordinatorResponse,
    BATCHED_VERSION as FIND_BATCHED,
};
use crate::protocol::api::list_offsets::{
    ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use crate::protocol::api::metadata::{
    MetadataRequest, MetadataResponse, MetadataResponseBroker, MetadataResponsePartition,
    MetadataResponseTopic,
};
use crate::protocol::api::offset_commit::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
};
use crate::protocol::api::offset_fetch::{
    OffsetFetchRequest, OffsetFetchResponse, OffsetFetchResponseGroup,
    OffsetFetchResponsePartition, OffsetFetchResponseTopic, BATCHED_VERSION as FETCH_BATCHED,
};
use crate::protocol::api::offset_for_leader_epoch::{
    EpochEndOffset, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
};
use crate::protocol::api::Api;
use crate::protocol::error_code::ErrorCode;
use crate::protocol::frame::{encode_response, version_of};
use crate::protocol::message::Uuid;
use crate::protocol::records::testing::{encode_batch, BatchSpec, RecordSpec};
use crate::protocol::wire::{Reader, Writer};
use crate::types::{ApiVersion, TopicPartition};

use super::net::{bootstrap_route, node_of, Net};
use super::settings::cluster_config;

// ----- requests and responses -------------------------------------------------------------

/// Decodes the request `t` carries (its body is the request without the header).
pub(crate) fn request<A: Api>(t: &Transmit) -> A {
    assert_eq!(t.api_key, A::KEY, "expected a {} request", A::NAME);
    let v = version_of::<A>(t.version.get());
    assert_eq!(v.flexible, t.flexible, "{} v{} header", A::NAME, t.version);
    let mut r = Reader::new(&t.body);
    let req = A::read(&mut r, v).unwrap_or_else(|e| panic!("{} request: {e:?}", A::NAME));
    r.finish()
        .unwrap_or_else(|e| panic!("{} request has trailing bytes: {e:?}", A::NAME));
    req
}

/// The response body (frame without its size prefix) answering `t` with `resp`.
pub(crate) fn response<A: Api>(t: &Transmit, resp: &A::Response) -> Vec<u8> {
    encode_response::<A>(resp, t.version.get(), 1)[4..].to_vec()
}

/// Bytes that decode as no response: a correlation id and then garbage.
pub(crate) fn malformed() -> Vec<u8> {
    vec![0, 0, 0, 1, 0xff, 0xff, 0xff, 0xf0, 7]
}

/// A record batch of `n` records from `base`, values `v<offset>`, timestamps `10 * offset`.
pub(crate) fn batch(base: i64, n: i32) -> Vec<u8> {
    batch_with(base, n, 0, 2)
}

/// As [`batch`], with `pad` bytes of value padding per record and leader epoch `epoch`.
pub(crate) fn batch_with(base: i64, n: i32, pad: usize, epoch: i32) -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut v = format!("v{}", base + i as i64).into_bytes();
            v.resize(v.len() + pad, b'.');
            v
        })
        .collect();
    let recs: Vec<RecordSpec<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i32, 10 * i as i64, None, Some(&v[..]), &[][..]))
        .collect();
    encode_batch(&BatchSpec {
        base_offset: base,
        base_timestamp: 10 * base,
        partition_leader_epoch: epoch,
        records: &recs,
        ..BatchSpec::default()
    })
}

/// One partition's part of a Fetch answer.
#[derive(Debug, Clone)]
pub(crate) struct PartAnswer {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub preferred_read_replica: i32,
    pub records: Vec<u8>,
}

impl PartAnswer {
    /// An answer for `tp` with no error, no records, and the given high watermark.
    pub fn new(tp: TopicPartition, high_watermark: i64) -> PartAnswer {
        PartAnswer {
            tp,
            topic_id: Uuid::ZERO,
            error_code: 0,
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset: 0,
            preferred_read_replica: -1,
            records: Vec::new(),
        }
    }
}

/// A whole Fetch answer. The crate's encoder never writes record sets, so
/// [`encode_fetch`] writes this one by hand, field by field as `FetchResponse.json` lays
/// them out.
#[derive(Debug, Clone, Default)]
pub(crate) struct FetchAnswer {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub session_id: i32,
    pub parts: Vec<PartAnswer>,
}

impl FetchAnswer {
    /// The part for `tp`.
    pub fn part(&mut self, tp: &TopicPartition) -> &mut PartAnswer {
        self.parts
            .iter_mut()
            .find(|p| p.tp == *tp)
            .unwrap_or_else(|| panic!("no answer for {tp}"))
    }

    /// Whether any part carries records or an error (a broker answers those at once; an
    /// empty answer waits `fetch.max.wait.ms`).
    pub fn has_news(&self) -> bool {
        self.error_code != 0
            || self.parts.iter().any(|p| {
                p.error_code != 0 || !p.records.is_empty() || p.preferred_read_replica >= 0
            })
    }
}

/// The response body of a Fetch answer at version `v`.
pub(crate) fn encode_fetch(v: i16, a: &FetchAnswer) -> Vec<u8> {
    let flex = v >= FetchRequest::FLEXIBLE_FROM;
    let mut w = Writer::new();
    w.i32(1); // correlation id
    if flex {
        w.empty_tagged_fields();
    }
    w.i32(a.throttle_time_ms);
    if v >= 7 {
        w.i16(a.error_code);
        w.i32(a.session_id);
    }
    // Partitions grouped by topic, in order of first appearance.
    let mut topics: Vec<(&str, Uuid, Vec<&PartAnswer>)> = Vec::new();
    for p in &a.parts {
        match topics.iter_mut().find(|t| t.0 == p.tp.topic()) {
            Some(t) => t.2.push(p),
            None => topics.push((p.tp.topic(), p.topic_id, vec![p])),
        }
    }
    w.array_len(Some(topics.len()), flex);
    for (name, id, parts) in topics {
        if v <= 12 {
            w.string(name, flex);
        } else {
            w.raw(&id.0);
        }
        w.array_len(Some(parts.len()), flex);
        for p in parts {
            w.i32(p.tp.partition());
            w.i16(p.error_code);
            w.i64(p.high_watermark);
            w.i64(p.last_stable_offset);
            if v >= 5 {
                w.i64(p.log_start_offset);
            }
            w.array_len(None, flex); // aborted transactions
            if v >= 11 {
                w.i32(p.preferred_read_replica);
            }
            w.nullable_bytes(Some(&p.records), flex);
            if flex {
                w.empty_tagged_fields();
            }
        }
        if flex {
            w.empty_tagged_fields();
        }
    }
    if flex {
        w.empty_tagged_fields();
    }
    w.into_inner()
}

// ----- the simulated brokers --------------------------------------------------------------

/// One partition of the simulated cluster: its leader and the offsets its log holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SimPart {
    pub leader: i32,
    pub epoch: i32,
    pub log_start: i64,
    pub log_end: i64,
    /// A follower that also serves fetches (KIP-392), -1 for none.
    pub follower: i32,
    /// Whether the leader sends consumers to `follower` (preferred read replica).
    pub redirect: bool,
    /// What OffsetForLeaderEpoch answers for an epoch before `epoch`: the largest earlier
    /// epoch the log holds and the offset where it ends (`(-1, -1)`: none). `None`: every
    /// epoch asked for ends at the log end (nothing was truncated).
    pub epoch_end: Option<(i32, i64)>,
    /// Its replicas as Metadata lists them; empty: the leader alone.
    pub replicas: Vec<i32>,
}

/// One topic of the simulated cluster.
#[derive(Debug, Clone)]
pub(crate) struct SimTopic {
    pub id: Uuid,
    pub parts: BTreeMap<i32, SimPart>,
}

#[derive(Debug, Clone)]
struct SimSession {
    id: i32,
    /// The epoch the next incremental request must carry.
    epoch: i32,
    parts: BTreeMap<TopicPartition, i64>,
}

/// The brokers of a simulated cluster, answering as Kafka does (within what a consumer
/// asks): Metadata, ListOffsets, Fetch (with sessions when `sessions` is set),
/// FindCoordinator, OffsetCommit and OffsetFetch.
#[derive(Debug, Clone)]
pub(crate) struct SimBroker {
    pub brokers: BTreeSet<i32>,
    /// The brokers' racks (`broker.rack`), by node; unlisted brokers have none.
    pub racks: BTreeMap<i32, String>,
    pub topics: BTreeMap<String, SimTopic>,
    pub group: String,
    pub coordinator: i32,
    pub committed: BTreeMap<TopicPartition, i64>,
    /// At most this many records per partition in one Fetch answer.
    pub max_records: i32,
    /// Bytes of padding in each record's value (to make answers take memory).
    pub pad: usize,
    /// Whether Fetch answers open sessions (KIP-227).
    pub sessions: bool,
    sessions_by_node: HashMap<i32, SimSession>,
    next_session: i32,
}

impl SimBroker {
    /// Brokers `nodes`, no topics.
    pub fn new(nodes: &[i32]) -> SimBroker {
        SimBroker {
            brokers: nodes.iter().copied().collect(),
            racks: BTreeMap::new(),
            topics: BTreeMap::new(),
            group: "g".to_owned(),
            coordinator: nodes[0],
            committed: BTreeMap::new(),
            max_records: 10,
            pad: 0,
            sessions: false,
            sessions_by_node: HashMap::new(),
            next_session: 1000,
        }
    }

    /// Adds topic `name` whose partition `i` is led by `leaders[i]` (epoch 5) and holds
    /// offsets `0..log_end`.
    pub fn topic(mut self, name: &str, leaders: &[i32], log_end: i64) -> SimBroker {
        let n = self.topics.len() as u8 + 1;
        let parts = leaders
            .iter()
            .enumerate()
            .map(|(i, l)| {
                (
                    i as i32,
                    SimPart {
                        leader: *l,
                        epoch: 5,
                        log_start: 0,
                        log_end,
                        follower: -1,
                        redirect: false,
                        epoch_end: None,
                        replicas: Vec::new(),
                    },
                )
            })
            .collect();
        self.topics.insert(
            name.to_owned(),
            SimTopic {
                id: Uuid([n; 16]),
                parts,
            },
        );
        self
    }

    /// The state of `tp`.
    pub fn part(&mut self, tp: &TopicPartition) -> &mut SimPart {
        self.topics
            .get_mut(tp.topic())
            .and_then(|t| t.parts.get_mut(&tp.partition()))
            .unwrap_or_else(|| panic!("no partition {tp}"))
    }

    fn lookup(&self, tp: &TopicPartition) -> Option<SimPart> {
        self.topics
            .get(tp.topic())?
            .parts
            .get(&tp.partition())
            .cloned()
    }

    fn topic_id(&self, topic: &str) -> Uuid {
        self.topics.get(topic).map_or(Uuid::ZERO, |t| t.id)
    }

    fn topic_by_id(&self, id: &Uuid) -> Option<&str> {
        self.topics
            .iter()
            .find(|(_, t)| t.id == *id)
            .map(|(n, _)| n.as_str())
    }

    /// Answers `t` successfully (as far as the model says: a partition the broker does not
    /// lead is answered NOT_LEADER_OR_FOLLOWER, an unknown one UNKNOWN_TOPIC_OR_PARTITION).
    pub fn answer(&mut self, t: &Transmit) -> Vec<u8> {
        match t.api_key {
            MetadataRequest::KEY => {
                let resp = self.metadata(&request::<MetadataRequest>(t));
                response::<MetadataRequest>(t, &resp)
            }
            ListOffsetsRequest::KEY => {
                let resp = self.list_offsets(t, &request::<ListOffsetsRequest>(t));
                response::<ListOffsetsRequest>(t, &resp)
            }
            FetchRequest::KEY => {
                let a = self.fetch(t);
                encode_fetch(t.version.get(), &a)
            }
            FindCoordinatorRequest::KEY => {
                let resp = self.find_coordinator(t, 0);
                response::<FindCoordinatorRequest>(t, &resp)
            }
            OffsetCommitRequest::KEY => {
                let resp = self.offset_commit(t, |_| 0);
                response::<OffsetCommitRequest>(t, &resp)
            }
            OffsetFetchRequest::KEY => {
                let resp = self.offset_fetch(t, 0, |_| 0);
                response::<OffsetFetchRequest>(t, &resp)
            }
            OffsetForLeaderEpochRequest::KEY => {
                let resp = self.offset_for_leader_epoch(t);
                response::<OffsetForLeaderEpochRequest>(t, &resp)
            }
            k => panic!("the simulated broker does not speak api {k}"),
        }
    }

    /// Answers `t` with `code` wherever its answer carries an error code: every partition
    /// of a ListOffsets, Fetch (partition level), OffsetCommit or OffsetFetch answer, the
    /// coordinator of a FindCoordinator answer, the top level of a Metadata answer.
    pub fn answer_error(&mut self, t: &Transmit, code: ErrorCode) -> Vec<u8> {
        let c = code.code();
        match t.api_key {
            MetadataRequest::KEY => {
                let mut resp = self.metadata(&request::<MetadataRequest>(t));
                resp.error_code = c;
                response::<MetadataRequest>(t, &resp)
            }
            ListOffsetsRequest::KEY => {
                let mut resp = self.list_offsets(t, &request::<ListOffsetsRequest>(t));
                for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                    p.error_code = c;
                    p.offset = -1;
                }
                response::<ListOffsetsRequest>(t, &resp)
            }
            FetchRequest::KEY => {
                let mut a = self.fetch(t);
                for p in &mut a.parts {
                    p.error_code = c;
                    p.records.clear();
                }
                encode_fetch(t.version.get(), &a)
            }
            FindCoordinatorRequest::KEY => {
                let resp = self.find_coordinator(t, c);
                response::<FindCoordinatorRequest>(t, &resp)
            }
            OffsetCommitRequest::KEY => {
                let resp = self.offset_commit(t, |_| c);
                response::<OffsetCommitRequest>(t, &resp)
            }
            OffsetFetchRequest::KEY => {
                let resp = self.offset_fetch(t, 0, |_| c);
                response::<OffsetFetchRequest>(t, &resp)
            }
            OffsetForLeaderEpochRequest::KEY => {
                let mut resp = self.offset_for_leader_epoch(t);
                for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                    p.error_code = c;
                    p.leader_epoch = -1;
                    p.end_offset = -1;
                }
                response::<OffsetForLeaderEpochRequest>(t, &resp)
            }
            k => panic!("the simulated broker does not speak api {k}"),
        }
    }

    /// The Metadata answer to `req`: every broker, and each topic asked for.
    pub fn metadata(&self, req: &MetadataRequest) -> MetadataResponse {
        let brokers = self
            .brokers
            .iter()
            .map(|n| MetadataResponseBroker {
                node_id: *n,
                host: format!("broker-{n}"),
                port: 9000 + *n,
                rack: self.racks.get(n).cloned(),
            })
            .collect();
        let names: Vec<String> = match &req.topics {
            None => self.topics.keys().cloned().collect(),
            Some(ts) => ts.iter().filter_map(|t| t.name.clone()).collect(),
        };
        let topics = names
            .into_iter()
            .map(|name| match self.topics.get(&name) {
                None => MetadataResponseTopic {
                    error_code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code(),
                    name: Some(name),
                    ..Default::default()
                },
                Some(t) => MetadataResponseTopic {
                    error_code: 0,
                    name: Some(name),
                    topic_id: t.id,
                    is_internal: false,
                    partitions: t
                        .parts
                        .iter()
                        .map(|(i, p)| MetadataResponsePartition {
                            error_code: 0,
                            partition_index: *i,
                            leader_id: p.leader,
                            leader_epoch: p.epoch,
                            replica_nodes: if p.replicas.is_empty() {
                                vec![p.leader]
                            } else {
                                p.replicas.clone()
                            },
                            isr_nodes: vec![p.leader],
                            offline_replicas: vec![],
                        })
                        .collect(),
                    ..Default::default()
                },
            })
            .collect();
        MetadataResponse {
            brokers,
            cluster_id: Some("sim".into()),
            controller_id: *self.brokers.iter().next().unwrap_or(&-1),
            topics,
            ..Default::default()
        }
    }

    /// The ListOffsets answer to `req` sent on `t`'s route. Timestamps: -2 the log start,
    /// -1 the log end, `ts >= 0` the first offset whose timestamp (`10 * offset`) is at
    /// least `ts`, or -1 past the last record.
    pub fn list_offsets(&self, t: &Transmit, req: &ListOffsetsRequest) -> ListOffsetsResponse {
        let node = node_of(t.route);
        let topics = req
            .topics
            .iter()
            .map(|rt| ListOffsetsTopicResponse {
                name: rt.name.clone(),
                partitions: rt
                    .partitions
                    .iter()
                    .map(|rp| {
                        let tp = TopicPartition::new(rt.name.as_str(), rp.partition_index);
                        let (error, offset, ts, epoch) = match self.lookup(&tp) {
                            None => (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1),
                            Some(p) if p.leader != node => {
                                (ErrorCode::NOT_LEADER_OR_FOLLOWER, -1, -1, -1)
                            }
                            Some(p) => match rp.timestamp {
                                -2 => (ErrorCode::None, p.log_start, -1, p.epoch),
                                -1 => (ErrorCode::None, p.log_end, -1, p.epoch),
                                ts if ts >= 0 => {
                                    let o = ((ts + 9) / 10).max(p.log_start);
                                    if o < p.log_end {
                                        (ErrorCode::None, o, 10 * o, p.epoch)
                                    } else {
                                        (ErrorCode::None, -1, -1, p.epoch)
                                    }
                                }
                                _ => (ErrorCode::UNSUPPORTED_VERSION, -1, -1, -1),
                            },
                        };
                        ListOffsetsPartitionResponse {
                            partition_index: rp.partition_index,
                            error_code: error.code(),
                            timestamp: ts,
                            offset,
                            leader_epoch: epoch,
                        }
                    })
                    .collect(),
            })
            .collect();
        ListOffsetsResponse {
            throttle_time_ms: 0,
            topics,
        }
    }

    /// The OffsetForLeaderEpoch answer to `t`: per partition asked for, NOT_LEADER_OR_FOLLOWER
    /// off its leader, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a current leader epoch
    /// below / above the partition's, else where the epoch asked for ends
    /// ([`SimPart::epoch_end`]).
    pub fn offset_for_leader_epoch(&self, t: &Transmit) -> OffsetForLeaderEpochResponse {
        let req = request::<OffsetForLeaderEpochRequest>(t);
        let node = node_of(t.route);
        let topics = req
            .topics
            .iter()
            .map(|rt| OffsetForLeaderTopicResult {
                topic: rt.topic.clone(),
                partitions: rt
                    .partitions
                    .iter()
                    .map(|rp| {
                        let tp = TopicPartition::new(rt.topic.as_str(), rp.partition);
                        let (error, leader_epoch, end_offset) = match self.lookup(&tp) {
                            None => (ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
                            Some(p) if p.leader != node => {
                                (ErrorCode::NOT_LEADER_OR_FOLLOWER, -1, -1)
                            }
                            Some(p)
                                if rp.current_leader_epoch >= 0
                                    && rp.current_leader_epoch < p.epoch =>
                            {
                                (ErrorCode::FENCED_LEADER_EPOCH, -1, -1)
                            }
                            Some(p) if rp.current_leader_epoch > p.epoch => {
                                (ErrorCode::UNKNOWN_LEADER_EPOCH, -1, -1)
                            }
                            Some(p) if rp.leader_epoch >= p.epoch => {
                                (ErrorCode::None, p.epoch, p.log_end)
                            }
                            Some(p) => {
                                let (e, end) = p.epoch_end.unwrap_or((rp.leader_epoch, p.log_end));
                                (ErrorCode::None, e, end)
                            }
                        };
                        EpochEndOffset {
                            error_code: error.code(),
                            partition: rp.partition,
                            leader_epoch,
                            end_offset,
                        }
                    })
                    .collect(),
            })
            .collect();
        OffsetForLeaderEpochResponse {
            throttle_time_ms: 0,
            topics,
        }
    }

    /// The partitions a Fetch request asks for, with their fetch offsets, by name.
    pub fn fetch_request(&self, t: &Transmit) -> (FetchRequest, Vec<(TopicPartition, i64)>) {
        let req = request::<FetchRequest>(t);
        let mut out = Vec::new();
        for ft in &req.topics {
            let name = if t.version >= ApiVersion(13) {
                self.topic_by_id(&ft.topic_id)
                    .unwrap_or("<unknown topic id>")
                    .to_owned()
            } else {
                ft.topic.clone()
            };
            for p in &ft.partitions {
                out.push((
                    TopicPartition::new(name.as_str(), p.partition),
                    p.fetch_offset,
                ));
            }
        }
        (req, out)
    }

    /// The partitions a Fetch request names as forgotten (incremental sessions).
    pub fn forgotten(&self, t: &Transmit, req: &FetchRequest) -> Vec<TopicPartition> {
        let mut out = Vec::new();
        for f in &req.forgotten_topics_data {
            let name = if t.version >= ApiVersion(13) {
                self.topic_by_id(&f.topic_id)
                    .unwrap_or("<unknown>")
                    .to_owned()
            } else {
                f.topic.clone()
            };
            for p in &f.partitions {
                out.push(TopicPartition::new(name.as_str(), *p));
            }
        }
        out
    }

    /// The Fetch answer to `t`: the broker's session bookkeeping, then for every partition
    /// the request (or the session) covers, up to `max_records` records from its fetch
    /// offset, or the error the model gives.
    pub fn fetch(&mut self, t: &Transmit) -> FetchAnswer {
        let node = node_of(t.route);
        let (req, asked) = self.fetch_request(t);
        let forgotten = self.forgotten(t, &req);
        let mut answer = FetchAnswer::default();
        let covered: BTreeMap<TopicPartition, i64> = if t.version < ApiVersion(7)
            || req.session_epoch < 0
        {
            asked.into_iter().collect()
        } else if req.session_epoch == 0 {
            self.sessions_by_node.remove(&node);
            let parts: BTreeMap<TopicPartition, i64> = asked.into_iter().collect();
            if self.sessions {
                self.next_session += 1;
                let id = self.next_session;
                self.sessions_by_node.insert(
                    node,
                    SimSession {
                        id,
                        epoch: 1,
                        parts: parts.clone(),
                    },
                );
                answer.session_id = id;
            }
            parts
        } else {
            let code = match self.sessions_by_node.get_mut(&node) {
                Some(s) if s.id == req.session_id && s.epoch == req.session_epoch => {
                    s.epoch = s.epoch.wrapping_add(1).max(1);
                    for tp in &forgotten {
                        s.parts.remove(tp);
                    }
                    s.parts.extend(asked);
                    answer.session_id = s.id;
                    None
                }
                Some(s) if s.id == req.session_id => Some(ErrorCode::INVALID_FETCH_SESSION_EPOCH),
                _ => Some(ErrorCode::FETCH_SESSION_ID_NOT_FOUND),
            };
            if let Some(code) = code {
                self.sessions_by_node.remove(&node);
                answer.error_code = code.code();
                return answer;
            }
            self.sessions_by_node[&node].parts.clone()
        };
        for (tp, offset) in covered {
            let id = self.topic_id(tp.topic());
            let mut a = PartAnswer::new(tp.clone(), -1);
            a.topic_id = id;
            match self.lookup(&tp) {
                None => a.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.code(),
                Some(p) if p.leader != node && p.follower != node => {
                    a.error_code = ErrorCode::NOT_LEADER_OR_FOLLOWER.code()
                }
                Some(p) if offset < p.log_start || offset > p.log_end => {
                    a.error_code = ErrorCode::OFFSET_OUT_OF_RANGE.code();
                    a.high_watermark = p.log_end;
                    a.last_stable_offset = p.log_end;
                    a.log_start_offset = p.log_start;
                }
                // Kafka's leader only sends consumers to a follower that holds the offset.
                Some(p)
                    if p.leader == node && p.redirect && p.follower >= 0 && p.follower != node =>
                {
                    a.high_watermark = p.log_end;
                    a.last_stable_offset = p.log_end;
                    a.log_start_offset = p.log_start;
                    a.preferred_read_replica = p.follower;
                }
                Some(p) => {
                    a.high_watermark = p.log_end;
                    a.last_stable_offset = p.log_end;
                    a.log_start_offset = p.log_start;
                    let n = (p.log_end - offset).min(self.max_records as i64) as i32;
                    if n > 0 {
                        a.records = batch_with(offset, n, self.pad, p.epoch);
                    }
                }
            }
            answer.parts.push(a);
        }
        answer
    }

    /// The FindCoordinator answer to `t`, with error `code` (0: the coordinator).
    pub fn find_coordinator(&self, t: &Transmit, code: i16) -> FindCoordinatorResponse {
        let req = request::<FindCoordinatorRequest>(t);
        let n = self.coordinator;
        let (node, host, port) = if code == 0 {
            (n, format!("broker-{n}"), 9000 + n)
        } else {
            (-1, String::new(), -1)
        };
        if t.version < ApiVersion(FIND_BATCHED) {
            assert_eq!(req.key, self.group);
            FindCoordinatorResponse {
                error_code: code,
                error_message: (code != 0).then(|| "simulated".to_owned()),
                node_id: node,
                host,
                port,
                ..Default::default()
            }
        } else {
            FindCoordinatorResponse {
                coordinators: req
                    .coordinator_keys
                    .iter()
                    .map(|k| CoordinatorEntry {
                        key: k.clone(),
                        node_id: node,
                        host: host.clone(),
                        port,
                        error_code: code,
                        error_message: (code != 0).then(|| "simulated".to_owned()),
                    })
                    .collect(),
                ..Default::default()
            }
        }
    }

    /// The offsets an OffsetCommit request commits.
    pub fn commit_request(t: &Transmit) -> Vec<(TopicPartition, i64, Option<String>)> {
        let req = request::<OffsetCommitRequest>(t);
        req.topics
            .iter()
            .flat_map(|rt| {
                rt.partitions.iter().map(|p| {
                    (
                        TopicPartition::new(rt.name.as_str(), p.partition_index),
                        p.committed_offset,
                        p.committed_metadata.clone(),
                    )
                })
            })
            .collect()
    }

    /// The OffsetCommit answer to `t`: `code(tp)` per partition; partitions answered 0 are
    /// stored.
    pub fn offset_commit(
        &mut self,
        t: &Transmit,
        code: impl Fn(&TopicPartition) -> i16,
    ) -> OffsetCommitResponse {
        let req = request::<OffsetCommitRequest>(t);
        assert_eq!(req.group_id, self.group);
        let mut topics = Vec::new();
        for rt in &req.topics {
            let mut parts = Vec::new();
            for p in &rt.partitions {
                let tp = TopicPartition::new(rt.name.as_str(), p.partition_index);
                let c = code(&tp);
                if c == 0 {
                    self.committed.insert(tp, p.committed_offset);
                }
                parts.push(OffsetCommitResponsePartition {
                    partition_index: p.partition_index,
                    error_code: c,
                });
            }
            topics.push(OffsetCommitResponseTopic {
                name: rt.name.clone(),
                partitions: parts,
            });
        }
        OffsetCommitResponse {
            throttle_time_ms: 0,
            topics,
        }
    }

    /// The partitions an OffsetFetch request asks about.
    pub fn offset_fetch_request(&self, t: &Transmit) -> Vec<TopicPartition> {
        let req = request::<OffsetFetchRequest>(t);
        let topics = if t.version < ApiVersion(FETCH_BATCHED) {
            assert_eq!(req.group_id, self.group);
            req.topics.clone()
        } else {
            assert_eq!(req.groups.len(), 1);
            assert_eq!(req.groups[0].group_id, self.group);
            req.groups[0].topics.clone()
        };
        topics
            .unwrap_or_default()
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|p| TopicPartition::new(t.name.as_str(), *p))
            })
            .collect()
    }

    /// The OffsetFetch answer to `t`: group-level error `top`, `code(tp)` per partition,
    /// and the committed offset (-1 for none) of every partition answered without error.
    pub fn offset_fetch(
        &self,
        t: &Transmit,
        top: i16,
        code: impl Fn(&TopicPartition) -> i16,
    ) -> OffsetFetchResponse {
        let asked = self.offset_fetch_request(t);
        let mut topics: Vec<OffsetFetchResponseTopic> = Vec::new();
        for tp in asked {
            let c = code(&tp);
            let offset = if c == 0 {
                self.committed.get(&tp).copied().unwrap_or(-1)
            } else {
                -1
            };
            let part = OffsetFetchResponsePartition {
                partition_index: tp.partition(),
                committed_offset: offset,
                committed_leader_epoch: -1,
                metadata: Some(String::new()),
                error_code: c,
            };
            match topics.iter_mut().find(|t| t.name == tp.topic()) {
                Some(t) => t.partitions.push(part),
                None => topics.push(OffsetFetchResponseTopic {
                    name: tp.topic().to_owned(),
                    partitions: vec![part],
                }),
            }
        }
        if t.version < ApiVersion(FETCH_BATCHED) {
            OffsetFetchResponse {
                topics,
                error_code: top,
                ..Default::default()
            }
        } else {
            OffsetFetchResponse {
                groups: vec![OffsetFetchResponseGroup {
                    group_id: self.group.clone(),
                    topics,
                    error_code: top,
                }],
                ..Default::default()
            }
        }
    }
}

// ----- a cluster with known metadata ------------------------------------------------------

/// Feeds `cluster` the metadata `broker` gives for the topics it is interested in, through
/// bootstrap server 0 (made ready if it is not). Panics if no refresh is due.
pub(crate) fn feed_metadata(cluster: &mut Cluster, net: &mut Net, broker: &SimBroker) {
    let now = net.now();
    if !matches!(net.links.state(bootstrap_route(0)), LinkState::Ready(_)) {
        net.ready(bootstrap_route(0));
    }
    let t = cluster
        .poll_transmit(now, &mut net.links)
        .expect("a metadata refresh is due");
    let body = broker.clone().answer(&t);
    cluster.handle_response(t.tag.id, t.version, &body, now, &mut net.links);
}

/// A cluster that knows what `broker` says about `topics`.
pub(crate) fn known_cluster(net: &mut Net, broker: &SimBroker, topics: &[&str]) -> Cluster {
    let mut c = Cluster::new(cluster_config());
    c.set_interest(
        crate::cluster::Interest::Assignment,
        topics.iter().map(|t| Arc::from(*t)),
    );
    feed_metadata(&mut c, net, broker);
    c
}

/// `topic-partition`.
pub(crate) fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

#[cfg(test)]
mod tests;
