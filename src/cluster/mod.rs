//! The cluster as the consumer knows it: brokers with their addresses and racks, topics,
//! topic ids, partition leaders, leader epochs and replicas, and the policy that keeps this
//! metadata fresh.
//! Sans-IO: time is a parameter, requests go out as [`Transmit`]s.
//!
//! ```text
//!   Fresh ──max age / request_update()──▶ Needed ──a link is ready──▶ InFlight
//!     ▲                                      ▲                            │
//!     └────────────── answer applied ────────┴──── failure or top error ──┘
//! ```
//!
//! Invariants:
//! 1. At most one Metadata request is in flight.
//! 2. Two requests are never closer together than a spacing that starts at `retry.backoff.ms`
//!    and doubles (up to `retry.backoff.max.ms`) while refreshes keep being asked for in
//!    quick succession; `metadata.max.age.ms=0` or a partition that keeps failing can never
//!    make the consumer refresh in a loop.
//! 3. The topics asked for are the union of every registered interest; a topic that
//!    becomes interesting and is not yet known triggers a refresh.
//! 4. Only answers to the request in flight are applied; a broker's address or a leader is
//!    only reported when the answer listed it (a leader missing from the broker list counts
//!    as unknown, and asks for a refresh).
//! 5. [`Cluster::poll_timeout`] never returns a passed instant.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::{Backoff, Jitter};
use crate::error::{Error, Result};
use crate::link::{Failure, Lane, LinkState, Links, Owner, Peer, Route, Tag, Transmit};
use crate::protocol::api::metadata::{MetadataRequest, MetadataResponse};
use crate::protocol::error_code::ErrorCode;
use crate::protocol::message::Uuid;
use crate::types::{
    ApiVersion, CallId, LeaderEpoch, MetadataGeneration, NodeId, RequestId, TopicPartition,
};

/// How many peers are dialled at once while none is ready.
const PARALLEL_DIALS: usize = 3;

/// Who needs a topic's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Interest {
    /// The assigned partitions.
    Assignment,
    /// An offset lookup, by id.
    Lookup(CallId),
    /// A `partitions_for` caller, by id.
    Waiter(CallId),
    /// The group member: the topics it (or, as the leader, its group) subscribes to.
    Group,
}

/// A broker's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broker {
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PartitionInfo {
    leader: Option<NodeId>,
    leader_epoch: LeaderEpoch,
    /// Its replicas as the answer listed them (offline ones and ones outside the ISR too,
    /// as Java's `PartitionInfo.replicas`): the rack-aware assignors read their racks.
    replicas: Box<[NodeId]>,
}

#[derive(Debug, Clone)]
enum TopicState {
    Known(HashMap<i32, PartitionInfo>),
    /// The broker said the topic does not exist or may not be described.
    Failed(ErrorCode),
}

#[derive(Debug, Clone)]
struct TopicMeta {
    id: Uuid,
    state: TopicState,
    /// An internal topic (`__consumer_offsets`, `__transaction_state`).
    internal: bool,
}

/// Where a partition's leader is, as far as the metadata says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leader {
    /// The leader and its epoch; its address is known.
    Known(NodeId, LeaderEpoch),
    /// Not known yet (no answer yet, election in progress, or the leader is not in the
    /// broker list): ask for a refresh and wait.
    Unknown,
    /// The topic or partition does not exist (or may not be described).
    Missing(ErrorCode),
}

/// What the cluster has to tell the rest of the consumer.
#[derive(Debug)]
pub(crate) enum ClusterEvent {
    /// The answer for a `partitions_for` caller.
    Partitions {
        id: CallId,
        result: Result<Vec<TopicPartition>>,
    },
    /// A problem the user should hear about (a broker that speaks no Metadata version).
    Error(Error),
}

struct Waiter {
    id: CallId,
    topic: Arc<str>,
    deadline: Instant,
}

struct InFlight {
    id: RequestId,
    route: Route,
}

/// Settings the cluster needs.
#[derive(Debug, Clone)]
pub(crate) struct ClusterConfig {
    pub bootstrap_servers: usize,
    pub metadata_max_age: Duration,
    pub refresh_backoff: Backoff,
    pub request_timeout: Duration,
}

