//! The I/O thread: one mio poll loop that owns every socket and timer.
//!
//! ```text
//!  user thread                          I/O thread
//!  Consumer ──Command──> channel ──> [drain commands]   <- mio::Waker
//!                                     [ready sockets] -> responses -> chunks
//!  poll() <──Event (Chunk/Error)──────[drive: metadata, connects, resets, lookups, fetches]
//! ```
//!
//! The loop never runs user code and never blocks on anything but `Poll::poll`.
//! Records go to the user as [`Chunk`]s; each carries the position epoch it was fetched
//! under so the user side can drop stale data at hand-off after a seek.

mod conn;

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use mio::{Events, Poll, Token, Waker};

use self::conn::{Conn, ConnState, InFlight, ReadOutcome};
use crate::buffer::{FrameBuf, Pool};
use crate::config::{parse_host_port, ConsumerConfig, OffsetReset};
use crate::error::{Error, ErrorKind, Result};
use crate::fetch::chunk::{build_chunk, position_chunk, PartitionInput};
use crate::fetch::session::{FetchSession, WantedPartition};
use crate::protocol::api::fetch::{FetchPartition, FetchRequest, FetchTopic, ForgottenTopic};
use crate::protocol::api::list_offsets::{
    self, ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use crate::protocol::api::metadata::{MetadataRequest, MetadataResponse};
use crate::protocol::api::Api;
use crate::protocol::error_code::ErrorCode;
use crate::protocol::frame::decode_response;
use crate::protocol::message::Uuid;
use crate::record::{Chunk, TopicPartition};

const WAKER: Token = Token(0);

/// Where a seek goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeekTo {
    Offset(i64),
    Beginning,
    End,
    /// Follow `auto.offset.reset` (the partition has no position yet).
    Default,
}

/// The answer to an offset lookup: per partition, the offset and timestamp found (None
/// when no record matches, as for a timestamp after the last record).
pub(crate) type LookupResult = Result<HashMap<TopicPartition, Option<(i64, i64)>>>;

/// What the user side asks of the I/O thread.
pub(crate) enum Command {
    /// Replace the assignment. Each partition comes with its position epoch and where to
    /// start (partitions already assigned keep their fetch state if the epoch is unchanged).
    Assign(Vec<(TopicPartition, u64, SeekTo)>),
    /// Move one partition's position; bumps its epoch.
    Seek(TopicPartition, u64, SeekTo),
    /// Stop fetching these partitions.
    Pause(Vec<TopicPartition>),
    /// Look up offsets by timestamp (or the special -1 latest / -2 earliest).
    Lookup {
        query: Vec<(TopicPartition, i64)>,
        deadline: Instant,
        reply: Sender<LookupResult>,
    },
    /// The partitions of a topic, from metadata.
    Partitions {
        topic: String,
        deadline: Instant,
        reply: Sender<Result<Vec<TopicPartition>>>,
    },
    /// Stop the thread.
    Shutdown,
}

/// What the I/O thread hands to the user side.
pub(crate) enum Event {
    /// Records (or just a position move) for one partition.
    Chunk(Chunk),
    /// An error for `poll` to return. `epoch` ties a partition error to a position epoch.
    Error(Error, Option<u64>),
    /// Wake a blocked `poll` (from [`WakeupHandle`](crate::WakeupHandle)).
    Wakeup,
}

/// State shared between the user side and the I/O thread.
pub(crate) struct Shared {
    /// Bytes fetched and not yet released by the user side.
    pub budget: Arc<AtomicUsize>,
    /// Set by the I/O thread when it skipped a fetch for lack of budget; the user side
    /// wakes it after releasing bytes.
    pub starved: AtomicBool,
    pub waker: Waker,
}

/// Handle to the running I/O thread.
pub(crate) struct IoHandle {
    pub commands: Sender<Command>,
    pub events: Receiver<Event>,
    pub events_tx: Sender<Event>,
    pub shared: Arc<Shared>,
    pub thread: Option<JoinHandle<()>>,
}

impl IoHandle {
    /// Sends a command and wakes the loop.
    pub fn send(&self, c: Command) -> Result<()> {
        self.commands.send(c).map_err(|_| Error::closed())?;
        self.shared
            .waker
            .wake()
            .map_err(|e| Error::io(e, "waking the I/O thread"))
    }
}

/// Starts the I/O thread.
pub(crate) fn spawn(cfg: ConsumerConfig) -> Result<IoHandle> {
    let poll = Poll::new().map_err(|e| Error::io(e, "creating the poll instance"))?;
    let waker =
        Waker::new(poll.registry(), WAKER).map_err(|e| Error::io(e, "creating the waker"))?;
    let shared = Arc::new(Shared {
        budget: Arc::new(AtomicUsize::new(0)),
        starved: AtomicBool::new(false),
        waker,
    });
    let (cmd_tx, cmd_rx) = crossbeam_channel::unbounded();
    let (ev_tx, ev_rx) = crossbeam_channel::unbounded();
    let bootstrap = cfg
        .bootstrap
        .iter()
        .map(|s| parse_host_port(s))
        .collect::<Result<Vec<_>>>()?;
    let mut io = IoLoop {
        poll,
        cmd_rx,
        ev_tx: ev_tx.clone(),
        shared: Arc::clone(&shared),
        conns: HashMap::new(),
        tokens: HashMap::new(),
        next_token: 1,
        bootstrap,
        next_bootstrap: 0,
        brokers: HashMap::new(),
        topics: HashMap::new(),
        topic_ids: HashMap::new(),
        metadata_in_flight: false,
        metadata_needed: true,
        metadata_at: None,
        metadata_retry_at: None,
        reported_unknown: HashSet::new(),
        parts: HashMap::new(),
        sessions: HashMap::new(),
        fetching: HashSet::new(),
        lookups: Vec::new(),
        next_lookup: 1,
        pool: Pool::new(),
        topic_waiters: Vec::new(),
        cfg,
    };
    let thread = std::thread::Builder::new()
        .name("kafka-consumer-io".into())
        .spawn(move || {
            if let Err(e) = io.run() {
                log::error!("I/O thread failed: {e}");
                let _ = io
                    .ev_tx
                    .send(Event::Error(Error::io(e, "the I/O thread failed"), None));
            }
        })
        .map_err(|e| Error::io(e, "starting the I/O thread"))?;
    Ok(IoHandle {
        commands: cmd_tx,
        events: ev_rx,
        events_tx: ev_tx,
        shared,
        thread: Some(thread),
    })
}

