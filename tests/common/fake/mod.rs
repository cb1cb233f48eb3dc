//! A fake Kafka cluster on 127.0.0.1, for what a real broker will not do on demand:
//! hostile or malformed answers, partition errors, batches cut short, answers held back
//! or never sent, connections closed, brokers missing from the metadata, old or missing
//! API versions.
//!
//! What it offers:
//! - [`FakeCluster::start`]`(nodes, handler)` opens `nodes` listeners (node `i` answers on
//!   [`FakeCluster::port`]`(i)`); [`FakeCluster::with`] takes [`Options`]: fixed ports, the
//!   ApiVersions ranges ([`MODERN`] by default, [`OLD`] for non-flexible versions only, or
//!   the test's own), and an idle close as a broker's `connections.max.idle.ms`.
//! - ApiVersions is answered by the fake itself. Every other request goes to the handler
//!   as a [`Request`]: which node and connection got it, when, its frame, and
//!   `decode::<A>()` with the crate's own layouts. The handler returns a [`Reply`]: send,
//!   send after a delay, send then close, never answer, or close.
//! - Every request is recorded: [`FakeCluster::requests`], `requests_of(key)`,
//!   `count(key)`, `wait_until(limit, cond)`; `connections()` and `idle_closes()` count
//!   connections.
//! - Answer builders (`answers.rs`) for the version the client picked: Metadata,
//!   ListOffsets, Fetch v4-v12 (hand-encoded: records, errors, aborted transactions,
//!   preferred read replica, throttle; [`fetch_reply`] waits as a broker's long poll when
//!   there is nothing new), FindCoordinator, OffsetCommit, OffsetFetch.
//! - Partition contents (`log.rs`): a [`Log`] of batches answers fetches as a broker reads
//!   its log; [`serve_logs`] is a whole handler for topic `t`; [`batch`],
//!   [`compressed_batch`] and hand-written zstd frames ([`zstd_frame`], [`zstd_zeros`]).
//!
//! A test writes its handler as a `match` on the API key:
//!
//! ```ignore
//! let fake = FakeCluster::start(1, |r| match r.key {
//!     METADATA => Reply::Send(simple_metadata(r, 1)), // topic t, partition 0 on node 0
//!     LIST_OFFSETS => Reply::Send(list_offsets(r, |_, _, _| (0, 0))),
//!     FETCH => fetch_reply(r, |w| match w.offset {
//!         0 => FetchPart::records(3, batch(0, 3)),
//!         _ => FetchPart::empty(3),
//!     }),
//!     _ => Reply::Close,
//! });
//! let mut c = Consumer::new(ConsumerConfig::new(&fake.addr(0)))?;
//! // ... then assert on what the consumer did and on fake.requests_of(FETCH).
//! ```
//!
//! The listeners and connection threads live until the test process ends.
#![allow(dead_code)]

mod answers;
mod log;

pub use answers::*;
#[allow(unused_imports)] // by test binaries that use no fake
pub use log::*;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kafka_consumer::testing::api::api_versions::{
    ApiVersion, ApiVersionsRequest, ApiVersionsResponse,
};
use kafka_consumer::testing::api::Api;
use kafka_consumer::testing::frame::{decode_request, encode_response};

/// API keys.
pub const FETCH: i16 = 1;
pub const LIST_OFFSETS: i16 = 2;
pub const METADATA: i16 = 3;
pub const OFFSET_COMMIT: i16 = 8;
pub const OFFSET_FETCH: i16 = 9;
pub const FIND_COORDINATOR: i16 = 10;
pub const API_VERSIONS: i16 = 18;
pub const OFFSET_FOR_LEADER_EPOCH: i16 = 23;

/// What a current broker offers, capped where the fake's answers stop: Metadata v1-v13
/// (top-level error from v13), ListOffsets v1-v11, Fetch v4-v12 (flexible from v12; v13
/// replaces topic names with ids), FindCoordinator v0-v6, OffsetCommit v2-v9, OffsetFetch
/// v1-v7 (one group per request).
pub const MODERN: &[(i16, i16, i16)] = &[
    (API_VERSIONS, 0, 3),
    (METADATA, 1, 13),
    (LIST_OFFSETS, 1, 11),
    (FETCH, 4, 12),
    (FIND_COORDINATOR, 0, 6),
    (OFFSET_COMMIT, 2, 9),
    (OFFSET_FETCH, 1, 7),
];

/// Old, non-flexible versions only, for answers a test writes byte by byte: Metadata
/// v1-v8, ListOffsets v1-v5, Fetch v4-v7 (sessions, topic names).
pub const OLD: &[(i16, i16, i16)] = &[
    (API_VERSIONS, 0, 3),
    (METADATA, 1, 8),
    (LIST_OFFSETS, 1, 5),
    (FETCH, 4, 7),
];

/// How the fake cluster behaves, apart from its answers.
#[derive(Debug, Clone)]
pub struct Options {
    /// Listeners (node indexes 0..nodes).
    pub nodes: usize,
    /// Listen on these ports instead of free ones (one per node).
    pub ports: Option<Vec<u16>>,
    /// Close a connection that has sent no request for this long, as a broker does after
    /// `connections.max.idle.ms`.
    pub idle_close: Option<Duration>,
    /// ApiVersions ranges `(api key, min, max)`.
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
            .unwrap_or_else(|e| panic!("the fake cannot decode {} v{}: {e}", A::NAME, self.version))
            .2
    }
}

