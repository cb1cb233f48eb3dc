//! A fake Kafka cluster on 127.0.0.1 for the busy-loop and memory tests, beyond what
//! [`super::fake`] does: several listeners (one per node), ApiVersions ranges the test
//! chooses (old, new, or missing APIs), per-connection idle close (as a broker's
//! `connections.max.idle.ms`), requests decoded with the crate's own decoders, counters of
//! connections and requests, and answers for Metadata, ListOffsets and Fetch at whatever
//! version the client picked (Fetch up to v12, the last version with topic names).
//!
//! Node `i` listens on `ports[i]`; the handler decides what each request gets.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use super::fake::Reply;
use kafka_consumer::testing::api::api_versions::{
    ApiVersion, ApiVersionsRequest, ApiVersionsResponse,
};
use kafka_consumer::testing::api::fetch::FetchRequest;
use kafka_consumer::testing::api::find_coordinator::{
    FindCoordinatorRequest, FindCoordinatorResponse,
};
use kafka_consumer::testing::api::list_offsets::{
    ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_consumer::testing::api::metadata::{
    MetadataRequest, MetadataResponse, MetadataResponseBroker, MetadataResponsePartition,
    MetadataResponseTopic,
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
pub const OFFSET_FETCH: i16 = 9;
pub const FIND_COORDINATOR: i16 = 10;
pub const API_VERSIONS: i16 = 18;

/// The ranges a current broker would offer, capped where the fake stops encoding by hand:
/// Fetch v4-v12 (flexible from v12; v13 replaces topic names with ids), Metadata v1-v12,
/// ListOffsets v1-v8, FindCoordinator v0-v3 and OffsetFetch v1-v7 (one group per request).
pub const MODERN: &[(i16, i16, i16)] = &[
    (18, 0, 3),
    (3, 1, 12),
    (2, 1, 8),
    (1, 4, 12),
    (10, 0, 3),
    (9, 1, 7),
];

/// How the fake cluster behaves, apart from its answers.
#[derive(Debug, Clone)]
pub struct Options {
    /// Listeners (node ids 0..nodes).
    pub nodes: usize,
    /// Listen on these ports instead of free ones (one per node).
    pub ports: Option<Vec<u16>>,
    /// Close a connection that has sent no request for this long, as a broker does after
    /// `connections.max.idle.ms`.
    pub idle_close: Option<Duration>,
    /// ApiVersions ranges `(api_key, min, max)`.
    pub versions: Vec<(i16, i16, i16)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 1,
            ports: None,
            idle_close: None,
            versions: MODERN.to_vec(),
        }
    }
}

/// One request as the fake cluster saw it.
pub struct Request<'a> {
    pub key: i16,
    pub version: i16,
    pub corr: i32,
    /// The node (listener index) it arrived at.
    pub node: usize,
    /// Every node's port.
    pub ports: &'a [u16],
    /// The frame without its size prefix (header and body).
    pub frame: &'a [u8],
}

impl Request<'_> {
    /// The request decoded with the crate's own decoder.
    pub fn decode<A: Api>(&self) -> A {
        decode_request::<A>(self.frame)
            .unwrap_or_else(|e| panic!("fake cluster: cannot decode {}: {e}", A::NAME))
            .2
    }
}

pub type Handler = dyn Fn(&Request<'_>) -> Reply + Send + Sync;

/// Counters the tests bound.
pub struct Stats {
    connections: AtomicUsize,
    idle_closes: AtomicUsize,
    requests: [AtomicUsize; 80],
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            connections: AtomicUsize::new(0),
            idle_closes: AtomicUsize::new(0),
            requests: std::array::from_fn(|_| AtomicUsize::new(0)),
        }
    }
}

/// A running fake cluster. Its threads live until the test process ends (each serving
/// thread ends when its connection closes).
pub struct FakeCluster {
    pub ports: Vec<u16>,
    stats: Arc<Stats>,
}

impl FakeCluster {
    pub fn start(opts: Options, handler: Arc<Handler>) -> FakeCluster {
        let listeners: Vec<TcpListener> = (0..opts.nodes)
            .map(|i| {
                let port = opts.ports.as_ref().map_or(0, |p| p[i]);
                TcpListener::bind(("127.0.0.1", port)).expect("bind")
            })
            .collect();
        let ports: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().expect("addr").port())
            .collect();
        let stats = Arc::new(Stats::default());
        let shared = Arc::new((ports.clone(), opts));
        for (node, listener) in listeners.into_iter().enumerate() {
            let (handler, stats, shared) = (
                Arc::clone(&handler),
                Arc::clone(&stats),
                Arc::clone(&shared),
            );
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { return };
                    stats.connections.fetch_add(1, Ordering::SeqCst);
                    let (handler, stats, shared) = (
                        Arc::clone(&handler),
                        Arc::clone(&stats),
                        Arc::clone(&shared),
                    );
                    std::thread::spawn(move || {
                        serve(stream, node, &shared.0, &shared.1, &*handler, &stats)
                    });
                }
            });
        }
        FakeCluster { ports, stats }
    }

    /// `127.0.0.1:<port of node 0>`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.ports[0])
    }

    /// Connections accepted so far (all nodes).
    pub fn connections(&self) -> usize {
        self.stats.connections.load(Ordering::SeqCst)
    }

    /// Connections closed for being idle so far.
    pub fn idle_closes(&self) -> usize {
        self.stats.idle_closes.load(Ordering::SeqCst)
    }

    /// Requests of API `key` received so far (all nodes).
    pub fn requests(&self, key: i16) -> usize {
        self.stats.requests[key as usize].load(Ordering::SeqCst)
    }
}

