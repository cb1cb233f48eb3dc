//! A fake cluster on 127.0.0.1 for the API fault tests: several listeners (one per fake
//! node), the API versions the test chooses, every request decoded with the crate's own
//! layouts and recorded with the instant it arrived, and answers that may be delayed,
//! withheld or followed by a close. ApiVersions is answered by the fake itself.
//!
//! Unlike `fake.rs` (one listener, fixed old versions) this one speaks Metadata v13 and
//! Fetch v11 (preferred read replicas), so it can provoke KIP-392, KIP-219 and KIP-1102
//! behaviour; Fetch answers are hand-encoded for v4..=11 (the crate never encodes record
//! sets).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kafka_consumer::testing::api::api_versions::{
    ApiVersion, ApiVersionsRequest, ApiVersionsResponse,
};
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
use kafka_consumer::testing::api::Api;
use kafka_consumer::testing::frame::{decode_request, encode_response};
use kafka_consumer::testing::records::testing::{encode_batch, BatchSpec, RecordSpec};
use kafka_consumer::testing::wire::Writer;

/// API keys.
pub const FETCH: i16 = 1;
pub const LIST_OFFSETS: i16 = 2;
pub const METADATA: i16 = 3;
pub const OFFSET_COMMIT: i16 = 8;
pub const OFFSET_FETCH: i16 = 9;
pub const FIND_COORDINATOR: i16 = 10;
pub const API_VERSIONS: i16 = 18;

/// What the fake advertises unless a test says otherwise: Metadata up to v13 (top-level
/// error code), Fetch v4-v11 (non-flexible, preferred read replica), ListOffsets v1-v11,
/// FindCoordinator v0-v6, OffsetCommit v2-v9, OffsetFetch v1-v7 (one group per request).
pub const MODERN: &[(i16, i16, i16)] = &[
    (API_VERSIONS, 0, 3),
    (METADATA, 1, 13),
    (LIST_OFFSETS, 1, 11),
    (FETCH, 4, 11),
    (FIND_COORDINATOR, 0, 6),
    (OFFSET_COMMIT, 2, 9),
    (OFFSET_FETCH, 1, 7),
];

/// One request as a fake node received it.
#[derive(Debug)]
pub struct Request {
    /// Which listener (fake node) received it.
    pub node: usize,
    /// Which connection (numbered across the whole cluster in accept order).
    pub conn: usize,
    pub key: i16,
    pub version: i16,
    pub corr: i32,
    /// The frame without its size prefix (what `decode_request` reads).
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
    /// The ports of every listener, by node index.
    pub ports: Arc<Vec<u16>>,
}

impl Request {
    /// The request decoded with the crate's layout of `A`.
    pub fn decode<A: Api>(&self) -> A {
        decode_request::<A>(&self.body)
            .unwrap_or_else(|e| panic!("the fake cannot decode a request (key {}): {e}", self.key))
            .2
    }

    /// For a Fetch: the partitions asked for, in request order, with their fetch offsets.
    pub fn fetched(&self) -> Vec<(String, i32, i64)> {
        assert_eq!(self.key, FETCH);
        let req: FetchRequest = self.decode();
        req.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic.clone(), p.partition, p.fetch_offset))
            })
            .collect()
    }

    /// For a Metadata request: the topics asked for.
    pub fn metadata_topics(&self) -> Vec<String> {
        assert_eq!(self.key, METADATA);
        let req: MetadataRequest = self.decode();
        req.topics
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| t.name)
            .collect()
    }
}

/// What a fake node does with a request.
pub enum Answer {
    Send(Vec<u8>),
    /// Wait, then send (the connection reads nothing meanwhile, as one broker thread).
    SendAfter(Duration, Vec<u8>),
    /// Send, then close the connection.
    SendAndClose(Vec<u8>),
    /// Never answer; the connection stays open.
    Hang,
    Close,
}

type Handler = dyn Fn(&Request) -> Answer + Send + Sync;

#[derive(Default)]
struct Log {
    requests: Mutex<Vec<Arc<Request>>>,
    grew: Condvar,
}

/// Several fake nodes sharing one handler and one request log.
pub struct FakeCluster {
    ports: Arc<Vec<u16>>,
    log: Arc<Log>,
}

impl FakeCluster {
    /// `nodes` listeners advertising [`MODERN`] versions.
    pub fn start(
        nodes: usize,
        handler: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    ) -> Self {
        Self::with_versions(nodes, MODERN, handler)
    }

