//! The cluster as the consumer knows it: brokers with their addresses and racks, topics,
//! topic ids, partition leaders, leader epochs and replicas, and the policy that keeps this
//! metadata fresh.
//! Sans-IO: time is a parameter, requests go out as [`Transmit`]s.
//!
//! ```text
//!   Fresh ──max age / request_update()──▶ Needed ──spacing over, a link ready──▶ InFlight
//!     │                                                                  ▲         │
//!     └── a caller names a topic the cache does not describe: Urgent ────┘         │
//!     ▲                                      ▲  (no spacing: one request per new   │
//!     │                                      │   interest)                         │
//!     └────────────── answer applied ────────┴──── failure or top error ───────────┘
//! ```
//!
//! The blocking calls are answered from this cache, as the Java client answers them from
//! `metadata.fetch()`: `partitions_for` on a topic the cache describes needs no request, and
//! the offset lookups use the cached leaders, asking for a refresh only when a leader is
//! unknown or an answer says it moved.
//!
//! Invariants:
//! 1. At most one Metadata request is in flight.
//! 2. Refreshes the cache asks for itself (`request_update()`, `metadata.max.age.ms`, topics
//!    or leaders still missing) are never closer together than a spacing that starts at
//!    `retry.backoff.ms` and doubles (up to `retry.backoff.max.ms`) with each refresh in quick
//!    succession that fails or brings nothing new; an answer that changes what the cache
//!    knows starts it again from `retry.backoff.ms`. So `metadata.max.age.ms=0`, a broker
//!    that keeps failing or a partition that keeps failing can never make the consumer
//!    refresh in a loop.
//! 3. The topics asked for are the union of every registered interest; a topic that
//!    becomes interesting and is not yet known triggers a refresh.
//! 4. Only answers to the request in flight are applied; a broker's address or a leader is
//!    only reported when the answer listed it (a leader missing from the broker list counts
//!    as unknown, and asks for a refresh).
//! 5. [`Cluster::poll_timeout`] never returns a passed instant.
//! 6. An interest that newly names a topic the cache does not describe (a `partitions_for`
//!    caller, an offset lookup, a new assignment or subscription) makes the next request
//!    urgent: it goes out as soon as none is in flight, whatever the spacing of invariant 2,
//!    so an independent call never waits behind another's backoff. Urgency comes only from
//!    a new interest (each call has its own), never from an answer, so it cannot loop; the
//!    outcome of an urgent request counts for the spacing like any other.
//! 7. `partitions_for` on a topic the cache describes, with metadata younger than
//!    `metadata.max.age.ms`, is answered at once with no request; otherwise the caller is
//!    answered by the first answer that lists the topic (or at its deadline). A topic the
//!    broker said does not exist is not trusted for a new interest: the entry is forgotten
//!    and a fresh answer decides.
//! 8. A topic nobody is interested in any more stays described (for the calls of
//!    invariant 7 and the lookups) while its metadata is younger than `metadata.max.age.ms`,
//!    and is forgotten by the first answer after that; it is never refreshed for its own
//!    sake. A topic that failed is forgotten by the next answer; one that an answer lists
//!    although nobody asked for it is not taken in.
//! 9. A partition's leader epoch never goes back (as the Java client's `Metadata`): an
//!    answer naming an older epoch than the cache knows for the same topic (same topic id)
//!    comes from a broker whose view is behind, one just back from a pause or a restart
//!    that still thinks it leads. That partition keeps what the cache knows, and another
//!    refresh follows (spaced as invariant 2 says). Fetching from such a broker would find
//!    the position past its log end and reset it by `auto.offset.reset`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
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

/// A topic's partitions by index. Looked up once per partition per fetch plan, so hashed
/// with one multiplication (the indexes come from the broker's metadata, not from users)
/// rather than SipHash.
type PartitionMap = HashMap<i32, PartitionInfo, BuildHasherDefault<IndexHasher>>;