fn serve(
    mut s: TcpStream,
    node: usize,
    ports: &[u16],
    opts: &Options,
    handler: &Handler,
    stats: &Stats,
) {
    loop {
        // Waiting for the next request is where an idle connection is closed.
        let _ = s.set_read_timeout(opts.idle_close);
        let mut len = [0u8; 4];
        if let Err(e) = s.read_exact(&mut len) {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                stats.idle_closes.fetch_add(1, Ordering::SeqCst);
            }
            return;
        }
        let _ = s.set_read_timeout(None);
        let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
        if frame.len() < 8 || s.read_exact(&mut frame).is_err() {
            return;
        }
        let key = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let corr = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        if let Some(c) = stats.requests.get(key as usize) {
            c.fetch_add(1, Ordering::SeqCst);
        }
        let reply = if key == API_VERSIONS {
            Reply::Send(api_versions(version, corr, &opts.versions))
        } else {
            handler(&Request {
                key,
                version,
                corr,
                node,
                ports,
                frame: &frame,
            })
        };
        drop(frame);
        match reply {
            Reply::Send(bytes) => {
                if s.write_all(&bytes).is_err() {
                    return;
                }
            }
            Reply::SendAndClose(bytes) => {
                let _ = s.write_all(&bytes);
                return;
            }
            Reply::Close => return,
            Reply::Hang => std::thread::sleep(Duration::from_secs(3600)),
        }
    }
}

pub fn api_versions(version: i16, corr: i32, ranges: &[(i16, i16, i16)]) -> Vec<u8> {
    let resp = ApiVersionsResponse {
        error_code: 0,
        api_keys: ranges
            .iter()
            .map(|&(api_key, min_version, max_version)| ApiVersion {
                api_key,
                min_version,
                max_version,
            })
            .collect(),
        throttle_time_ms: 0,
    };
    encode_response::<ApiVersionsRequest>(&resp, version, corr)
}

/// One partition in a Metadata answer.
#[derive(Debug, Clone, Copy)]
pub struct PartitionMeta {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
}