    /// `nodes` listeners advertising `versions` (`(api key, min, max)`).
    pub fn with_versions(
        nodes: usize,
        versions: &[(i16, i16, i16)],
        handler: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let listeners: Vec<TcpListener> = (0..nodes)
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let ports: Arc<Vec<u16>> = Arc::new(
            listeners
                .iter()
                .map(|l| l.local_addr().expect("addr").port())
                .collect(),
        );
        let log = Arc::new(Log::default());
        let handler: Arc<Handler> = Arc::new(handler);
        let versions: Arc<Vec<(i16, i16, i16)>> = Arc::new(versions.to_vec());
        let conns = Arc::new(AtomicUsize::new(0));
        for (node, listener) in listeners.into_iter().enumerate() {
            let (ports, log, handler, versions, conns) = (
                Arc::clone(&ports),
                Arc::clone(&log),
                Arc::clone(&handler),
                Arc::clone(&versions),
                Arc::clone(&conns),
            );
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { return };
                    let conn = conns.fetch_add(1, Ordering::SeqCst);
                    let (ports, log, handler, versions) = (
                        Arc::clone(&ports),
                        Arc::clone(&log),
                        Arc::clone(&handler),
                        Arc::clone(&versions),
                    );
                    std::thread::spawn(move || {
                        serve(stream, node, conn, &ports, &log, &*handler, &versions)
                    });
                }
            });
        }
        FakeCluster { ports, log }
    }

    /// The port of node `node`.
    pub fn port(&self, node: usize) -> u16 {
        self.ports[node]
    }

    /// `127.0.0.1:<port>` of node `node`.
    pub fn addr(&self, node: usize) -> String {
        format!("127.0.0.1:{}", self.ports[node])
    }

    /// Every request received so far (ApiVersions included), in arrival order.
    pub fn requests(&self) -> Vec<Arc<Request>> {
        self.log.requests.lock().unwrap().clone()
    }

    /// The requests with API key `key`, in arrival order.
    pub fn requests_of(&self, key: i16) -> Vec<Arc<Request>> {
        self.requests()
            .into_iter()
            .filter(|r| r.key == key)
            .collect()
    }

    /// Waits until `cond` holds for the requests received so far, or `limit` passes.
    pub fn wait_until(&self, limit: Duration, cond: impl Fn(&[Arc<Request>]) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut reqs = self.log.requests.lock().unwrap();
        loop {
            if cond(&reqs) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            reqs = self.log.grew.wait_timeout(reqs, deadline - now).unwrap().0;
        }
    }
}

fn serve(
    mut s: TcpStream,
    node: usize,
    conn: usize,
    ports: &Arc<Vec<u16>>,
    log: &Log,
    handler: &Handler,
    versions: &[(i16, i16, i16)],
) {
    loop {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).is_err() {
            return;
        }
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        if s.read_exact(&mut body).is_err() {
            return;
        }
        let req = Arc::new(Request {
            node,
            conn,
            key: i16::from_be_bytes([body[0], body[1]]),
            version: i16::from_be_bytes([body[2], body[3]]),
            corr: i32::from_be_bytes([body[4], body[5], body[6], body[7]]),
            body,
            at: Instant::now(),
            ports: Arc::clone(ports),
        });
        {
            let mut reqs = log.requests.lock().unwrap();
            reqs.push(Arc::clone(&req));
            log.grew.notify_all();
        }
        let answer = if req.key == API_VERSIONS {
            Answer::Send(api_versions(&req, versions))
        } else {
            handler(&req)
        };
        match answer {
            Answer::Send(bytes) => {
                if s.write_all(&bytes).is_err() {
                    return;
                }
            }
            Answer::SendAfter(d, bytes) => {
                std::thread::sleep(d);
                if s.write_all(&bytes).is_err() {
                    return;
                }
            }
            Answer::SendAndClose(bytes) => {
                let _ = s.write_all(&bytes);
                return;
            }
            Answer::Close => return,
            Answer::Hang => {
                // Hold the connection until the client closes it.
                let mut sink = [0u8; 4096];
                while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
                return;
            }
        }
    }
}

fn api_versions(r: &Request, versions: &[(i16, i16, i16)]) -> Vec<u8> {
    let resp = ApiVersionsResponse {
        error_code: 0,
        api_keys: versions
            .iter()
            .map(|&(api_key, min_version, max_version)| ApiVersion {
                api_key,
                min_version,
                max_version,
            })
            .collect(),
        throttle_time_ms: 0,
    };
    encode_response::<ApiVersionsRequest>(&resp, r.version, r.corr)
}

