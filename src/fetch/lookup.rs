//! The application's offset lookups (`beginning_offsets`, `end_offsets`,
//! `offsets_for_times`): ListOffsets to each partition's leader, on the control links so
//! they never wait behind a fetch long-poll. Sans-IO.
//!
//! Invariants:
//! 1. Every lookup ends with exactly one [`LookupEvent::Done`]: all answers, the first
//!    non-retriable error, or a timeout at its deadline that says what was missing.
//! 2. A partition is in at most one request at a time; retriable errors and failed requests
//!    wait a growing backoff before the partition is asked again.
//! 3. [`Lookups::poll_timeout`] only returns future instants.
//! 4. Leaders come from the metadata cache, as in the Java client's `OffsetFetcher`: a
//!    lookup sends no Metadata request itself, and asks the cache for a refresh only when a
//!    leader is unknown or an answer says it moved. Its topics are an interest of the cache
//!    while it runs, so a topic the cache does not describe is asked for at once (the
//!    cluster's invariant 6) and one it describes costs no Metadata round trip.
//! 5. Each lookup waits only its own backoff: one lookup's retries never delay another's
//!    requests.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::{Backoff, Jitter, Retry};
use crate::cluster::{Cluster, Interest, Leader};
use crate::error::{Error, Result};
use crate::fetch::offsets::{self, Query, Unsendable};
use crate::link::{Failure, Lane, Links, Owner, Route, Tag, Transmit};
use crate::protocol::api::list_offsets::ListOffsetsRequest;
use crate::types::{ApiVersion, CallId, NodeId, RequestId, TopicPartition};

/// Per partition: the offset and the timestamp of its record, or `None` when no record
/// matches (a timestamp after the last record).
pub(crate) type LookupResult = Result<HashMap<TopicPartition, Option<(i64, i64)>>>;

/// A finished lookup.
#[derive(Debug)]
pub(crate) enum LookupEvent {
    Done { id: CallId, result: LookupResult },
}

/// What lookups need from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct LookupConfig {
    pub isolation_level: i8,
    pub request_timeout: Duration,
    pub retry_backoff: Backoff,
}

struct Lookup {
    want: BTreeMap<TopicPartition, i64>,
    results: HashMap<TopicPartition, Option<(i64, i64)>>,
    in_flight: HashSet<TopicPartition>,
    retry: Retry,
    not_before: Option<Instant>,
    deadline: Instant,
    /// The last retriable problem, for the timeout message.
    last_problem: Option<String>,
}

/// The lookups under way.
pub(crate) struct Lookups {
    cfg: LookupConfig,
    pending: BTreeMap<CallId, Lookup>,
    sent: HashMap<RequestId, (CallId, Route, Vec<TopicPartition>)>,
    queue: VecDeque<Transmit>,
    events: VecDeque<LookupEvent>,
    jitter: Box<dyn Jitter + Send>,
    next_req: RequestId,
}

impl Lookups {
    /// No lookups yet.
    pub fn new(cfg: LookupConfig, jitter: Box<dyn Jitter + Send>) -> Lookups {
        Lookups {
            cfg,
            pending: BTreeMap::new(),
            sent: HashMap::new(),
            queue: VecDeque::new(),
            events: VecDeque::new(),
            jitter,
            next_req: RequestId(1),
        }
    }

    /// Starts lookup `id`: for each partition, the timestamp (or -1 latest, -2 earliest).
    pub fn start(
        &mut self,
        id: CallId,
        query: Vec<(TopicPartition, i64)>,
        deadline: Instant,
        cluster: &mut Cluster,
    ) {
        if query.is_empty() {
            self.events.push_back(LookupEvent::Done {
                id,
                result: Ok(HashMap::new()),
            });
            return;
        }
        let want: BTreeMap<TopicPartition, i64> = query.into_iter().collect();
        let topics: Vec<Arc<str>> = want.keys().map(|tp| Arc::clone(tp.topic_arc())).collect();
        cluster.set_interest(Interest::Lookup(id), topics);
        self.pending.insert(
            id,
            Lookup {
                want,
                results: HashMap::new(),
                in_flight: HashSet::new(),
                retry: Retry::default(),
                not_before: None,
                deadline,
                last_problem: None,
            },
        );
    }

    /// Cancels lookup `id` (its caller went away).
    pub fn cancel(&mut self, id: CallId, cluster: &mut Cluster) {
        if self.pending.remove(&id).is_some() {
            cluster.clear_interest(Interest::Lookup(id));
        }
    }

    fn finish(&mut self, id: CallId, result: LookupResult, cluster: &mut Cluster) {
        if self.pending.remove(&id).is_some() {
            cluster.clear_interest(Interest::Lookup(id));
            self.events.push_back(LookupEvent::Done { id, result });
        }
    }