/// A `partitions_for` caller: topic, deadline, where to answer.
type TopicWaiter = (Arc<str>, Instant, Sender<Result<Vec<TopicPartition>>>);

/// The tag of an in-flight request: what to do with its answer.
#[derive(Debug)]
enum Req {
    ApiVersions,
    Metadata,
    Fetch(Vec<(TopicPartition, u64, i64)>),
    /// ListOffsets for position resets (`None`) or for a user lookup.
    ListOffsets(Option<u64>, Vec<(TopicPartition, u64, i64)>),
}

#[derive(Debug, Clone, Copy)]
struct PartMeta {
    leader: i32,
    leader_epoch: i32,
}

#[derive(Debug)]
struct TopicMeta {
    id: Uuid,
    partitions: HashMap<i32, PartMeta>,
}

#[derive(Debug)]
struct PartState {
    epoch: u64,
    /// Next offset to fetch; `None` until a reset resolves it.
    fetch_offset: Option<i64>,
    /// A pending ListOffsets (timestamp -1/-2) to find the position.
    reset: Option<i64>,
    paused: bool,
    in_flight: bool,
    retry_at: Option<Instant>,
    /// Leader epoch of the last batch fetched.
    last_epoch: i32,
}

struct Lookup {
    id: u64,
    want: HashMap<TopicPartition, i64>,
    results: HashMap<TopicPartition, Option<(i64, i64)>>,
    in_flight: HashSet<TopicPartition>,
    retry_at: Option<Instant>,
    deadline: Instant,
    reply: Sender<LookupResult>,
    failed: Option<Error>,
}

struct IoLoop {
    cfg: ConsumerConfig,
    poll: Poll,
    cmd_rx: Receiver<Command>,
    ev_tx: Sender<Event>,
    shared: Arc<Shared>,
    conns: HashMap<i32, Conn<Req>>,
    tokens: HashMap<Token, i32>,
    next_token: usize,
    /// Bootstrap servers get node ids -1, -2, ...
    bootstrap: Vec<(String, u16)>,
    next_bootstrap: usize,
    brokers: HashMap<i32, (String, u16)>,
    topics: HashMap<Arc<str>, TopicMeta>,
    topic_ids: HashMap<Uuid, Arc<str>>,
    metadata_in_flight: bool,
    metadata_needed: bool,
    metadata_at: Option<Instant>,
    metadata_retry_at: Option<Instant>,
    reported_unknown: HashSet<TopicPartition>,
    parts: HashMap<TopicPartition, PartState>,
    sessions: HashMap<i32, FetchSession>,
    fetching: HashSet<i32>,
    lookups: Vec<Lookup>,
    next_lookup: u64,
    pool: Pool,
    /// `partitions_for` callers waiting for metadata.
    topic_waiters: Vec<TopicWaiter>,
}