// ----- answers -----------------------------------------------------------------------------

/// One partition of a fake topic: its index, leader and replicas.
#[derive(Debug, Clone)]
pub struct Part {
    pub topic: &'static str,
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
}

/// Partition `partition` of `topic`, led by `leader` (its only replica).
pub fn part(topic: &'static str, partition: i32, leader: i32) -> Part {
    Part {
        topic,
        partition,
        leader,
        replicas: vec![leader],
    }
}

/// A Metadata answer listing `brokers` (`(node id, host, port)`) and `parts`, with the
/// top-level error `error` (sent from v13).
pub fn metadata(r: &Request, brokers: &[(i32, &str, u16)], parts: &[Part], error: i16) -> Vec<u8> {
    let mut topics: Vec<MetadataResponseTopic> = Vec::new();
    for p in parts {
        let mp = MetadataResponsePartition {
            partition_index: p.partition,
            leader_id: p.leader,
            leader_epoch: 0,
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
        controller_id: 0,
        topics,
        error_code: error,
        ..Default::default()
    };
    encode_response::<MetadataRequest>(&resp, r.version, r.corr)
}

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

/// One partition's part of a Fetch answer.
#[derive(Debug, Clone)]
pub struct FetchPart {
    pub error: i16,
    pub high_watermark: i64,
    pub aborted: Option<Vec<(i64, i64)>>,
    pub preferred_read_replica: i32,
    pub records: Vec<u8>,
}

impl FetchPart {
    /// Records (record batches) and the high watermark.
    pub fn records(high_watermark: i64, records: Vec<u8>) -> FetchPart {
        FetchPart {
            error: 0,
            high_watermark,
            aborted: None,
            preferred_read_replica: -1,
            records,
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

    /// Whether this part carries something (records or an error).
    pub fn is_news(&self) -> bool {
        self.error != 0 || !self.records.is_empty() || self.preferred_read_replica >= 0
    }
}

/// A Fetch answer (v4..=11, hand-encoded) for the partitions `r` asks for, in its order:
/// `answer(topic, partition, fetch offset)` gives each part. No session (id 0).
pub fn fetch(
    r: &Request,
    throttle_ms: i32,
    mut answer: impl FnMut(&str, i32, i64) -> FetchPart,
) -> Vec<u8> {
    let v = r.version;
    assert!(
        (4..=11).contains(&v),
        "the fake encodes Fetch v4-v11 only, not v{v}"
    );
    let req: FetchRequest = r.decode();
    let mut w = Writer::new();
    let at = w.reserve_i32();
    w.i32(r.corr);
    w.i32(throttle_ms);
    if v >= 7 {
        w.i16(0); // error
        w.i32(0); // session id: none
    }
    w.i32(req.topics.len() as i32);
    for t in &req.topics {
        w.string(&t.topic, false);
        w.i32(t.partitions.len() as i32);
        for p in &t.partitions {
            let a = answer(&t.topic, p.partition, p.fetch_offset);
            w.i32(p.partition);
            w.i16(a.error);
            w.i64(a.high_watermark);
            w.i64(a.high_watermark); // last stable offset
            if v >= 5 {
                w.i64(0); // log start offset
            }
            match &a.aborted {
                None => w.i32(-1),
                Some(list) => {
                    w.i32(list.len() as i32);
                    for &(producer_id, first_offset) in list {
                        w.i64(producer_id);
                        w.i64(first_offset);
                    }
                }
            }
            if v >= 11 {
                w.i32(a.preferred_read_replica);
            }
            w.nullable_bytes(Some(&a.records), false);
        }
    }
    let len = (w.len() - 4) as i32;
    w.patch_i32(at, len);
    w.into_inner()
}

/// A FindCoordinator answer: `error`, or node `node` at `127.0.0.1:port`.
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
        throttle_time_ms: 0,
        topics: req
            .topics
            .unwrap_or_default()
            .iter()
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
        error_code: 0,
        groups: Vec::new(),
    };
    encode_response::<OffsetFetchRequest>(&resp, r.version, r.corr)
}

/// A batch of `n` plain records from `base` (values `v<offset>`).
pub fn batch(base: i64, n: i32) -> Vec<u8> {
    let values: Vec<String> = (0..n).map(|i| format!("v{}", base + i as i64)).collect();
    let recs: Vec<RecordSpec<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i32, 0, None, Some(v.as_bytes()), &[][..]))
        .collect();
    encode_batch(&BatchSpec {
        base_offset: base,
        records: &recs,
        ..BatchSpec::default()
    })
}