/// The metadata cache and its refresh policy.
pub(crate) struct Cluster {
    cfg: ClusterConfig,
    brokers: BTreeMap<NodeId, Broker>,
    topics: HashMap<Arc<str>, TopicMeta>,
    names: HashMap<Uuid, Arc<str>>,
    interest: BTreeMap<Interest, BTreeSet<Arc<str>>>,
    /// Every topic of the cluster is wanted (a pattern subscription matches against them).
    all_topics: bool,
    /// A refresh was asked for (or topics are missing).
    needed: bool,
    last_update: Option<Instant>,
    last_sent: Option<Instant>,
    /// Consecutive refreshes asked for in quick succession, for the spacing.
    streak: u32,
    in_flight: Option<InFlight>,
    waiters: Vec<Waiter>,
    events: VecDeque<ClusterEvent>,
    /// Peers already told to be unusable (no Metadata version), so it is said once.
    reported: BTreeSet<Peer>,
    next_id: RequestId,
    next_peer: usize,
    /// Bumped by every applied answer.
    generation: MetadataGeneration,
}

impl Cluster {
    /// An empty cache: the first refresh is needed at once.
    pub fn new(cfg: ClusterConfig) -> Cluster {
        Cluster {
            cfg,
            brokers: BTreeMap::new(),
            topics: HashMap::new(),
            names: HashMap::new(),
            interest: BTreeMap::new(),
            all_topics: false,
            needed: true,
            last_update: None,
            last_sent: None,
            streak: 0,
            in_flight: None,
            waiters: Vec::new(),
            events: VecDeque::new(),
            reported: BTreeSet::new(),
            next_id: RequestId(1),
            next_peer: 0,
            generation: MetadataGeneration(0),
        }
    }

    // ----- what the other components read -----------------------------------------------

