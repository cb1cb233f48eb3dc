//! Answers to the requests the consumer sends, at the version it picked.

use std::time::Duration;

use kafka_consumer::testing::api::fetch::FetchRequest;
use kafka_consumer::testing::api::find_coordinator::{
    Coordinator, FindCoordinatorRequest, FindCoordinatorResponse,
};
use kafka_consumer::testing::api::list_offsets::{
    ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_consumer::testing::api::metadata::{
    MetadataRequest, MetadataResponse, MetadataResponseBroker, MetadataResponsePartition,
    MetadataResponseTopic,
};
use kafka_consumer::testing::api::offset_commit::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
};
use kafka_consumer::testing::api::offset_fetch::{
    OffsetFetchRequest, OffsetFetchResponse, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_consumer::testing::frame::encode_response;
use kafka_consumer::testing::wire::Writer;

use super::{Reply, Request, FETCH, METADATA};

// ----- Metadata ----------------------------------------------------------------------------

/// A broker in a Metadata answer: `(node id, host, port)`.
pub type Broker = (i32, &'static str, u16);

/// Node `id` at 127.0.0.1:`port`.
pub fn broker(id: i32, port: u16) -> Broker {
    (id, "127.0.0.1", port)
}

/// One partition of a fake topic: its index, leader, leader epoch and replicas.
#[derive(Debug, Clone)]
pub struct Part {
    pub topic: &'static str,
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
}

/// Partition `partition` of `topic`, led by `leader` (its only replica) at leader epoch 0.
pub fn part(topic: &'static str, partition: i32, leader: i32) -> Part {
    Part {
        topic,
        partition,
        leader,
        leader_epoch: 0,
        replicas: vec![leader],
    }
}

/// A Metadata answer listing `brokers` and `parts`.
pub fn metadata(r: &Request, brokers: &[Broker], parts: &[Part]) -> Vec<u8> {
    metadata_answer(r, brokers, parts, 0)
}

/// A Metadata answer with the top-level error `code` (sent from v13) and nothing else.
pub fn metadata_error(r: &Request, code: i16) -> Vec<u8> {
    metadata_answer(r, &[], &[], code)
}

/// Metadata for topic `t` with partitions `0..n`, all led by node 0, listing node 0 only.
pub fn simple_metadata(r: &Request, n: i32) -> Vec<u8> {
    let parts: Vec<Part> = (0..n).map(|p| part("t", p, 0)).collect();
    metadata(r, &[broker(0, r.ports[0])], &parts)
}

fn metadata_answer(r: &Request, brokers: &[Broker], parts: &[Part], error: i16) -> Vec<u8> {
    let mut topics: Vec<MetadataResponseTopic> = Vec::new();
    for p in parts {
        let mp = MetadataResponsePartition {
            partition_index: p.partition,
            leader_id: p.leader,
            leader_epoch: p.leader_epoch,
            replica_nodes: p.replicas.clone(),
            isr_nodes: p.replicas.clone(),
            ..Default::default()
        };
        match topics
            .iter_mut()
            .find(|t| t.name.as_deref() == Some(p.topic))
        {
            Some(t) => t.partitions.push(mp),
            None => topics.push(MetadataResponseTopic {
                name: Some(p.topic.into()),
                partitions: vec![mp],
                ..Default::default()
            }),
        }
    }
    let resp = MetadataResponse {
        brokers: brokers
            .iter()
            .map(|&(node_id, host, port)| MetadataResponseBroker {
                node_id,
                host: host.into(),
                port: port as i32,
                rack: None,
            })
            .collect(),
        controller_id: brokers.first().map_or(-1, |b| b.0),
        topics,
        error_code: error,
        ..Default::default()
    };
    encode_response::<MetadataRequest>(&resp, r.version, r.corr)
}

impl Request {
    /// For a Metadata request: the topics asked for.
    pub fn metadata_topics(&self) -> Vec<String> {
        assert_eq!(self.key, METADATA);
        let topics = self.decode::<MetadataRequest>().topics;
        topics
            .into_iter()
            .flatten()
            .filter_map(|t| t.name)
            .collect()
    }
}

// ----- ListOffsets -------------------------------------------------------------------------

/// A ListOffsets answer: `answer(topic, partition, timestamp asked)` gives `(error, offset)`.
pub fn list_offsets(r: &Request, answer: impl Fn(&str, i32, i64) -> (i16, i64)) -> Vec<u8> {
    let req: ListOffsetsRequest = r.decode();
    let resp = ListOffsetsResponse {
        throttle_time_ms: 0,
        topics: req
            .topics
            .iter()
            .map(|t| ListOffsetsTopicResponse {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| {
                        let (error_code, offset) = answer(&t.name, p.partition_index, p.timestamp);
                        ListOffsetsPartitionResponse {
                            partition_index: p.partition_index,
                            error_code,
                            timestamp: -1,
                            offset,
                            leader_epoch: 0,
                        }
                    })
                    .collect(),
            })
            .collect(),
    };
    encode_response::<ListOffsetsRequest>(&resp, r.version, r.corr)
}

// ----- Fetch -------------------------------------------------------------------------------

/// One partition asked for in a Fetch request.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub topic: String,
    pub partition: i32,
    /// The fetch offset.
    pub offset: i64,
    pub max_bytes: i32,
    /// The leader epoch the consumer's metadata names (-1: unknown).
    pub current_leader_epoch: i32,
}