impl IoLoop {
    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        loop {
            let now = Instant::now();
            let timeout = self
                .next_wakeup(now)
                .map(|t| t.saturating_duration_since(now));
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            for ev in events.iter() {
                if ev.token() == WAKER {
                    continue;
                }
                let Some(&node) = self.tokens.get(&ev.token()) else {
                    continue;
                };
                let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                self.conn_ready(node, readable, ev.is_writable(), now);
            }
            loop {
                match self.cmd_rx.try_recv() {
                    Ok(Command::Shutdown) => return Ok(()),
                    Ok(c) => self.command(c),
                    Err(crossbeam_channel::TryRecvError::Empty) => break,
                    // The consumer was dropped without close().
                    Err(crossbeam_channel::TryRecvError::Disconnected) => return Ok(()),
                }
            }
            self.timeouts(now);
            self.drive(now);
            let registry = self.poll.registry();
            let mut broken = Vec::new();
            for (id, c) in self.conns.iter_mut() {
                if c.state != ConnState::Closed {
                    if let Err(e) = c.flush_and_update(registry) {
                        broken.push((*id, e));
                    }
                }
            }
            for (id, e) in broken {
                self.close_conn(id, &format!("write failed: {e}"), now);
            }
        }
    }

    // ----- commands --------------------------------------------------------------------

    fn command(&mut self, c: Command) {
        match c {
            Command::Assign(list) => {
                let keep: HashSet<&TopicPartition> = list.iter().map(|(tp, _, _)| tp).collect();
                self.parts.retain(|tp, _| keep.contains(tp));
                for (tp, epoch, to) in list {
                    match self.parts.get(&tp) {
                        Some(p) if p.epoch == epoch => {}
                        _ => {
                            let st = self.new_part_state(&tp, epoch, to);
                            self.parts.insert(tp, st);
                        }
                    }
                }
                self.reported_unknown
                    .retain(|tp| self.parts.contains_key(tp));
                self.metadata_needed = true;
            }
            Command::Seek(tp, epoch, to) => {
                let st = self.new_part_state(&tp, epoch, to);
                if let Some(p) = self.parts.get_mut(&tp) {
                    // An in-flight fetch for the old position is discarded by epoch.
                    *p = PartState {
                        in_flight: p.in_flight,
                        ..st
                    };
                }
            }
            Command::Pause(tps) => {
                for tp in tps {
                    if let Some(p) = self.parts.get_mut(&tp) {
                        p.paused = true;
                    }
                }
            }
            Command::Lookup {
                query,
                deadline,
                reply,
            } => {
                let id = self.next_lookup;
                self.next_lookup += 1;
                if query.is_empty() {
                    let _ = reply.send(Ok(HashMap::new()));
                    return;
                }
                self.lookups.push(Lookup {
                    id,
                    want: query.into_iter().collect(),
                    results: HashMap::new(),
                    in_flight: HashSet::new(),
                    retry_at: None,
                    deadline,
                    reply,
                    failed: None,
                });
                self.metadata_needed = true;
            }
            Command::Partitions {
                topic,
                deadline,
                reply,
            } => {
                self.topic_waiters
                    .push((Arc::from(topic.as_str()), deadline, reply));
                self.metadata_needed = true;
                self.metadata_retry_at = None;
            }
            Command::Shutdown => {}
        }
    }

    /// Answers `partitions_for` callers whose topic the last metadata answered for (or
    /// whose deadline passed). `unknown` lists topics the broker said do not exist.
    fn answer_topic_waiters(&mut self, unknown: &[(Arc<str>, ErrorCode)], now: Instant) {
        let topics = &self.topics;
        self.topic_waiters.retain(|(topic, deadline, reply)| {
            let answer = if let Some(t) = topics.get(topic) {
                let mut ps: Vec<i32> = t.partitions.keys().copied().collect();
                ps.sort_unstable();
                Ok(ps
                    .into_iter()
                    .map(|p| TopicPartition::new(Arc::clone(topic), p))
                    .collect())
            } else if let Some((_, code)) = unknown.iter().find(|(n, _)| n == topic) {
                Err(Error::broker(
                    *code,
                    format!("topic {topic} does not exist"),
                ))
            } else if now >= *deadline {
                Err(Error::timeout(format!(
                    "no metadata for topic {topic} in time"
                )))
            } else {
                return true;
            };
            let _ = reply.send(answer);
            false
        });
    }

    fn new_part_state(&self, tp: &TopicPartition, epoch: u64, to: SeekTo) -> PartState {
        let default_reset = match self.cfg.auto_offset_reset {
            OffsetReset::Earliest => Some(list_offsets::EARLIEST),
            OffsetReset::Latest => Some(list_offsets::LATEST),
            _ => None,
        };
        let (fetch_offset, reset) = match to {
            SeekTo::Offset(o) => (Some(o), None),
            SeekTo::Beginning => (None, Some(list_offsets::EARLIEST)),
            SeekTo::End => (None, Some(list_offsets::LATEST)),
            SeekTo::Default => (None, default_reset),
        };
        if fetch_offset.is_none() && reset.is_none() {
            // auto.offset.reset=none and no position: say so once; the user must seek.
            let _ = self.ev_tx.send(Event::Error(
                Error::new(
                    ErrorKind::NoOffset,
                    format!(
                        "partition {tp} has no position and auto.offset.reset is none; seek first"
                    ),
                )
                .with_partition(tp.clone()),
                Some(epoch),
            ));
        }
        PartState {
            epoch,
            fetch_offset,
            reset,
            paused: false,
            in_flight: false,
            retry_at: None,
            last_epoch: -1,
        }
    }

    // ----- connections -----------------------------------------------------------------

    fn conn_ready(&mut self, node: i32, readable: bool, writable: bool, now: Instant) {
        let deadline = now + self.cfg.request_timeout;
        let registry = self.poll.registry();
        let Some(conn) = self.conns.get_mut(&node) else {
            return;
        };
        if conn.state == ConnState::Closed {
            return;
        }
        match conn.ready(registry, readable, writable, || Req::ApiVersions, deadline) {
            Ok(outcomes) => {
                for ReadOutcome::Response { in_flight, body } in outcomes {
                    self.response(node, in_flight, body, now);
                }
            }
            Err(e) => self.close_conn(node, &e.to_string(), now),
        }
    }

    fn close_conn(&mut self, node: i32, why: &str, now: Instant) {
        let registry = self.poll.registry();
        let Some(conn) = self.conns.get_mut(&node) else {
            return;
        };
        if conn.state == ConnState::Closed {
            return;
        }
        log::warn!(
            "connection to node {node} ({}:{}) closed: {why}",
            conn.host,
            conn.port
        );
        let failed = conn.close(registry);
        conn.failures += 1;
        let backoff = backoff(
            self.cfg.reconnect_backoff,
            self.cfg.reconnect_backoff_max,
            conn.failures,
        );
        conn.retry_at = Some(now + backoff);
        if let Some(s) = self.sessions.get_mut(&node) {
            s.disconnected();
        }
        self.fetching.remove(&node);
        for f in failed {
            self.request_failed(f.kind, now);
        }
        self.metadata_needed = true;
    }

    /// A request that got no answer: release what it held so it is sent again.
    fn request_failed(&mut self, kind: Req, now: Instant) {
        match kind {
            Req::ApiVersions => {}
            Req::Metadata => {
                self.metadata_in_flight = false;
                self.metadata_retry_at = Some(now + self.cfg.retry_backoff);
            }
            Req::Fetch(list) => {
                for (tp, _, _) in list {
                    if let Some(p) = self.parts.get_mut(&tp) {
                        p.in_flight = false;
                    }
                }
            }
            Req::ListOffsets(lookup, list) => self.list_offsets_failed(lookup, &list, now),
        }
    }

    fn list_offsets_failed(
        &mut self,
        lookup: Option<u64>,
        list: &[(TopicPartition, u64, i64)],
        now: Instant,
    ) {
        let retry = now + self.cfg.retry_backoff;
        match lookup {
            None => {
                for (tp, _, _) in list {
                    if let Some(p) = self.parts.get_mut(tp) {
                        p.in_flight = false;
                        p.retry_at = Some(retry);
                    }
                }
            }
            Some(id) => {
                if let Some(l) = self.lookups.iter_mut().find(|l| l.id == id) {
                    for (tp, _, _) in list {
                        l.in_flight.remove(tp);
                    }
                    l.retry_at = Some(retry);
                }
            }
        }
    }

    /// The connection to `node` if it is ready; starts connecting if it is not.
    fn ready_conn(&mut self, node: i32, now: Instant) -> Option<&mut Conn<Req>> {
        if !self.conns.contains_key(&node) {
            let (host, port) = if node < 0 {
                self.bootstrap.get((-node - 1) as usize)?.clone()
            } else {
                self.brokers.get(&node)?.clone()
            };
            let token = Token(self.next_token);
            self.next_token += 1;
            self.tokens.insert(token, node);
            self.conns.insert(
                node,
                Conn::new(
                    node,
                    &host,
                    port,
                    token,
                    &self.cfg.client_id,
                    self.pool.clone(),
                ),
            );
        }
        let conn = self.conns.get_mut(&node)?;
        if conn.state == ConnState::Closed && conn.retry_at.is_none_or(|t| t <= now) {
            if node >= 0 {
                if let Some((h, p)) = self.brokers.get(&node) {
                    conn.host.clone_from(h);
                    conn.port = *p;
                }
            }
            if let Err(e) = conn.connect(self.poll.registry(), now) {
                conn.failures += 1;
                let b = backoff(
                    self.cfg.reconnect_backoff,
                    self.cfg.reconnect_backoff_max,
                    conn.failures,
                );
                log::warn!(
                    "cannot connect to node {node} ({}:{}): {e}",
                    conn.host,
                    conn.port
                );
                conn.retry_at = Some(now + b);
                return None;
            }
        }
        let conn = self.conns.get_mut(&node)?;
        conn.is_ready().then_some(conn)
    }

    // ----- responses -------------------------------------------------------------------

    fn response(&mut self, node: i32, f: InFlight<Req>, body: FrameBuf, now: Instant) {
        match f.kind {
            Req::ApiVersions => {
                let deadline = now + self.cfg.request_timeout;
                if let Some(conn) = self.conns.get_mut(&node) {
                    if let Err(e) =
                        conn.handle_api_versions(&body, f.version, Req::ApiVersions, deadline)
                    {
                        self.close_conn(node, &e, now);
                    }
                }
            }
            Req::Metadata => {
                self.metadata_in_flight = false;
                match decode_response::<MetadataRequest>(&body, f.version) {
                    Ok(resp) => self.metadata(resp, now),
                    Err(e) => {
                        log::warn!("malformed Metadata response from node {node}: {e}");
                        // Callers waiting on metadata learn why, instead of timing out.
                        let err = Error::decode(
                            e,
                            format!("malformed Metadata response from node {node}"),
                        );
                        for (_, _, reply) in self.topic_waiters.drain(..) {
                            let _ = reply.send(Err(err.clone()));
                        }
                        for l in &mut self.lookups {
                            l.failed.get_or_insert_with(|| err.clone());
                        }
                        self.finish_lookups(now);
                        self.close_conn(node, "malformed response", now);
                    }
                }
            }
            Req::Fetch(list) => {
                self.fetching.remove(&node);
                for (tp, _, _) in &list {
                    if let Some(p) = self.parts.get_mut(tp) {
                        p.in_flight = false;
                    }
                }
                self.fetch_response(node, f.version, body, list, now);
            }
            Req::ListOffsets(lookup, list) => {
                match decode_response::<ListOffsetsRequest>(&body, f.version) {
                    Ok(resp) => {
                        let mut answers = HashMap::new();
                        for t in resp.topics {
                            for p in t.partitions {
                                answers.insert(
                                    (t.name.clone(), p.partition_index),
                                    (ErrorCode::from_code(p.error_code), p.offset, p.timestamp),
                                );
                            }
                        }
                        self.list_offsets_response(lookup, list, answers, now);
                    }
                    Err(e) => {
                        log::warn!("malformed ListOffsets response from node {node}: {e}");
                        self.list_offsets_failed(lookup, &list, now);
                        self.close_conn(node, "malformed response", now);
                    }
                }
            }
        }
    }

    fn metadata(&mut self, resp: MetadataResponse, now: Instant) {
        self.metadata_at = Some(now);
        self.metadata_needed = false;
        self.metadata_retry_at = None;
        for b in &resp.brokers {
            let Ok(port) = u16::try_from(b.port) else {
                log::warn!("broker {} has an invalid port {}", b.node_id, b.port);
                continue;
            };
            let addr = (b.host.clone(), port);
            if self.brokers.get(&b.node_id) != Some(&addr) {
                log::debug!("broker {} at {}:{}", b.node_id, b.host, port);
                self.brokers.insert(b.node_id, addr);
            }
        }
        let mut unknown_topics = Vec::new();
        for t in resp.topics {
            let Some(name) = t.name else { continue };
            let name: Arc<str> = Arc::from(name.as_str());
            let code = ErrorCode::from_code(t.error_code);
            if code.is_err() {
                self.topics.remove(&name);
                if matches!(
                    code,
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                        | ErrorCode::INVALID_TOPIC_EXCEPTION
                        | ErrorCode::TOPIC_AUTHORIZATION_FAILED
                ) {
                    unknown_topics.push((name, code));
                } else {
                    // LEADER_NOT_AVAILABLE and friends: try again shortly.
                    self.metadata_needed = true;
                    self.metadata_retry_at = Some(now + self.cfg.retry_backoff);
                }
                continue;
            }
            let mut partitions = HashMap::new();
            for p in t.partitions {
                if p.leader_id < 0 {
                    self.metadata_needed = true;
                    self.metadata_retry_at = Some(now + self.cfg.retry_backoff);
                }
                partitions.insert(
                    p.partition_index,
                    PartMeta {
                        leader: p.leader_id,
                        leader_epoch: p.leader_epoch,
                    },
                );
            }
            if !t.topic_id.is_zero() {
                self.topic_ids.insert(t.topic_id, Arc::clone(&name));
            }
            self.topics.insert(
                name,
                TopicMeta {
                    id: t.topic_id,
                    partitions,
                },
            );
        }
        // Assigned partitions that do not exist: tell the user once, keep retrying quietly
        // (the topic may be created later), as the Java client does.
        let mut missing: Vec<(TopicPartition, ErrorCode)> = Vec::new();
        for tp in self.parts.keys() {
            let code = match self.topics.get(tp.topic()) {
                Some(t) if t.partitions.contains_key(&tp.partition()) => continue,
                Some(_) => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                None => match unknown_topics.iter().find(|(n, _)| **n == *tp.topic()) {
                    Some((_, c)) => *c,
                    None => continue,
                },
            };
            missing.push((tp.clone(), code));
        }
        for (tp, code) in missing {
            if self.reported_unknown.insert(tp.clone()) {
                let epoch = self.parts.get(&tp).map(|p| p.epoch);
                let e = Error::broker(code, format!("partition {tp} is not available"))
                    .with_partition(tp);
                let _ = self.ev_tx.send(Event::Error(e, epoch));
            }
            self.metadata_retry_at =
                Some(now + self.cfg.retry_backoff.max(Duration::from_millis(500)));
            self.metadata_needed = true;
        }
        // Lookups for partitions that do not exist fail now rather than at their deadline.
        for l in &mut self.lookups {
            for tp in l.want.keys() {
                let exists = self
                    .topics
                    .get(tp.topic())
                    .is_some_and(|t| t.partitions.contains_key(&tp.partition()));
                let known_missing = self.topics.contains_key(tp.topic())
                    || unknown_topics.iter().any(|(n, _)| **n == *tp.topic());
                if !exists && known_missing && l.failed.is_none() {
                    let code = unknown_topics
                        .iter()
                        .find(|(n, _)| **n == *tp.topic())
                        .map_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, |(_, c)| *c);
                    l.failed = Some(
                        Error::broker(code, format!("partition {tp} does not exist"))
                            .with_partition(tp.clone()),
                    );
                }
            }
        }
        self.finish_lookups(now);
        self.answer_topic_waiters(&unknown_topics, now);
    }

    fn fetch_response(
        &mut self,
        node: i32,
        version: i16,
        body: FrameBuf,
        sent: Vec<(TopicPartition, u64, i64)>,
        now: Instant,
    ) {
        let resp = match decode_response::<FetchRequest>(&body, version) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("malformed Fetch response from node {node}: {e}");
                let _ = self.ev_tx.send(Event::Error(
                    Error::decode(e, format!("malformed Fetch response from node {node}")),
                    None,
                ));
                self.close_conn(node, "malformed response", now);
                return;
            }
        };
        let top = ErrorCode::from_code(resp.error_code);
        if let Some(s) = self.sessions.get_mut(&node) {
            s.handle_response(top, resp.session_id);
        }
        if top.is_err() {
            if !matches!(
                top,
                ErrorCode::FETCH_SESSION_ID_NOT_FOUND
                    | ErrorCode::INVALID_FETCH_SESSION_EPOCH
                    | ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR
            ) {
                log::warn!("fetch from node {node} failed: {top}");
                for (tp, _, _) in &sent {
                    if let Some(p) = self.parts.get_mut(tp) {
                        p.retry_at = Some(now + self.cfg.retry_backoff);
                    }
                }
            }
            return;
        }
        let sent: HashMap<TopicPartition, (u64, i64)> =
            sent.into_iter().map(|(tp, e, o)| (tp, (e, o))).collect();
        let frame = Arc::new(body);
        for t in &resp.responses {
            let name: Arc<str> = if version >= 13 {
                match self.topic_ids.get(&t.topic_id) {
                    Some(n) => Arc::clone(n),
                    None => continue,
                }
            } else {
                Arc::from(t.topic.as_str())
            };
            for p in &t.partitions {
                let tp = TopicPartition::new(Arc::clone(&name), p.partition_index);
                let Some(&(epoch, offset)) = sent.get(&tp) else {
                    continue;
                };
                let Some(st) = self.parts.get_mut(&tp) else {
                    continue;
                };
                // Stale: the partition was seeked (or re-assigned) while this was in flight.
                if st.epoch != epoch || st.fetch_offset != Some(offset) {
                    continue;
                }
                let code = ErrorCode::from_code(p.error_code);
                match code {
                    ErrorCode::None => {
                        if p.records.len == 0 {
                            continue;
                        }
                        let aborted = p
                            .aborted_transactions
                            .as_ref()
                            .map(|a| a.iter().map(|x| (x.producer_id, x.first_offset)).collect());
                        let (chunk, err) = build_chunk(
                            PartitionInput {
                                tp: tp.clone(),
                                epoch,
                                fetch_offset: offset,
                                frame: &frame,
                                records: (p.records.start, p.records.len),
                                aborted,
                                check_crcs: self.cfg.check_crcs,
                            },
                            &self.shared.budget,
                        );
                        if let Some(c) = chunk {
                            st.fetch_offset = Some(c.next_offset);
                            if c.last_epoch >= 0 {
                                st.last_epoch = c.last_epoch;
                            }
                            let _ = self.ev_tx.send(Event::Chunk(c));
                        }
                        if let Some(e) = err {
                            log::warn!("partition {tp}: {e}");
                            st.retry_at = Some(now + self.cfg.retry_backoff);
                            let _ = self
                                .ev_tx
                                .send(Event::Error(Error::records(e, &tp), Some(epoch)));
                        }
                    }
                    ErrorCode::OFFSET_OUT_OF_RANGE => {
                        let reset = match self.cfg.auto_offset_reset {
                            OffsetReset::Earliest => Some(list_offsets::EARLIEST),
                            OffsetReset::Latest => Some(list_offsets::LATEST),
                            _ => None,
                        };
                        match reset {
                            Some(ts) => {
                                log::info!(
                                    "partition {tp}: offset {offset} out of range, resetting"
                                );
                                st.reset = Some(ts);
                            }
                            None => {
                                st.retry_at = Some(now + self.cfg.retry_backoff);
                                let e = Error::broker(
                                    code,
                                    format!("partition {tp}: offset {offset} is out of range and auto.offset.reset is none"),
                                )
                                .with_partition(tp.clone());
                                let _ = self.ev_tx.send(Event::Error(e, Some(epoch)));
                            }
                        }
                    }
                    c => {
                        log::debug!("partition {tp}: fetch error {c}");
                        st.retry_at = Some(now + self.cfg.retry_backoff);
                        if c.needs_metadata_refresh() {
                            self.metadata_needed = true;
                        } else if !c.is_retriable() {
                            let e = Error::broker(c, format!("fetching partition {tp}"))
                                .with_partition(tp.clone());
                            let _ = self.ev_tx.send(Event::Error(e, Some(epoch)));
                        }
                    }
                }
            }
        }
    }

    fn list_offsets_response(
        &mut self,
        lookup: Option<u64>,
        list: Vec<(TopicPartition, u64, i64)>,
        answers: HashMap<(String, i32), (ErrorCode, i64, i64)>,
        now: Instant,
    ) {
        for (tp, epoch, ts) in list {
            let answer = answers
                .get(&(tp.topic().to_owned(), tp.partition()))
                .copied();
            let (code, offset, timestamp) =
                answer.unwrap_or((ErrorCode::UNKNOWN_SERVER_ERROR, -1, -1));
            match lookup {
                None => {
                    let Some(st) = self.parts.get_mut(&tp) else {
                        continue;
                    };
                    st.in_flight = false;
                    if st.epoch != epoch || st.reset != Some(ts) {
                        continue;
                    }
                    if code.is_err() {
                        st.retry_at = Some(now + self.cfg.retry_backoff);
                        if code.needs_metadata_refresh() {
                            self.metadata_needed = true;
                        }
                        log::debug!("partition {tp}: ListOffsets error {code}");
                        continue;
                    }
                    let from = st.fetch_offset.unwrap_or(offset);
                    st.fetch_offset = Some(offset);
                    st.reset = None;
                    log::debug!("partition {tp}: position reset to {offset}");
                    let c = position_chunk(tp, epoch, from, offset, &self.shared.budget);
                    let _ = self.ev_tx.send(Event::Chunk(c));
                }
                Some(id) => {
                    let retry = now + self.cfg.retry_backoff;
                    let Some(l) = self.lookups.iter_mut().find(|l| l.id == id) else {
                        continue;
                    };
                    l.in_flight.remove(&tp);
                    if code.is_err() {
                        if code.is_retriable() || code.needs_metadata_refresh() {
                            l.retry_at = Some(retry);
                            self.metadata_needed |= code.needs_metadata_refresh();
                        } else if l.failed.is_none() {
                            l.failed = Some(
                                Error::broker(code, format!("listing offsets of {tp}"))
                                    .with_partition(tp.clone()),
                            );
                        }
                        continue;
                    }
                    let found = (offset >= 0).then_some((offset, timestamp));
                    l.results.insert(tp, found);
                }
            }
        }
        self.finish_lookups(now);
    }

    fn finish_lookups(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.lookups.len() {
            let l = &mut self.lookups[i];
            let done = l.results.len() == l.want.len();
            if let Some(e) = l.failed.take() {
                let _ = l.reply.send(Err(e));
            } else if done {
                let _ = l.reply.send(Ok(std::mem::take(&mut l.results)));
            } else if now >= l.deadline {
                let _ = l.reply.send(Err(Error::timeout(format!(
                    "listing offsets timed out ({} of {} partitions answered)",
                    l.results.len(),
                    l.want.len()
                ))));
            } else {
                i += 1;
                continue;
            }
            self.lookups.swap_remove(i);
        }
    }

    // ----- timers ----------------------------------------------------------------------

    fn timeouts(&mut self, now: Instant) {
        let mut expired = Vec::new();
        for (id, c) in &self.conns {
            let timed_out = match c.state {
                ConnState::Connecting => {
                    now >= c.connect_started() + self.cfg.connection_setup_timeout
                }
                ConnState::Closed => false,
                _ => c.next_deadline().is_some_and(|d| now >= d),
            };
            if timed_out {
                expired.push(*id);
            }
        }
        for id in expired {
            self.close_conn(id, "request or connection setup timed out", now);
        }
        self.finish_lookups(now);
        self.answer_topic_waiters(&[], now);
        if self
            .metadata_at
            .is_some_and(|t| now >= t + self.cfg.metadata_max_age)
        {
            self.metadata_needed = true;
        }
    }

    fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        for c in self.conns.values() {
            match c.state {
                ConnState::Connecting => {
                    at(c.connect_started() + self.cfg.connection_setup_timeout)
                }
                ConnState::Closed => {
                    if let Some(r) = c.retry_at {
                        at(r);
                    }
                }
                _ => {
                    if let Some(d) = c.next_deadline() {
                        at(d);
                    }
                }
            }
        }
        for p in self.parts.values() {
            if let Some(r) = p.retry_at {
                at(r);
            }
        }
        for (_, d, _) in &self.topic_waiters {
            at(*d);
        }
        for l in &self.lookups {
            at(l.deadline);
            if let Some(r) = l.retry_at {
                at(r);
            }
        }
        if let Some(r) = self.metadata_retry_at {
            at(r);
        }
        if let Some(m) = self.metadata_at {
            at(m + self.cfg.metadata_max_age);
        }
        if self.shared.starved.load(Ordering::Acquire) {
            // The user side wakes us when it frees budget; poll now and then regardless.
            at(now + Duration::from_millis(100));
        }
        t.map(|t| t.max(now))
    }

    // ----- sending ---------------------------------------------------------------------

    fn drive(&mut self, now: Instant) {
        self.drive_metadata(now);
        self.drive_list_offsets(now);
        self.drive_fetches(now);
    }

    fn drive_metadata(&mut self, now: Instant) {
        if self.metadata_in_flight
            || !self.metadata_needed
            || self.metadata_retry_at.is_some_and(|t| now < t)
        {
            return;
        }
        let mut topics: Vec<Arc<str>> = self
            .parts
            .keys()
            .map(|tp| Arc::clone(tp.topic_arc()))
            .chain(
                self.lookups
                    .iter()
                    .flat_map(|l| l.want.keys().map(|tp| Arc::clone(tp.topic_arc()))),
            )
            .chain(self.topic_waiters.iter().map(|(t, _, _)| Arc::clone(t)))
            .collect();
        topics.sort();
        topics.dedup();
        let node = self.metadata_node(now);
        let Some(node) = node else { return };
        let deadline = now + self.cfg.request_timeout;
        let Some(conn) = self.ready_conn(node, now) else {
            return;
        };
        let Some(v) = conn.version::<MetadataRequest>() else {
            log::error!("node {node} supports no Metadata version we speak");
            return;
        };
        let mut req = MetadataRequest::for_topics(topics.iter().map(|t| t.to_string()));
        req.allow_auto_topic_creation = false;
        conn.send(&req, v, Req::Metadata, deadline);
        self.metadata_in_flight = true;
    }

    /// A node to ask for metadata: a ready one if any, else the next broker or bootstrap
    /// server to try.
    fn metadata_node(&mut self, now: Instant) -> Option<i32> {
        if let Some((id, _)) = self.conns.iter().find(|(_, c)| c.is_ready()) {
            return Some(*id);
        }
        if let Some((id, _)) = self
            .conns
            .iter()
            .find(|(_, c)| matches!(c.state, ConnState::Connecting | ConnState::Negotiating))
        {
            return Some(*id);
        }
        // Nothing is connecting: start on the next candidate whose backoff has passed.
        let mut candidates: Vec<i32> = self.brokers.keys().copied().collect();
        candidates.sort();
        candidates.extend((0..self.bootstrap.len()).map(|i| -(i as i32) - 1));
        let n = candidates.len();
        for k in 0..n {
            let id = candidates[(self.next_bootstrap + k) % n];
            let ok = self
                .conns
                .get(&id)
                .is_none_or(|c| c.retry_at.is_none_or(|t| t <= now));
            if ok {
                self.next_bootstrap = (self.next_bootstrap + k + 1) % n;
                return Some(id);
            }
        }
        None
    }

    fn leader_of(&self, tp: &TopicPartition) -> Option<(i32, i32)> {
        let t = self.topics.get(tp.topic())?;
        let p = t.partitions.get(&tp.partition())?;
        (p.leader >= 0).then_some((p.leader, p.leader_epoch))
    }

    fn drive_list_offsets(&mut self, now: Instant) {
        // Position resets.
        let mut by_node: HashMap<i32, Vec<(TopicPartition, u64, i64, i32)>> = HashMap::new();
        for (tp, p) in &self.parts {
            let Some(ts) = p.reset else { continue };
            if p.in_flight || p.paused || p.retry_at.is_some_and(|t| now < t) {
                continue;
            }
            if let Some((leader, le)) = self.leader_of(tp) {
                by_node
                    .entry(leader)
                    .or_default()
                    .push((tp.clone(), p.epoch, ts, le));
            }
        }
        for (node, list) in by_node {
            if self.send_list_offsets(node, None, &list, now) {
                for (tp, _, _, _) in &list {
                    if let Some(p) = self.parts.get_mut(tp) {
                        p.in_flight = true;
                        p.retry_at = None;
                    }
                }
            }
        }
        // User lookups.
        for i in 0..self.lookups.len() {
            let l = &self.lookups[i];
            if l.retry_at.is_some_and(|t| now < t) {
                continue;
            }
            let mut by_node: HashMap<i32, Vec<(TopicPartition, u64, i64, i32)>> = HashMap::new();
            for (tp, ts) in &l.want {
                if l.results.contains_key(tp) || l.in_flight.contains(tp) {
                    continue;
                }
                if let Some((leader, le)) = self.leader_of(tp) {
                    by_node
                        .entry(leader)
                        .or_default()
                        .push((tp.clone(), 0, *ts, le));
                } else {
                    self.metadata_needed = true;
                }
            }
            let id = l.id;
            for (node, list) in by_node {
                if self.send_list_offsets(node, Some(id), &list, now) {
                    let l = &mut self.lookups[i];
                    l.retry_at = None;
                    for (tp, _, _, _) in list {
                        l.in_flight.insert(tp);
                    }
                }
            }
        }
    }

    fn send_list_offsets(
        &mut self,
        node: i32,
        lookup: Option<u64>,
        list: &[(TopicPartition, u64, i64, i32)],
        now: Instant,
    ) -> bool {
        let isolation = self.cfg.isolation_level.wire();
        let deadline = now + self.cfg.request_timeout;
        let timeout_ms = self.cfg.request_timeout.as_millis().min(i32::MAX as u128) as i32;
        let Some(conn) = self.ready_conn(node, now) else {
            return false;
        };
        let Some(v) = conn.version::<ListOffsetsRequest>() else {
            return false;
        };
        let need = list
            .iter()
            .map(|(_, _, ts, _)| list_offsets::min_version(*ts, isolation))
            .max()
            .unwrap_or(ListOffsetsRequest::MIN_VERSION);
        if v < need {
            return false;
        }
        let mut topics: Vec<ListOffsetsTopic> = Vec::new();
        for (tp, _, ts, le) in list {
            let part = ListOffsetsPartition {
                partition_index: tp.partition(),
                current_leader_epoch: *le,
                timestamp: *ts,
            };
            match topics.iter_mut().find(|t| t.name == tp.topic()) {
                Some(t) => t.partitions.push(part),
                None => topics.push(ListOffsetsTopic {
                    name: tp.topic().to_owned(),
                    partitions: vec![part],
                }),
            }
        }
        let mut req = ListOffsetsRequest::for_consumer(isolation);
        req.topics = topics;
        req.timeout_ms = timeout_ms;
        let tag: Vec<(TopicPartition, u64, i64)> = list
            .iter()
            .map(|(tp, e, ts, _)| (tp.clone(), *e, *ts))
            .collect();
        conn.send(&req, v, Req::ListOffsets(lookup, tag), deadline);
        true
    }

    fn drive_fetches(&mut self, now: Instant) {
        let used = self.shared.budget.load(Ordering::Acquire);
        if used >= self.cfg.fetch_buffer_bytes {
            self.shared.starved.store(true, Ordering::Release);
            // Re-check: the user may have freed budget between the load and the store.
            if self.shared.budget.load(Ordering::Acquire) >= self.cfg.fetch_buffer_bytes {
                return;
            }
        }
        self.shared.starved.store(false, Ordering::Release);
        let room = self.cfg.fetch_buffer_bytes.saturating_sub(used);
        let mut by_node: HashMap<i32, Vec<WantedPartition>> = HashMap::new();
        for (tp, p) in &self.parts {
            let Some(offset) = p.fetch_offset else {
                continue;
            };
            if p.reset.is_some() || p.paused || p.in_flight || p.retry_at.is_some_and(|t| now < t) {
                continue;
            }
            let Some((leader, le)) = self.leader_of(tp) else {
                continue;
            };
            let topic_id = self.topics.get(tp.topic()).map_or(Uuid::ZERO, |t| t.id);
            by_node.entry(leader).or_default().push(WantedPartition {
                tp: tp.clone(),
                topic_id,
                fetch_offset: offset,
                current_leader_epoch: le,
                max_bytes: self.cfg.max_partition_fetch_bytes,
            });
        }
        for (node, mut wanted) in by_node {
            if self.fetching.contains(&node) {
                continue;
            }
            // Rotate for fairness: the broker fills partitions in request order.
            wanted.sort_by(|a, b| a.tp.cmp(&b.tp));
            let deadline = now + self.cfg.request_timeout + self.cfg.fetch_max_wait;
            let cfg = &self.cfg;
            let isolation = cfg.isolation_level.wire();
            let (max_wait, min_bytes) = (
                cfg.fetch_max_wait.as_millis().min(i32::MAX as u128) as i32,
                cfg.fetch_min_bytes,
            );
            let max_bytes = cfg
                .fetch_max_bytes
                .min(room.min(i32::MAX as usize) as i32)
                .max(1);
            let rack = cfg.client_rack.clone();
            let Some(v) = self
                .ready_conn(node, now)
                .map(|conn| conn.version::<FetchRequest>())
            else {
                continue;
            };
            let Some(v) = v else {
                log::error!("node {node} supports no Fetch version we speak");
                continue;
            };
            let ids_known = wanted.iter().all(|w| !w.topic_id.is_zero());
            let v = if ids_known { v } else { v.min(12) };
            let use_ids = v >= 13;
            let session = self.sessions.entry(node).or_default();
            let sent: Vec<(TopicPartition, u64, i64)> = wanted
                .iter()
                .map(|w| {
                    (
                        w.tp.clone(),
                        self.parts.get(&w.tp).map_or(0, |p| p.epoch),
                        w.fetch_offset,
                    )
                })
                .collect();
            let plan = session.plan(wanted, v >= 7, use_ids);
            let mut topics: Vec<FetchTopic> = Vec::new();
            for w in &plan.partitions {
                let part = FetchPartition {
                    partition: w.tp.partition(),
                    current_leader_epoch: w.current_leader_epoch,
                    fetch_offset: w.fetch_offset,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: w.max_bytes,
                };
                match topics.last_mut() {
                    Some(t) if t.topic == w.tp.topic() => t.partitions.push(part),
                    _ => topics.push(FetchTopic {
                        topic: w.tp.topic().to_owned(),
                        topic_id: w.topic_id,
                        partitions: vec![part],
                    }),
                }
            }
            let mut forgotten: Vec<ForgottenTopic> = Vec::new();
            for (tp, id) in &plan.forgotten {
                match forgotten.last_mut() {
                    Some(t) if t.topic == tp.topic() => t.partitions.push(tp.partition()),
                    _ => forgotten.push(ForgottenTopic {
                        topic: tp.topic().to_owned(),
                        topic_id: *id,
                        partitions: vec![tp.partition()],
                    }),
                }
            }
            let req = FetchRequest {
                replica_id: -1,
                max_wait_ms: max_wait,
                min_bytes,
                max_bytes,
                isolation_level: isolation,
                session_id: plan.session_id,
                session_epoch: plan.session_epoch,
                topics,
                forgotten_topics_data: forgotten,
                rack_id: rack,
            };
            let Some(conn) = self.conns.get_mut(&node) else {
                continue;
            };
            conn.send(&req, v, Req::Fetch(sent.clone()), deadline);
            self.fetching.insert(node);
            for (tp, _, _) in &sent {
                if let Some(p) = self.parts.get_mut(tp) {
                    p.in_flight = true;
                }
            }
        }
    }
}

/// Exponential backoff with ±20% jitter, capped.
fn backoff(initial: Duration, max: Duration, failures: u32) -> Duration {
    let exp = initial.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    let base = exp.min(max);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let jitter = 0.8 + f64::from(nanos % 400) / 1000.0;
    base.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_with_jitter_and_is_capped() {
        let (i, m) = (Duration::from_millis(50), Duration::from_millis(1000));
        for f in 1..20 {
            let b = backoff(i, m, f);
            let base = (i * (1 << (f - 1).min(16))).min(m);
            assert!(
                b >= base.mul_f64(0.79) && b <= base.mul_f64(1.21),
                "{f}: {b:?}"
            );
        }
    }
}