    /// The leader of `tp`.
    pub fn leader(&self, tp: &TopicPartition) -> Leader {
        let Some(t) = self.topics.get(tp.topic()) else {
            return Leader::Unknown;
        };
        match &t.state {
            TopicState::Failed(code) => Leader::Missing(*code),
            TopicState::Known(parts) => match parts.get(&tp.partition()) {
                None => Leader::Missing(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                Some(p) => match p.leader {
                    Some(n) if self.brokers.contains_key(&n) => Leader::Known(n, p.leader_epoch),
                    _ => Leader::Unknown,
                },
            },
        }
    }

    /// The address of a broker, if the metadata listed it.
    pub fn broker(&self, node: NodeId) -> Option<&Broker> {
        self.brokers.get(&node)
    }

    /// Adds a broker address learnt elsewhere (FindCoordinator answers carry one).
    pub fn learn_broker(&mut self, node: NodeId, broker: Broker) {
        self.brokers.entry(node).or_insert(broker);
    }

    /// Bumped each time an answer is applied: lets a component wait for newer metadata.
    pub fn generation(&self) -> MetadataGeneration {
        self.generation
    }

    /// The id of a topic (zero if unknown).
    pub fn topic_id(&self, topic: &str) -> Uuid {
        self.topics.get(topic).map_or(Uuid::ZERO, |t| t.id)
    }

    /// The name of a topic id, if known.
    pub fn topic_name(&self, id: &Uuid) -> Option<&Arc<str>> {
        self.names.get(id)
    }

    /// The partitions of `topic` with their replicas, sorted by partition, if the metadata
    /// describes it. A replica's rack is its [`Broker::rack`] (none when the broker is not
    /// listed).
    pub fn replicas(&self, topic: &str) -> Option<Vec<(i32, &[NodeId])>> {
        match &self.topics.get(topic)?.state {
            TopicState::Known(parts) => {
                let mut v: Vec<(i32, &[NodeId])> =
                    parts.iter().map(|(p, i)| (*p, &*i.replicas)).collect();
                v.sort_unstable_by_key(|(p, _)| *p);
                Some(v)
            }
            TopicState::Failed(_) => None,
        }
    }

    /// The number of partitions of `topic`, if the metadata describes it.
    pub fn partition_count(&self, topic: &str) -> Option<i32> {
        match &self.topics.get(topic)?.state {
            TopicState::Known(parts) => i32::try_from(parts.len()).ok(),
            TopicState::Failed(_) => None,
        }
    }

    /// The topics the metadata describes, internal ones left out, sorted by name.
    pub fn topic_names(&self) -> Vec<Arc<str>> {
        let mut v: Vec<Arc<str>> = self
            .topics
            .iter()
            .filter(|(_, t)| !t.internal && matches!(t.state, TopicState::Known(_)))
            .map(|(name, _)| Arc::clone(name))
            .collect();
        v.sort();
        v
    }

    // ----- what the other components ask for -------------------------------------------

    /// Asks for (or stops asking for) every topic of the cluster on each refresh; a change
    /// to asking triggers a refresh.
    pub fn set_all_topics(&mut self, all: bool) {
        if all && !self.all_topics {
            self.needed = true;
        }
        self.all_topics = all;
    }

    /// Replaces the topics one interest needs; a topic not yet known triggers a refresh.
    pub fn set_interest<I: IntoIterator<Item = Arc<str>>>(&mut self, who: Interest, topics: I) {
        let topics: BTreeSet<Arc<str>> = topics.into_iter().collect();
        if topics.iter().any(|t| !self.topics.contains_key(t)) {
            self.needed = true;
        }
        if topics.is_empty() {
            self.interest.remove(&who);
        } else {
            self.interest.insert(who, topics);
        }
    }

    /// Drops one interest.
    pub fn clear_interest(&mut self, who: Interest) {
        self.interest.remove(&who);
    }

    /// Asks for a refresh as soon as the spacing allows (a leader moved, a topic is missing).
    pub fn request_update(&mut self) {
        self.needed = true;
    }

    /// Registers a `partitions_for` caller; answered by a [`ClusterEvent::Partitions`].
    pub fn wait_for_topic(&mut self, id: CallId, topic: &str, deadline: Instant) {
        let topic: Arc<str> = Arc::from(topic);
        self.waiters.push(Waiter {
            id,
            topic: Arc::clone(&topic),
            deadline,
        });
        self.set_interest(Interest::Waiter(id), [topic]);
        // A caller asks for fresh data even if the topic is cached.
        self.needed = true;
    }

    // ----- driving ---------------------------------------------------------------------

    /// The earliest instant a refresh may go out, given the spacing rule.
    fn not_before(&self, jitterless: &Backoff) -> Option<Instant> {
        let last = self.last_sent?;
        let spacing = spacing(jitterless, self.streak);
        Some(last + spacing)
    }

    fn refresh_due(&self, now: Instant) -> bool {
        if self.in_flight.is_some() {
            return false;
        }
        let aged = self
            .last_update
            .is_some_and(|t| now >= t + self.cfg.metadata_max_age);
        (self.needed || aged)
            && self
                .not_before(&self.cfg.refresh_backoff)
                .is_none_or(|t| now >= t)
    }

    /// The Metadata request to send now, if one is due and a link is ready.
    pub fn poll_transmit(&mut self, now: Instant, links: &mut Links) -> Option<Transmit> {
        if !self.refresh_due(now) {
            return None;
        }
        let (route, versions) = self.control_link(now, links)?;
        let Some(v) = versions.pick::<MetadataRequest>() else {
            if self.reported.insert(route.peer) {
                let msg = versions.unsupported::<MetadataRequest>(route.peer);
                log::error!("{msg}");
                self.events
                    .push_back(ClusterEvent::Error(Error::unsupported(msg)));
            }
            return None;
        };
        let topics: BTreeSet<Arc<str>> = self.interest.values().flatten().cloned().collect();
        let mut req = if self.all_topics {
            MetadataRequest::all_topics()
        } else {
            MetadataRequest::for_topics(topics.iter().map(|t| t.to_string()))
        };
        req.allow_auto_topic_creation = false;
        let id = self.next_id.take_next();
        // Quick succession (within twice the longest spacing) grows the streak.
        let quick = self
            .last_sent
            .is_some_and(|t| now < t + 2 * spacing(&self.cfg.refresh_backoff, u32::MAX));
        self.streak = if quick {
            self.streak.saturating_add(1)
        } else {
            1
        };
        self.last_sent = Some(now);
        self.needed = false;
        self.in_flight = Some(InFlight { id, route });
        log::debug!(
            "metadata request {id} to {route} for {} topics",
            topics.len()
        );
        Some(Transmit::new(
            route,
            &req,
            v,
            Tag {
                owner: Owner::Cluster,
                id,
            },
            self.cfg.request_timeout,
        ))
    }

    /// A ready control link to any broker (the least loaded), or `None` after wanting a
    /// few candidates so that the loop connects them.
    pub fn control_link(
        &mut self,
        now: Instant,
        links: &mut Links,
    ) -> Option<(Route, Arc<crate::link::Versions>)> {
        let mut candidates: Vec<Peer> = self.brokers.keys().map(|n| Peer::Node(*n)).collect();
        candidates.extend((0..self.cfg.bootstrap_servers).map(Peer::Bootstrap));
        candidates.retain(|p| !self.reported.contains(p));
        let route = |peer| Route {
            peer,
            lane: Lane::Control,
        };
        // A ready link, the least loaded first.
        let best = candidates
            .iter()
            .map(|p| route(*p))
            .filter(|r| matches!(links.state(*r), LinkState::Ready(_)))
            .min_by_key(|r| links.in_flight(*r));
        if let Some(r) = best {
            if let Some(v) = links.ready(r, now) {
                return Some((r, v));
            }
        }
        // None ready: want a few that may connect (rotating, so a dead one is not
        // the only one ever tried).
        let n = candidates.len();
        let mut wanted = 0;
        for k in 0..n {
            let r = route(candidates[(self.next_peer + k) % n]);
            let usable = match links.state(r) {
                LinkState::Failed { until } => now >= until,
                _ => true,
            };
            if usable {
                links.ready(r, now);
                wanted += 1;
                if wanted == PARALLEL_DIALS {
                    break;
                }
            }
        }
        if wanted == 0 {
            // Everything is backing off: keep wanting them all, so their timers count.
            for p in &candidates {
                links.ready(route(*p), now);
            }
        }
        if n > 0 {
            self.next_peer = (self.next_peer + 1) % n;
        }
        None
    }

    /// Applies the answer to request `id`.
    pub fn handle_response(
        &mut self,
        id: RequestId,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
    ) {
        let Some(f) = self.in_flight.take_if(|f| f.id == id) else {
            return;
        };
        match links.decode::<MetadataRequest>(f.route, version, body, now) {
            Ok(resp) => self.apply(resp, f.route, now),
            Err(e) => {
                let err = Error::decode(e, format!("malformed Metadata response from {}", f.route));
                self.fail_waiters(&err);
                self.needed = true;
            }
        }
    }

    /// Request `id` got no answer: try again after the spacing.
    pub fn handle_failure(&mut self, id: RequestId, failure: &Failure) {
        if self.in_flight.take_if(|f| f.id == id).is_some() {
            log::debug!("metadata request {id} failed: {failure}");
            self.needed = true;
        }
    }

    fn apply(&mut self, resp: MetadataResponse, from: Route, now: Instant) {
        let top = ErrorCode::from_code(resp.error_code);
        if top == ErrorCode::REBOOTSTRAP_REQUIRED {
            log::warn!("{from} asks the client to rebootstrap; forgetting the known brokers");
            self.brokers.clear();
            self.needed = true;
            return;
        }
        if top.is_err() {
            log::warn!("Metadata from {from} failed: {top}");
            self.needed = true;
            return;
        }
        let mut brokers = BTreeMap::new();
        for b in &resp.brokers {
            match u16::try_from(b.port) {
                Ok(port) if port > 0 && !b.host.is_empty() && b.node_id >= 0 => {
                    brokers.insert(
                        NodeId(b.node_id),
                        Broker {
                            host: b.host.clone(),
                            port,
                            rack: b.rack.clone(),
                        },
                    );
                }
                _ => log::warn!(
                    "ignoring broker {} with address {:?}:{} from {from}",
                    b.node_id,
                    b.host,
                    b.port
                ),
            }
        }
        if brokers.is_empty() {
            log::warn!("Metadata from {from} lists no usable broker");
            self.needed = true;
            return;
        }
        for (node, b) in &brokers {
            if self.brokers.get(node) != Some(b) {
                log::debug!("broker {} at {}:{}", node.0, b.host, b.port);
            }
        }
        self.brokers = brokers;
        let mut incomplete = false;
        for t in resp.topics {
            let Some(name) = t.name else { continue };
            let name: Arc<str> = self
                .topics
                .get_key_value(name.as_str())
                .map_or_else(|| Arc::from(name.as_str()), |(k, _)| Arc::clone(k));
            let code = ErrorCode::from_code(t.error_code);
            let state = if code.is_err() {
                if matches!(
                    code,
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                        | ErrorCode::INVALID_TOPIC_EXCEPTION
                        | ErrorCode::TOPIC_AUTHORIZATION_FAILED
                ) {
                    TopicState::Failed(code)
                } else {
                    // LEADER_NOT_AVAILABLE and friends: keep what we knew, ask again.
                    incomplete = true;
                    continue;
                }
            } else {
                let mut parts = HashMap::new();
                for p in t.partitions {
                    if p.partition_index < 0 {
                        continue;
                    }
                    let leader = (p.leader_id >= 0).then_some(NodeId(p.leader_id));
                    if leader.is_none_or(|n| !self.brokers.contains_key(&n)) {
                        incomplete = true;
                    }
                    parts.insert(
                        p.partition_index,
                        PartitionInfo {
                            leader,
                            leader_epoch: LeaderEpoch(p.leader_epoch),
                            replicas: p.replica_nodes.into_iter().map(NodeId).collect(),
                        },
                    );
                }
                TopicState::Known(parts)
            };
            if let Some(old) = self.topics.get(&name) {
                if !old.id.is_zero() && old.id != t.topic_id {
                    self.names.remove(&old.id);
                }
            }
            if !t.topic_id.is_zero() {
                self.names.insert(t.topic_id, Arc::clone(&name));
            }
            self.topics.insert(
                name,
                TopicMeta {
                    id: t.topic_id,
                    state,
                    internal: t.is_internal,
                },
            );
        }
        // Forget topics nobody is interested in any more.
        let wanted: BTreeSet<&Arc<str>> = self.interest.values().flatten().collect();
        let names = &mut self.names;
        let all = self.all_topics;
        self.topics.retain(|name, meta| {
            let keep = all || wanted.contains(name);
            if !keep {
                names.remove(&meta.id);
            }
            keep
        });
        let missing = wanted.iter().any(|t| !self.topics.contains_key(*t));
        self.needed |= incomplete || missing;
        self.last_update = Some(now);
        self.generation.0 += 1;
        self.answer_waiters(now);
    }

    fn answer_waiters(&mut self, now: Instant) {
        let mut done = Vec::new();
        self.waiters.retain(|w| {
            let answer = match self.topics.get(&w.topic).map(|t| &t.state) {
                Some(TopicState::Known(parts)) => {
                    let mut ps: Vec<i32> = parts.keys().copied().collect();
                    ps.sort_unstable();
                    Ok(ps
                        .into_iter()
                        .map(|p| TopicPartition::new(Arc::clone(&w.topic), p))
                        .collect())
                }
                Some(TopicState::Failed(code)) => Err(Error::broker(
                    *code,
                    format!("topic {} does not exist or may not be described", w.topic),
                )),
                None if now >= w.deadline => Err(Error::timeout(format!(
                    "no metadata for topic {} within default.api.timeout.ms",
                    w.topic
                ))),
                None => return true,
            };
            done.push((w.id, answer));
            false
        });
        for (id, result) in done {
            self.interest.remove(&Interest::Waiter(id));
            self.events
                .push_back(ClusterEvent::Partitions { id, result });
        }
    }

    fn fail_waiters(&mut self, err: &Error) {
        for w in self.waiters.drain(..) {
            self.interest.remove(&Interest::Waiter(w.id));
            self.events.push_back(ClusterEvent::Partitions {
                id: w.id,
                result: Err(err.clone()),
            });
        }
    }

    /// Expires `partitions_for` callers.
    pub fn handle_timeout(&mut self, now: Instant, links: &Links) {
        let mut expired = Vec::new();
        self.waiters.retain(|w| {
            if now >= w.deadline {
                expired.push((w.id, Arc::clone(&w.topic)));
                false
            } else {
                true
            }
        });
        for (id, topic) in expired {
            self.interest.remove(&Interest::Waiter(id));
            let why = self.why_no_answer(links);
            self.events.push_back(ClusterEvent::Partitions {
                id,
                result: Err(Error::timeout(format!(
                    "no metadata for topic {topic} within default.api.timeout.ms{why}"
                ))),
            });
        }
    }

    /// A hint for timeout messages: why no broker answered.
    pub fn why_no_answer(&self, links: &Links) -> String {
        let mut peers: Vec<Peer> = self.brokers.keys().map(|n| Peer::Node(*n)).collect();
        peers.extend((0..self.cfg.bootstrap_servers).map(Peer::Bootstrap));
        peers
            .into_iter()
            .find_map(|p| {
                links
                    .last_error(Route {
                        peer: p,
                        lane: Lane::Control,
                    })
                    .map(|e| format!(" ({p}: {e})"))
            })
            .unwrap_or_default()
    }

    /// The next instant the cluster has something to do.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| {
            if x > now {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        if self.in_flight.is_none() {
            let spaced = self.not_before(&self.cfg.refresh_backoff);
            if self.needed {
                if let Some(nb) = spaced {
                    at(nb);
                }
            } else if let Some(u) = self.last_update {
                let aged = u + self.cfg.metadata_max_age;
                at(spaced.map_or(aged, |s| s.max(aged)));
            }
        }
        for w in &self.waiters {
            at(w.deadline);
        }
        t
    }

    /// The next event for the user side.
    pub fn poll_event(&mut self) -> Option<ClusterEvent> {
        self.events.pop_front()
    }
}

/// The spacing between two refreshes after `streak` refreshes in quick succession:
/// the backoff policy's base delay without jitter.
fn spacing(policy: &Backoff, streak: u32) -> Duration {
    struct NoJitter;
    impl Jitter for NoJitter {
        fn next_u32(&mut self) -> u32 {
            200 // 0.8 + 200/1000 = exactly 1.0
        }
    }
    policy.delay(streak.max(1), &mut NoJitter)
}

#[cfg(test)]
mod tests;