    /// The next request to send, if any.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) -> Option<Transmit> {
        if self.queue.is_empty() {
            self.plan(now, links, cluster);
        }
        self.queue.pop_front()
    }

    fn plan(&mut self, now: Instant, links: &mut Links, cluster: &mut Cluster) {
        let ids: Vec<CallId> = self.pending.keys().copied().collect();
        for id in ids {
            let Some(l) = self.pending.get_mut(&id) else {
                continue;
            };
            if l.not_before.is_some_and(|t| now < t) {
                continue;
            }
            let mut by_leader: BTreeMap<NodeId, Vec<Query>> = BTreeMap::new();
            let mut missing = None;
            for (tp, ts) in &l.want {
                if l.results.contains_key(tp) || l.in_flight.contains(tp) {
                    continue;
                }
                match cluster.leader(tp) {
                    Leader::Known(n, e) => by_leader.entry(n).or_default().push(Query {
                        tp: tp.clone(),
                        timestamp: *ts,
                        leader_epoch: e,
                    }),
                    Leader::Unknown => cluster.request_update(),
                    Leader::Missing(code) => {
                        missing = Some(
                            Error::broker(code, format!("partition {tp} does not exist"))
                                .with_partition(tp.clone()),
                        );
                        break;
                    }
                }
            }
            if let Some(e) = missing {
                self.finish(id, Err(e), cluster);
                continue;
            }
            for (node, queries) in by_leader {
                let route = Route::node(node, Lane::Control);
                let Some(versions) = links.ready(route, now) else {
                    continue;
                };
                let req = self.next_req.take_next();
                let tag = Tag {
                    owner: Owner::Lookups,
                    id: req,
                };
                match offsets::request(
                    route,
                    &versions,
                    &queries,
                    self.cfg.isolation_level,
                    tag,
                    self.cfg.request_timeout,
                ) {
                    Ok(t) => {
                        let Some(l) = self.pending.get_mut(&id) else {
                            break;
                        };
                        let tps: Vec<TopicPartition> = queries.into_iter().map(|q| q.tp).collect();
                        l.in_flight.extend(tps.iter().cloned());
                        self.sent.insert(req, (id, route, tps));
                        self.queue.push_back(t);
                    }
                    Err(Unsendable::NoVersion(msg) | Unsendable::TooOld(msg)) => {
                        self.finish(id, Err(Error::unsupported(msg)), cluster);
                        break;
                    }
                }
            }
        }
    }

    fn backoff(&mut self, id: CallId, now: Instant, problem: String) {
        if let Some(l) = self.pending.get_mut(&id) {
            let d = l.retry.failed(&self.cfg.retry_backoff, &mut *self.jitter);
            l.not_before = Some(now + d);
            l.last_problem = Some(problem);
        }
    }

    /// Request `req` got no answer.
    pub fn handle_failure(&mut self, req: RequestId, failure: &Failure, now: Instant) {
        let Some((id, route, tps)) = self.sent.remove(&req) else {
            return;
        };
        if let Some(l) = self.pending.get_mut(&id) {
            for tp in &tps {
                l.in_flight.remove(tp);
            }
        }
        self.backoff(id, now, format!("{route}: {failure}"));
    }

    /// Applies the answer to request `req`.
    pub fn handle_response(
        &mut self,
        req: RequestId,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) {
        let Some((id, route, tps)) = self.sent.remove(&req) else {
            return;
        };
        if let Some(l) = self.pending.get_mut(&id) {
            for tp in &tps {
                l.in_flight.remove(tp);
            }
        }
        let resp = match links.decode::<ListOffsetsRequest>(route, version, body, now) {
            Ok(r) => r,
            Err(e) => {
                let err = Error::decode(e, format!("malformed ListOffsets response from {route}"));
                self.finish(id, Err(err), cluster);
                return;
            }
        };
        let answers = offsets::answers(&resp);
        let mut retry = None;
        let mut failed = None;
        let Some(l) = self.pending.get_mut(&id) else {
            return;
        };
        for tp in tps {
            let a = offsets::answer_for(&answers, &tp);
            if a.error.is_err() {
                if a.error.is_retriable() || a.error.needs_metadata_refresh() {
                    if a.error.needs_metadata_refresh() {
                        cluster.request_update();
                    }
                    retry = Some(format!("{tp}: {}", a.error));
                } else if failed.is_none() {
                    failed = Some(
                        Error::broker(a.error, format!("listing offsets of {tp}"))
                            .with_partition(tp.clone()),
                    );
                }
                continue;
            }
            let found = (a.offset >= 0).then_some((a.offset, a.timestamp));
            l.results.insert(tp, found);
        }
        if let Some(e) = failed {
            self.finish(id, Err(e), cluster);
            return;
        }
        if let Some(problem) = retry {
            log::debug!("lookup {id}: {problem} from {route}; retrying after a backoff");
            self.backoff(id, now, problem);
            return;
        }
        if l.results.len() == l.want.len() {
            let results = std::mem::take(&mut l.results);
            l.retry.succeeded();
            self.finish(id, Ok(results), cluster);
        }
    }

    /// Ends lookups whose deadline passed.
    pub fn handle_timeout(&mut self, now: Instant, links: &Links, cluster: &mut Cluster) {
        let expired: Vec<CallId> = self
            .pending
            .iter()
            .filter(|(_, l)| now >= l.deadline)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            let Some(l) = self.pending.get(&id) else {
                continue;
            };
            let why = match &l.last_problem {
                Some(p) => format!(" (last problem: {p})"),
                None => cluster.why_no_answer(links),
            };
            let missing: Vec<String> = l
                .want
                .keys()
                .filter(|tp| !l.results.contains_key(*tp))
                .map(|tp| tp.to_string())
                .collect();
            let named = match missing.len() {
                0..=5 => missing.join(", "),
                n => format!("{} and {} more", missing[..5].join(", "), n - 5),
            };
            let msg = format!(
                "listing offsets timed out: {} of {} partitions answered within default.api.timeout.ms, none for {named}{why}",
                l.results.len(),
                l.want.len()
            );
            self.finish(id, Err(Error::timeout(msg)), cluster);
        }
    }

    /// The next deadline or end of a backoff.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        self.pending
            .values()
            .flat_map(|l| [Some(l.deadline), l.not_before])
            .flatten()
            .filter(|t| *t > now)
            .min()
    }

    /// The next finished lookup.
    pub fn poll_event(&mut self) -> Option<LookupEvent> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests;