impl Request {
    /// For a Fetch: the partitions asked for, in request order.
    pub fn wanted(&self) -> Vec<Wanted> {
        assert_eq!(self.key, FETCH);
        let req: FetchRequest = self.decode();
        req.topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| Wanted {
                    topic: t.topic.clone(),
                    partition: p.partition,
                    offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes,
                    current_leader_epoch: p.current_leader_epoch,
                })
            })
            .collect()
    }
}

/// One partition's part of a Fetch answer.
#[derive(Debug, Clone, Default)]
pub struct FetchPart {
    pub error: i16,
    pub high_watermark: i64,
    /// Aborted transactions `(producer id, first offset)`; `None` is a null array.
    pub aborted: Option<Vec<(i64, i64)>>,
    /// KIP-392 (v11+): fetch from this node instead (`None`: -1, no preference).
    pub preferred_read_replica: Option<i32>,
    /// Record batches.
    pub records: Vec<u8>,
}

impl FetchPart {
    /// Records (record batches) and the high watermark.
    pub fn records(high_watermark: i64, records: Vec<u8>) -> FetchPart {
        FetchPart {
            high_watermark,
            records,
            ..FetchPart::default()
        }
    }

    /// Nothing new.
    pub fn empty(high_watermark: i64) -> FetchPart {
        FetchPart::records(high_watermark, Vec::new())
    }

    /// A partition error.
    pub fn error(code: i16) -> FetchPart {
        FetchPart {
            error: code,
            ..FetchPart::empty(-1)
        }
    }

    /// Whether a broker would answer this at once (records, an error or a replica to go
    /// to) rather than wait out the long poll.
    pub fn is_news(&self) -> bool {
        self.error != 0 || !self.records.is_empty() || self.preferred_read_replica.is_some()
    }
}

/// A Fetch answer (v4-v12, no session) throttled by `throttle_ms`: `answer` gives the
/// part of each partition `r` asks for, in its order.
pub fn fetch(
    r: &Request,
    throttle_ms: i32,
    mut answer: impl FnMut(&Wanted) -> FetchPart,
) -> Vec<u8> {
    let parts: Vec<(Wanted, FetchPart)> = r
        .wanted()
        .into_iter()
        .map(|w| {
            let a = answer(&w);
            (w, a)
        })
        .collect();
    encode_fetch(r, throttle_ms, 0, &parts)
}

/// [`fetch`] unthrottled, answered as a broker's long poll: when no part is news, after
/// the request's `max_wait_ms` (at most 1 s).
pub fn fetch_reply(r: &Request, mut answer: impl FnMut(&Wanted) -> FetchPart) -> Reply {
    let mut news = false;
    let bytes = fetch(r, 0, |w| {
        let a = answer(w);
        news |= a.is_news();
        a
    });
    if news {
        Reply::Send(bytes)
    } else {
        let max_wait = r.decode::<FetchRequest>().max_wait_ms;
        Reply::SendAfter(Duration::from_millis(max_wait.clamp(0, 1000) as u64), bytes)
    }
}