/// What a fake node does with a request.
pub enum Reply {
    Send(Vec<u8>),
    /// Wait, then send (the connection reads nothing meanwhile, as one broker thread).
    SendAfter(Duration, Vec<u8>),
    /// Send, then close the connection.
    SendAndClose(Vec<u8>),
    /// Never answer; the connection stays open until the client closes it.
    Hang,
    Close,
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

struct Inner {
    ports: Arc<Vec<u16>>,
    opts: Options,
    handler: Box<Handler>,
    requests: Mutex<Vec<Arc<Request>>>,
    grew: Condvar,
    connections: AtomicUsize,
    idle_closes: AtomicUsize,
}

/// Several fake nodes sharing one handler and one request log.
pub struct FakeCluster {
    inner: Arc<Inner>,
}

impl FakeCluster {
    /// `nodes` listeners on free ports advertising [`MODERN`] versions.
    pub fn start(
        nodes: usize,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Self::with(
            Options {
                nodes,
                ..Options::default()
            },
            handler,
        )
    }

    /// Listeners as `opts` says.
    pub fn with(
        opts: Options,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listeners: Vec<TcpListener> = (0..opts.nodes)
            .map(|i| {
                let port = opts.ports.as_ref().map_or(0, |p| p[i]);
                TcpListener::bind(("127.0.0.1", port)).expect("bind")
            })
            .collect();
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().expect("addr").port())
            .collect();
        let inner = Arc::new(Inner {
            ports: Arc::new(ports),
            opts,
            handler: Box::new(handler),
            requests: Mutex::new(Vec::new()),
            grew: Condvar::new(),
            connections: AtomicUsize::new(0),
            idle_closes: AtomicUsize::new(0),
        });
        for (node, listener) in listeners.into_iter().enumerate() {
            let inner = Arc::clone(&inner);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { return };
                    let conn = inner.connections.fetch_add(1, Ordering::SeqCst);
                    let inner = Arc::clone(&inner);
                    std::thread::spawn(move || serve(stream, node, conn, &inner));
                }
            });
        }
        FakeCluster { inner }
    }

    /// The port of node `node`.
    pub fn port(&self, node: usize) -> u16 {
        self.inner.ports[node]
    }

    /// `127.0.0.1:<port>` of node `node`.
    pub fn addr(&self, node: usize) -> String {
        format!("127.0.0.1:{}", self.port(node))
    }

    /// Every request received so far (ApiVersions included), in arrival order.
    pub fn requests(&self) -> Vec<Arc<Request>> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// The requests with API key `key`, in arrival order.
    pub fn requests_of(&self, key: i16) -> Vec<Arc<Request>> {
        let reqs = self.inner.requests.lock().unwrap();
        reqs.iter().filter(|r| r.key == key).cloned().collect()
    }

    /// How many requests with API key `key` arrived so far (all nodes).
    pub fn count(&self, key: i16) -> usize {
        let reqs = self.inner.requests.lock().unwrap();
        reqs.iter().filter(|r| r.key == key).count()
    }

    /// Connections accepted so far (all nodes).
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Connections closed for being idle so far ([`Options::idle_close`]).
    pub fn idle_closes(&self) -> usize {
        self.inner.idle_closes.load(Ordering::SeqCst)
    }

    /// Waits until `cond` holds for the requests received so far, or `limit` passes.
    pub fn wait_until(&self, limit: Duration, cond: impl Fn(&[Arc<Request>]) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut reqs = self.inner.requests.lock().unwrap();
        loop {
            if cond(&reqs) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            reqs = self
                .inner
                .grew
                .wait_timeout(reqs, deadline - now)
                .unwrap()
                .0;
        }
    }
}

fn serve(mut s: TcpStream, node: usize, conn: usize, inner: &Inner) {
    loop {
        // Waiting for the next request is where an idle connection is closed.
        let _ = s.set_read_timeout(inner.opts.idle_close);
        let mut len = [0u8; 4];
        if let Err(e) = s.read_exact(&mut len) {
            if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
                inner.idle_closes.fetch_add(1, Ordering::SeqCst);
            }
            return;
        }
        let _ = s.set_read_timeout(None);
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        if body.len() < 8 || s.read_exact(&mut body).is_err() {
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
            ports: Arc::clone(&inner.ports),
        });
        inner.requests.lock().unwrap().push(Arc::clone(&req));
        inner.grew.notify_all();
        let reply = if req.key == API_VERSIONS {
            Reply::Send(api_versions(&req, &inner.opts.versions))
        } else {
            (inner.handler)(&req)
        };
        let sent = match reply {
            Reply::Send(bytes) => s.write_all(&bytes),
            Reply::SendAfter(delay, bytes) => {
                std::thread::sleep(delay);
                s.write_all(&bytes)
            }
            Reply::SendAndClose(bytes) => {
                let _ = s.write_all(&bytes);
                return;
            }
            Reply::Close => return,
            Reply::Hang => {
                let mut sink = [0u8; 4096];
                while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
                return;
            }
        };
        if sent.is_err() {
            return;
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