/// A Metadata answer listing `brokers` (`(node id, port)`) and `topic` with `partitions`.
pub fn metadata(
    r: &Request<'_>,
    brokers: &[(i32, u16)],
    topic: &str,
    partitions: &[PartitionMeta],
) -> Vec<u8> {
    let resp = MetadataResponse {
        brokers: brokers
            .iter()
            .map(|&(node_id, port)| MetadataResponseBroker {
                node_id,
                host: "127.0.0.1".into(),
                port: port as i32,
                rack: None,
            })
            .collect(),
        controller_id: brokers.first().map_or(-1, |b| b.0),
        topics: vec![MetadataResponseTopic {
            name: Some(topic.into()),
            partitions: partitions
                .iter()
                .map(|p| MetadataResponsePartition {
                    partition_index: p.partition,
                    leader_id: p.leader,
                    leader_epoch: p.leader_epoch,
                    replica_nodes: vec![p.leader],
                    isr_nodes: vec![p.leader],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    };
    encode_response::<MetadataRequest>(&resp, r.version, r.corr)
}

/// Metadata for topic `t` with partitions `0..n`, all led by node 0 (epoch 0), listing
/// node 0 only.
pub fn simple_metadata(r: &Request<'_>, n: i32) -> Vec<u8> {
    let parts: Vec<PartitionMeta> = (0..n)
        .map(|p| PartitionMeta {
            partition: p,
            leader: 0,
            leader_epoch: 0,
        })
        .collect();
    metadata(r, &[(0, r.ports[0])], "t", &parts)
}

/// A ListOffsets answer: `answer(topic, partition, timestamp)` gives `(error, offset)`.
pub fn list_offsets(r: &Request<'_>, answer: impl Fn(&str, i32, i64) -> (i16, i64)) -> Vec<u8> {
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

/// A FindCoordinator answer (v0-v3): node 0 coordinates every group.
pub fn find_coordinator(r: &Request<'_>) -> Vec<u8> {
    find_coordinator_at(r, 0, r.ports[0])
}

/// A FindCoordinator answer (v0-v3) naming `node` at 127.0.0.1:`port`.
pub fn find_coordinator_at(r: &Request<'_>, node: i32, port: u16) -> Vec<u8> {
    let resp = FindCoordinatorResponse {
        node_id: node,
        host: "127.0.0.1".into(),
        port: port as i32,
        ..Default::default()
    };
    encode_response::<FindCoordinatorRequest>(&resp, r.version, r.corr)
}

/// An OffsetFetch answer (v1-v7): the group has committed nothing.
pub fn offset_fetch_nothing(r: &Request<'_>) -> Vec<u8> {
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

/// What a fetch answers for one partition.
#[derive(Debug, Clone, Default)]
pub struct PartitionAnswer {
    pub error: i16,
    pub high_watermark: i64,
    pub records: Vec<u8>,
    /// KIP-392 (v11+): fetch from this node instead (`None`: -1, no preference).
    pub preferred_read_replica: Option<i32>,
}

/// One partition asked for in a Fetch request.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

/// The partitions a Fetch request asks for, and its `max_wait_ms`.
pub fn fetch_wanted(r: &Request<'_>) -> (Vec<Wanted>, i32) {
    let req: FetchRequest = r.decode();
    let mut out = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            out.push(Wanted {
                topic: t.topic.clone(),
                partition: p.partition,
                offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
            });
        }
    }
    (out, req.max_wait_ms)
}

/// A Fetch answer: `answer` is asked about each partition of the request. When every
/// partition answers no error, no records and no preferred replica, the answer waits the
/// request's `max_wait_ms` first (capped at 1 s), as a broker's long poll does.
pub fn fetch(r: &Request<'_>, mut answer: impl FnMut(&Wanted) -> PartitionAnswer) -> Vec<u8> {
    let (wanted, max_wait) = fetch_wanted(r);
    let answers: Vec<(Wanted, PartitionAnswer)> = wanted
        .into_iter()
        .map(|w| {
            let a = answer(&w);
            (w, a)
        })
        .collect();
    if answers
        .iter()
        .all(|(_, a)| a.error == 0 && a.records.is_empty() && a.preferred_read_replica.is_none())
    {
        std::thread::sleep(Duration::from_millis(max_wait.clamp(0, 1000) as u64));
    }
    fetch_response(r.version, r.corr, &answers)
}

/// Encodes a Fetch response (v4 to v12) by hand: the crate's encoder never writes record
/// sets.
pub fn fetch_response(version: i16, corr: i32, parts: &[(Wanted, PartitionAnswer)]) -> Vec<u8> {
    assert!((4..=12).contains(&version), "fake fetch v{version}");
    let flex = version >= 12;
    let mut w = Writer::with_capacity(
        64 + parts
            .iter()
            .map(|(_, a)| a.records.len() + 64)
            .sum::<usize>(),
    );
    let at = w.reserve_i32();
    w.i32(corr);
    if flex {
        w.empty_tagged_fields();
    }
    w.i32(0); // throttle
    if version >= 7 {
        w.i16(0); // error
        w.i32(0); // session id: none
    }
    // Group by topic, in request order.
    let mut topics: Vec<(&str, Vec<&(Wanted, PartitionAnswer)>)> = Vec::new();
    for p in parts {
        match topics.iter_mut().find(|(t, _)| *t == p.0.topic) {
            Some((_, v)) => v.push(p),
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
            if version >= 5 {
                w.i64(0); // log start offset
            }
            w.array_len(None, flex); // aborted transactions: null
            if version >= 11 {
                w.i32(a.preferred_read_replica.unwrap_or(-1));
            }
            w.nullable_bytes(Some(&a.records), flex);
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
    let len = (w.len() - 4) as i32;
    w.patch_i32(at, len);
    w.into_inner()
}

/// A partition's log as whole batches: `(base offset, next offset, bytes)`.
#[derive(Debug, Clone, Default)]
pub struct Log {
    pub batches: Vec<(i64, i64, Vec<u8>)>,
}

impl Log {
    /// Appends `n` records with values `v<offset>`.
    pub fn append(&mut self, n: i32) -> &mut Log {
        let base = self.end();
        self.batches.push((base, base + n as i64, batch(base, n)));
        self
    }

    /// Appends a batch built elsewhere, holding offsets `base..next`.
    pub fn append_batch(&mut self, base: i64, next: i64, bytes: Vec<u8>) -> &mut Log {
        self.batches.push((base, next, bytes));
        self
    }

    /// The offset after the last record.
    pub fn end(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.1)
    }

    /// The batches a broker returns for a fetch at `offset`: every batch that ends after
    /// it, the first one whole, then as many as fit in `max_bytes` (KIP-74).
    pub fn read(&self, offset: i64, max_bytes: i32) -> Vec<u8> {
        let mut out = Vec::new();
        for (_, next, bytes) in &self.batches {
            if *next <= offset {
                continue;
            }
            if !out.is_empty() && out.len() + bytes.len() > max_bytes.max(0) as usize {
                break;
            }
            out.extend_from_slice(bytes);
        }
        out
    }

    /// The answer for a fetch at `w`.
    pub fn answer(&self, w: &Wanted) -> PartitionAnswer {
        PartitionAnswer {
            error: 0,
            high_watermark: self.end(),
            records: self.read(w.offset, w.max_bytes),
            preferred_read_replica: None,
        }
    }
}

/// A handler serving topic `t` with the given partition logs from node 0: Metadata,
/// ListOffsets (earliest 0, latest the end), Fetch (long polls when there is nothing), and
/// a group coordinator that has no committed offsets.
pub fn serve_logs(logs: Arc<HashMap<i32, Log>>) -> Arc<Handler> {
    Arc::new(move |r: &Request<'_>| match r.key {
        FIND_COORDINATOR => Reply::Send(find_coordinator(r)),
        OFFSET_FETCH => Reply::Send(offset_fetch_nothing(r)),
        METADATA => Reply::Send(simple_metadata(r, logs.len() as i32)),
        LIST_OFFSETS => Reply::Send(list_offsets(r, |_, p, ts| {
            let end = logs.get(&p).map_or(0, Log::end);
            (0, if ts == -1 { end } else { 0 })
        })),
        FETCH => Reply::Send(fetch(r, |w| {
            logs.get(&w.partition)
                .map_or_else(PartitionAnswer::default, |l| l.answer(w))
        })),
        _ => Reply::Close,
    })
}

/// `n` records at `base` with values `v<offset>`, uncompressed.
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

/// Compression codes of the batch attributes.
pub const GZIP: i16 = 1;
pub const SNAPPY: i16 = 2;
pub const ZSTD: i16 = 4;

/// A batch at `base` claiming `count` records whose records section is `section`,
/// compressed with `codec`; the CRC is valid.
pub fn compressed_batch(base: i64, count: i32, codec: i16, section: &[u8]) -> Vec<u8> {
    encode_batch(&BatchSpec {
        base_offset: base,
        attributes: codec,
        last_offset_delta: Some(count.max(1) - 1),
        records_section: Some(section),
        record_count: Some(count),
        ..BatchSpec::default()
    })
}

/// A zstd frame holding `data`, written by hand: runs of one byte become RLE blocks (so
/// megabytes of zeros take a few bytes), everything else raw blocks. No checksum.
pub fn zstd_frame(data: &[u8]) -> Vec<u8> {
    const MAX_BLOCK: usize = 128 * 1024;
    let mut blocks: Vec<(u8, usize, usize)> = Vec::new(); // (type, start, len)
    let mut i = 0;
    let mut raw_start = 0;
    while i < data.len() {
        let b = data[i];
        let mut j = i;
        while j < data.len() && data[j] == b && j - i < MAX_BLOCK {
            j += 1;
        }
        if j - i >= 32 {
            let mut s = raw_start;
            while s < i {
                let n = (i - s).min(MAX_BLOCK);
                blocks.push((0, s, n));
                s += n;
            }
            blocks.push((1, i, j - i));
            raw_start = j;
            i = j;
        } else {
            i += 1;
        }
    }
    let mut s = raw_start;
    while s < data.len() {
        let n = (data.len() - s).min(MAX_BLOCK);
        blocks.push((0, s, n));
        s += n;
    }
    let mut out = vec![0x28, 0xB5, 0x2F, 0xFD];
    out.push(0x00); // frame header descriptor: no content size, no checksum, not single-segment
    out.push(0x50); // window descriptor: 1 MiB
    if blocks.is_empty() {
        blocks.push((0, 0, 0));
    }
    let last = blocks.len() - 1;
    for (k, (kind, start, len)) in blocks.into_iter().enumerate() {
        let header = (k == last) as u32 | (kind as u32) << 1 | (len as u32) << 3;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        if kind == 1 {
            out.push(data[start]);
        } else {
            out.extend_from_slice(&data[start..start + len]);
        }
    }
    out
}

/// A zstd frame of `n` zero bytes (RLE blocks only: about 4 bytes per 128 KiB).
pub fn zstd_zeros(n: usize) -> Vec<u8> {
    const MAX_BLOCK: usize = 128 * 1024;
    let mut out = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x50];
    let mut left = n;
    while left > 0 {
        let len = left.min(MAX_BLOCK);
        left -= len;
        let header = (left == 0) as u32 | 1 << 1 | (len as u32) << 3;
        out.extend_from_slice(&header.to_le_bytes()[..3]);
        out.push(0);
    }
    out
}