/// The Fetch response, written by hand: the crate's own encoder never writes record sets.
fn encode_fetch(
    r: &Request,
    throttle_ms: i32,
    session_id: i32,
    parts: &[(Wanted, FetchPart)],
) -> Vec<u8> {
    let v = r.version;
    assert!(
        (4..=12).contains(&v),
        "the fake encodes Fetch v4-v12 only, not v{v}"
    );
    let flex = v >= 12;
    let tagged = |w: &mut Writer| {
        if flex {
            w.empty_tagged_fields();
        }
    };
    let size: usize = parts.iter().map(|(_, a)| a.records.len() + 64).sum();
    let mut w = Writer::with_capacity(64 + size);
    let at = w.reserve_i32();
    w.i32(r.corr);
    tagged(&mut w);
    w.i32(throttle_ms);
    if v >= 7 {
        w.i16(0); // error
        w.i32(session_id);
    }
    // Partitions grouped by topic, in request order.
    let mut topics: Vec<(&str, Vec<&(Wanted, FetchPart)>)> = Vec::new();
    for p in parts {
        match topics.iter_mut().find(|(t, _)| *t == p.0.topic) {
            Some((_, ps)) => ps.push(p),
            None => topics.push((&p.0.topic, vec![p])),
        }
    }
    w.array_len(Some(topics.len()), flex);
    for (topic, ps) in topics {
        w.string(topic, flex);
        w.array_len(Some(ps.len()), flex);
        for (want, a) in ps {
            w.i32(want.partition);
            w.i16(a.error);
            w.i64(a.high_watermark);
            w.i64(a.high_watermark); // last stable offset
            if v >= 5 {
                w.i64(0); // log start offset
            }
            w.array_len(a.aborted.as_ref().map(Vec::len), flex);
            for &(producer_id, first_offset) in a.aborted.iter().flatten() {
                w.i64(producer_id);
                w.i64(first_offset);
                tagged(&mut w);
            }
            if v >= 11 {
                w.i32(a.preferred_read_replica.unwrap_or(-1));
            }
            w.nullable_bytes(Some(&a.records), flex);
            tagged(&mut w);
        }
        tagged(&mut w);
    }
    tagged(&mut w);
    let len = (w.len() - 4) as i32;
    w.patch_i32(at, len);
    w.into_inner()
}

/// Incremental fetch sessions (KIP-227) as a broker keeps them, for [`fetch_session_reply`]:
/// a full request (epoch 0) opens a session holding every partition it lists; an
/// incremental one updates the partitions it lists and drops the forgotten ones, and is
/// answered with the partitions that have news or a new high watermark only.
#[derive(Default)]
pub struct FetchSessions {
    inner: std::sync::Mutex<SessionsInner>,
}

/// One session's partitions: `(topic, partition)` -> (what was asked, last high watermark
/// answered).
type SessionParts = std::collections::HashMap<(String, i32), (Wanted, i64)>;

#[derive(Default)]
struct SessionsInner {
    next_id: i32,
    sessions: std::collections::HashMap<i32, SessionParts>,
}

impl FetchSessions {
    /// How many partitions session `id` holds (0 if there is none).
    pub fn partitions(&self, id: i32) -> usize {
        let s = self.inner.lock().unwrap();
        s.sessions.get(&id).map_or(0, |p| p.len())
    }
}