/// Hashes a partition index with one multiplication (Fibonacci hashing): the high bits,
/// which hashbrown's probing reads, depend on every bit of the index.
#[derive(Default)]
pub(crate) struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_i32(&mut self, i: i32) {
        self.0 = (self.0 ^ u64::from(i as u32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[derive(Debug, Clone, PartialEq)]
enum TopicState {
    Known(PartitionMap),
    /// The broker said the topic does not exist or may not be described.
    Failed(ErrorCode),
}

/// One topic's leaders, from [`Cluster::topic_leaders`].
#[derive(Clone, Copy)]
pub(crate) struct TopicLeaders<'a> {
    brokers: &'a BTreeMap<NodeId, Broker>,
    meta: Option<&'a TopicMeta>,
}

impl TopicLeaders<'_> {
    /// The leader of partition `partition` of the topic (see [`Cluster::leader`]).
    pub fn leader(&self, partition: i32) -> Leader {
        let Some(t) = self.meta else {
            return Leader::Unknown;
        };
        match &t.state {
            TopicState::Failed(code) => Leader::Missing(*code),
            TopicState::Known(parts) => match parts.get(&partition) {
                None => Leader::Missing(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                Some(p) => match p.leader {
                    Some(n) if self.brokers.contains_key(&n) => Leader::Known(n, p.leader_epoch),
                    _ => Leader::Unknown,
                },
            },
        }
    }

    /// The topic's id (zero if unknown).
    pub fn id(&self) -> Uuid {
        self.meta.map_or(Uuid::ZERO, |t| t.id)
    }
}

#[derive(Debug, Clone)]
struct TopicMeta {
    id: Uuid,
    state: TopicState,
    /// An internal topic (`__consumer_offsets`, `__transaction_state`).
    internal: bool,
    /// When an answer last listed the topic.
    updated: Instant,
}

impl TopicMeta {
    /// Whether `other` says the same about the topic, whenever it was said.
    fn same_as(&self, other: &TopicMeta) -> bool {
        self.id == other.id && self.state == other.state && self.internal == other.internal
    }
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

/// A topic the cache describes, as a reader with its own clock sees it (the user side's
/// snapshot for `partitions_for`).
#[derive(Debug, Clone)]
pub(crate) struct Described {
    pub topic: Arc<str>,
    /// Sorted.
    pub partitions: Vec<TopicPartition>,
    /// The instant from which the metadata is older than `metadata.max.age.ms` and must not
    /// be answered from the cache any more (`None`: no limit).
    pub fresh_until: Option<Instant>,
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
    /// Sent in quick succession after the previous request (its outcome counts for the
    /// spacing's streak).
    quick: bool,
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
    /// A new interest names a topic the cache does not describe: the next request goes
    /// out without waiting for the spacing (invariant 6).
    urgent: bool,
    last_update: Option<Instant>,
    last_sent: Option<Instant>,
    /// Consecutive refreshes in quick succession that failed or brought nothing new: the
    /// spacing before the next one is the backoff's step `streak + 1`.
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
            urgent: false,
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
        self.topic_leaders(tp.topic()).leader(tp.partition())
    }

    /// The leaders of `topic`'s partitions, for a walk over many of them: the topic is
    /// looked up once, each partition in O(1).
    pub fn topic_leaders(&self, topic: &str) -> TopicLeaders<'_> {
        TopicLeaders {
            brokers: &self.brokers,
            meta: self.topics.get(topic),
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
    #[cfg(any(test, feature = "__testing"))]
    pub fn topic_id(&self, topic: &str) -> Uuid {
        self.topic_leaders(topic).id()
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

    /// The partitions of `topic`, sorted, if the cache describes it with metadata younger
    /// than `metadata.max.age.ms` at `now` (invariant 7).
    pub fn fresh_partitions(&self, topic: &str, now: Instant) -> Option<Vec<TopicPartition>> {
        let (name, meta) = self.topics.get_key_value(topic)?;
        let TopicState::Known(parts) = &meta.state else {
            return None;
        };
        if now.saturating_duration_since(meta.updated) >= self.cfg.metadata_max_age {
            return None;
        }
        Some(sorted_partitions(name, parts))
    }

    /// Every topic the cache describes, with the rule of
    /// [`fresh_partitions`](Cluster::fresh_partitions) for a reader with its own clock.
    pub fn described(&self) -> Vec<Described> {
        self.topics
            .iter()
            .filter_map(|(name, meta)| match &meta.state {
                TopicState::Known(parts) => Some(Described {
                    topic: Arc::clone(name),
                    partitions: sorted_partitions(name, parts),
                    fresh_until: meta.updated.checked_add(self.cfg.metadata_max_age),
                }),
                TopicState::Failed(_) => None,
            })
            .collect()
    }

    // ----- what the other components ask for -------------------------------------------

    /// Asks for (or stops asking for) every topic of the cluster on each refresh; a change
    /// to asking triggers a refresh.
    pub fn set_all_topics(&mut self, all: bool) {
        if all && !self.all_topics {
            self.needed = true;
            self.make_urgent("every topic is wanted");
        }
        self.all_topics = all;
    }

    /// Replaces the topics one interest needs; a topic not yet known triggers a refresh,
    /// at once if this interest names it for the first time (invariant 6). A topic the
    /// cache only knows as failed is forgotten when an interest newly names it, so that a
    /// fresh answer decides (invariant 7).
    pub fn set_interest<I: IntoIterator<Item = Arc<str>>>(&mut self, who: Interest, topics: I) {
        let topics: BTreeSet<Arc<str>> = topics.into_iter().collect();
        let new: Vec<&Arc<str>> = {
            let before = self.interest.get(&who);
            topics
                .iter()
                .filter(|t| before.is_none_or(|b| !b.contains(*t)))
                .filter(|t| {
                    !matches!(
                        self.topics.get(*t).map(|m| &m.state),
                        Some(TopicState::Known(_))
                    )
                })
                .collect()
        };
        for t in &new {
            if let Some(meta) = self.topics.remove(*t) {
                log::debug!(
                    "metadata: {t} was {:?}; asking afresh for {who:?}",
                    meta.state
                );
                self.names.remove(&meta.id);
            }
        }
        if let Some(first) = new.first() {
            let why = format!("{who:?} names {} new topic(s), {first} first", new.len());
            self.make_urgent(&why);
        }
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

    /// Registers a `partitions_for` caller; answered by a [`ClusterEvent::Partitions`]: at
    /// once from the cache when it describes the topic with fresh enough metadata, else by
    /// the first answer that lists the topic, sent at once (invariants 6 and 7).
    pub fn wait_for_topic(&mut self, id: CallId, topic: &str, deadline: Instant, now: Instant) {
        if let Some(parts) = self.fresh_partitions(topic, now) {
            log::debug!(
                "partitions_for {topic}: {} partitions, from the cache",
                parts.len()
            );
            self.events.push_back(ClusterEvent::Partitions {
                id,
                result: Ok(parts),
            });
            return;
        }
        let topic: Arc<str> = Arc::from(topic);
        self.waiters.push(Waiter {
            id,
            topic: Arc::clone(&topic),
            deadline,
        });
        self.set_interest(Interest::Waiter(id), [Arc::clone(&topic)]);
        // Not described, or by metadata older than the max age (which `set_interest` does
        // not see): this caller needs a fresh answer at once.
        self.needed = true;
        self.make_urgent(&format!("partitions_for {topic}"));
    }

    /// Drops a `partitions_for` caller that stopped waiting (woken up).
    pub fn cancel_waiter(&mut self, id: CallId) {
        self.waiters.retain(|w| w.id != id);
        self.interest.remove(&Interest::Waiter(id));
    }

    fn make_urgent(&mut self, why: &str) {
        if !self.urgent {
            log::debug!("metadata: refresh at once: {why}");
        }
        self.urgent = true;
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
        if self.urgent {
            return true;
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
        // Quick succession (within twice the longest spacing): a failure or an answer with
        // nothing new grows the streak.
        let quick = self
            .last_sent
            .is_some_and(|t| now < t + 2 * spacing(&self.cfg.refresh_backoff, u32::MAX));
        log::debug!(
            "metadata request {id} to {route} for {} topics{}",
            if self.all_topics {
                "all".to_owned()
            } else {
                topics.len().to_string()
            },
            if self.urgent { " (at once)" } else { "" }
        );
        self.last_sent = Some(now);
        self.needed = false;
        self.urgent = false;
        self.in_flight = Some(InFlight { id, route, quick });
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
            Ok(resp) => {
                let news = self.apply(resp, f.route, now);
                self.count_outcome(f.quick, news);
            }
            Err(e) => {
                let err = Error::decode(e, format!("malformed Metadata response from {}", f.route));
                self.fail_waiters(&err);
                self.needed = true;
                self.count_outcome(f.quick, false);
            }
        }
    }

    /// Request `id` got no answer: try again after the spacing.
    pub fn handle_failure(&mut self, id: RequestId, failure: &Failure) {
        if let Some(f) = self.in_flight.take_if(|f| f.id == id) {
            log::debug!("metadata request {id} failed: {failure}");
            self.needed = true;
            self.count_outcome(f.quick, false);
        }
    }

    /// The spacing's streak after a request's outcome (invariant 2): news starts it again,
    /// a failure or an answer with nothing new grows it when the request came in quick
    /// succession after the previous one.
    fn count_outcome(&mut self, quick: bool, news: bool) {
        let before = self.streak;
        self.streak = match (news, quick) {
            (true, _) | (false, false) => 0,
            (false, true) => self.streak.saturating_add(1),
        };
        if self.streak != before {
            log::debug!(
                "metadata: refreshes now spaced by {:?} ({})",
                spacing(&self.cfg.refresh_backoff, self.streak),
                if news {
                    "an answer brought news"
                } else if quick {
                    "the last refresh failed or brought nothing new"
                } else {
                    "the last refresh came after a quiet period"
                }
            );
        }
    }

    /// Applies an answer; whether it changed what the cache knows.
    fn apply(&mut self, resp: MetadataResponse, from: Route, now: Instant) -> bool {
        let top = ErrorCode::from_code(resp.error_code);
        if top == ErrorCode::REBOOTSTRAP_REQUIRED {
            log::warn!("{from} asks the client to rebootstrap; forgetting the known brokers");
            self.brokers.clear();
            self.needed = true;
            return false;
        }
        if top.is_err() {
            log::warn!("Metadata from {from} failed: {top}");
            self.needed = true;
            return false;
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
            return false;
        }
        for (node, b) in &brokers {
            if self.brokers.get(node) != Some(b) {
                log::debug!("broker {} at {}:{}", node.0, b.host, b.port);
            }
        }
        let mut news = self.brokers != brokers;
        self.brokers = brokers;
        let mut incomplete = false;
        // An answer from a broker whose view is behind (one that just came back from a
        // pause or a restart) named older leader epochs than the cache knows.
        let mut stale = false;
        let mut listed: BTreeSet<Arc<str>> = BTreeSet::new();
        let wanted: BTreeSet<Arc<str>> = self.interest.values().flatten().cloned().collect();
        for t in resp.topics {
            let Some(name) = t.name else { continue };
            if !self.all_topics && !wanted.contains(name.as_str()) {
                // Listed although nobody asked for it (or no longer does): not news, not
                // kept.
                continue;
            }
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
                // What the cache knows of the same topic (not of an older one of that name),
                // to hold leader epochs from going back (invariant 9).
                let known = match self.topics.get(&name) {
                    Some(TopicMeta {
                        id,
                        state: TopicState::Known(parts),
                        ..
                    }) if *id == t.topic_id => Some(parts),
                    _ => None,
                };
                let mut parts = PartitionMap::default();
                for p in t.partitions {
                    if p.partition_index < 0 {
                        continue;
                    }
                    let leader_epoch = LeaderEpoch(p.leader_epoch);
                    let kept = known.and_then(|k| k.get(&p.partition_index)).filter(|old| {
                        matches!(
                            (old.leader_epoch.known(), leader_epoch.known()),
                            (Some(old), Some(new)) if new < old
                        )
                    });
                    if let Some(old) = kept {
                        log::debug!(
                            "metadata from {from}: partition {name}-{} at leader epoch {}, older than the known {}: keeping what is known",
                            p.partition_index,
                            leader_epoch.0,
                            old.leader_epoch.0
                        );
                        stale = true;
                        parts.insert(p.partition_index, old.clone());
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
                            leader_epoch,
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
            let meta = TopicMeta {
                id: t.topic_id,
                state,
                internal: t.is_internal,
                updated: now,
            };
            if self.topics.get(&name).is_none_or(|old| !old.same_as(&meta)) {
                news = true;
            }
            listed.insert(Arc::clone(&name));
            self.topics.insert(name, meta);
        }
        // Forget topics nobody is interested in any more: at once if they failed, once
        // their metadata is older than the max age if they are described (invariant 8).
        let names = &mut self.names;
        let all = self.all_topics;
        let max_age = self.cfg.metadata_max_age;
        let mut forgotten = Vec::new();
        self.topics.retain(|name, meta| {
            let young = now.saturating_duration_since(meta.updated) < max_age;
            let keep = all
                || wanted.contains(name)
                || (young && matches!(meta.state, TopicState::Known(_)));
            if !keep {
                names.remove(&meta.id);
                forgotten.push(Arc::clone(name));
            }
            keep
        });
        if !forgotten.is_empty() {
            log::debug!("metadata: forgetting topics nobody uses any more: {forgotten:?}");
        }
        let missing = wanted.iter().any(|t| !self.topics.contains_key(t));
        if stale {
            log::info!(
                "metadata from {from} is behind what is known (older leader epochs); kept the newer leaders and asking again"
            );
        }
        self.needed |= incomplete || missing || stale;
        self.last_update = Some(now);
        self.generation.0 += 1;
        self.answer_waiters(&listed, now);
        news
    }

    /// Answers the `partitions_for` callers whose topic this answer listed.
    fn answer_waiters(&mut self, listed: &BTreeSet<Arc<str>>, now: Instant) {
        let mut done = Vec::new();
        self.waiters.retain(|w| {
            let state = listed
                .contains(&w.topic)
                .then(|| self.topics.get(&w.topic).map(|t| &t.state))
                .flatten();
            let answer = match state {
                Some(TopicState::Known(parts)) => Ok(sorted_partitions(&w.topic, parts)),
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
        // Urgent: it goes out as soon as a link is ready, and links wake the loop.
        if self.in_flight.is_none() && !self.urgent {
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

/// The spacing between two refreshes after `streak` refreshes in quick succession that
/// failed or brought nothing new: the backoff policy's step `streak + 1` without jitter
/// (`retry.backoff.ms` after news).
fn spacing(policy: &Backoff, streak: u32) -> Duration {
    struct NoJitter;
    impl Jitter for NoJitter {
        fn next_u32(&mut self) -> u32 {
            200 // 0.8 + 200/1000 = exactly 1.0
        }
    }
    policy.delay(streak.saturating_add(1), &mut NoJitter)
}

/// The partitions of a described topic, sorted.
fn sorted_partitions(topic: &Arc<str>, parts: &PartitionMap) -> Vec<TopicPartition> {
    let mut ps: Vec<i32> = parts.keys().copied().collect();
    ps.sort_unstable();
    ps.into_iter()
        .map(|p| TopicPartition::new(Arc::clone(topic), p))
        .collect()
}

#[cfg(test)]
mod tests;