/// A Fetch answer (v7-v12) within a fetch session, as a broker's long poll (see
/// [`fetch_reply`]): `answer` gives the part of each partition of the session.
pub fn fetch_session_reply(
    r: &Request,
    sessions: &FetchSessions,
    mut answer: impl FnMut(&Wanted) -> FetchPart,
) -> Reply {
    assert!(r.version >= 7, "fetch sessions need Fetch v7+");
    let req: FetchRequest = r.decode();
    let mut s = sessions.inner.lock().unwrap();
    let (id, full) = if req.session_epoch == 0 {
        s.sessions.remove(&req.session_id);
        s.next_id += 1;
        let id = s.next_id;
        s.sessions.insert(id, Default::default());
        (id, true)
    } else if req.session_epoch > 0 && s.sessions.contains_key(&req.session_id) {
        (req.session_id, false)
    } else {
        // FETCH_SESSION_ID_NOT_FOUND: the client starts over with a full request.
        return Reply::Send(encode_fetch_error(r, 70));
    };
    let session = s.sessions.get_mut(&id).expect("the session");
    for w in r.wanted() {
        let hw = session
            .get(&(w.topic.clone(), w.partition))
            .map_or(-2, |e| e.1);
        session.insert((w.topic.clone(), w.partition), (w, hw));
    }
    for t in &req.forgotten_topics_data {
        for p in &t.partitions {
            session.remove(&(t.topic.clone(), *p));
        }
    }
    let mut parts = Vec::new();
    let mut news = false;
    for (want, hw) in session.values_mut() {
        let a = answer(want);
        if full || a.is_news() || a.high_watermark != *hw {
            news |= a.is_news();
            *hw = a.high_watermark;
            parts.push((want.clone(), a));
        }
    }
    drop(s);
    parts.sort_by(|a, b| (&a.0.topic, a.0.partition).cmp(&(&b.0.topic, b.0.partition)));
    let bytes = encode_fetch(r, 0, id, &parts);
    if news || full {
        Reply::Send(bytes)
    } else {
        let max_wait = req.max_wait_ms;
        Reply::SendAfter(Duration::from_millis(max_wait.clamp(0, 1000) as u64), bytes)
    }
}

/// A Fetch answer (v7+) with the top-level error `code` and no partitions.
fn encode_fetch_error(r: &Request, code: i16) -> Vec<u8> {
    let flex = r.version >= 12;
    let mut w = Writer::new();
    let at = w.reserve_i32();
    w.i32(r.corr);
    if flex {
        w.empty_tagged_fields();
    }
    w.i32(0); // throttle
    w.i16(code);
    w.i32(0); // session id
    w.array_len(Some(0), flex);
    if flex {
        w.empty_tagged_fields();
    }
    let len = (w.len() - 4) as i32;
    w.patch_i32(at, len);
    w.into_inner()
}

// ----- the group coordinator -----------------------------------------------------------------

/// A FindCoordinator answer (any version): `error`, or node `node` at 127.0.0.1:`port`.
pub fn find_coordinator(r: &Request, error: i16, node: i32, port: u16) -> Vec<u8> {
    let req: FindCoordinatorRequest = r.decode();
    let key = if r.version >= 4 {
        req.coordinator_keys.first().cloned().unwrap_or_default()
    } else {
        req.key.clone()
    };
    let resp = FindCoordinatorResponse {
        throttle_time_ms: 0,
        error_code: error,
        error_message: None,
        node_id: node,
        host: "127.0.0.1".into(),
        port: port as i32,
        coordinators: vec![Coordinator {
            key,
            node_id: node,
            host: "127.0.0.1".into(),
            port: port as i32,
            error_code: error,
            error_message: None,
        }],
    };
    encode_response::<FindCoordinatorRequest>(&resp, r.version, r.corr)
}

/// An OffsetCommit answer giving every partition asked for the error `error`.
pub fn offset_commit(r: &Request, error: i16) -> Vec<u8> {
    let req: OffsetCommitRequest = r.decode();
    let resp = OffsetCommitResponse {
        throttle_time_ms: 0,
        topics: req
            .topics
            .iter()
            .map(|t| OffsetCommitResponseTopic {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| OffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error_code: error,
                    })
                    .collect(),
            })
            .collect(),
    };
    encode_response::<OffsetCommitRequest>(&resp, r.version, r.corr)
}

/// An OffsetFetch answer (v1-v7): nothing committed for any partition asked for.
pub fn offset_fetch_nothing(r: &Request) -> Vec<u8> {
    assert!(r.version < 8, "the fake answers OffsetFetch v1-v7 only");
    let req: OffsetFetchRequest = r.decode();
    let resp = OffsetFetchResponse {
        topics: req
            .topics
            .iter()
            .flatten()
            .map(|t| OffsetFetchResponseTopic {
                name: t.name.clone(),
                partitions: t
                    .partition_indexes
                    .iter()
                    .map(|&partition_index| OffsetFetchResponsePartition {
                        partition_index,
                        committed_offset: -1,
                        committed_leader_epoch: -1,
                        metadata: None,
                        error_code: 0,
                    })
                    .collect(),
            })
            .collect(),
        ..Default::default()
    };
    encode_response::<OffsetFetchRequest>(&resp, r.version, r.corr)
}
