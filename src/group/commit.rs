//! Committing offsets and reading committed ones (OffsetCommit, OffsetFetch) on the group
//! coordinator's own link. Sans-IO.
//!
//! Used by the application (`commit_sync`, `commit_async`, `committed`) and by the fetcher,
//! which starts an unpositioned partition from its committed offset. In manual-assignment
//! mode the consumer is not a group member: it commits as generation -1 with no member id,
//! which the broker accepts while the group has no active members. A member of a classic
//! group commits with its generation; a member speaking the KIP-848 consumer protocol
//! commits with its member epoch in the same field (OffsetCommit v9+), and also names itself
//! (member id and epoch) when it reads committed offsets (OffsetFetch v9+).
//!
//! ```text
//!   queued ──coordinator known, link ready──▶ in flight ──answer──▶ done (event)
//!     ▲                                          │ retriable error / no answer
//!     └────────────── backoff (until the deadline) ──┘
//! ```
//!
//! Invariants:
//! 1. Commits go out one at a time, in the order they were made, and a failed one is
//!    retried (until its deadline) before any later one is sent: an older commit can never
//!    overwrite a newer one. One whose deadline passes while it is on the wire stays ahead
//!    of the later ones until it is answered or fails.
//! 2. Every commit and every offset fetch for the application ends with exactly one event:
//!    success, the first non-retriable error, or a timeout at its deadline (even with a
//!    request on the wire) that says what went wrong last.
//! 3. Retries back off with a growing delay; coordinator errors make the coordinator be
//!    found again.
//! 4. A committed-offset lookup for the fetcher never turns a failure into "nothing
//!    committed": it reports the partitions as failed and the fetcher asks again.
//! 5. A consumer-protocol member's offset fetch that the broker refuses with
//!    STALE_MEMBER_EPOCH or UNKNOWN_MEMBER_ID (its epoch moved on, or it is rejoining) is
//!    never an error of its own: the fetcher's partitions are reported failed (invariant 4;
//!    above all never "nothing committed", which would reset their positions and skip or
//!    repeat records), and the application's lookup is retried after a backoff, with the
//!    identity current then, until its deadline.
//! 6. A consumer-protocol member's commit refused with STALE_MEMBER_EPOCH (up to Kafka 4.2
//!    the epoch must match exactly, so a commit racing an epoch bump gets it) is retried
//!    after a backoff, until its deadline, with the identity current at resend time, and
//!    only for the partitions the member still owns ([`Commits::set_assignment`]): a
//!    partition reassigned meanwhile is dropped from it, since committing it would
//!    overwrite its new owner's progress. With none left the commit fails
//!    (`CommitFailed`). From any other identity STALE_MEMBER_EPOCH is a plain failure.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::backoff::{Backoff, Jitter, Retry};
use crate::error::{Error, ErrorKind, Result};
use crate::group::coordinator::Coordinator;
use crate::link::{Failure, Lane, Links, Owner, Route, Tag, Transmit};
use crate::protocol::api::offset_commit::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use crate::protocol::api::offset_fetch::{OffsetFetchRequest, NO_OFFSET};
use crate::protocol::error_code::ErrorCode;
use crate::types::{
    ApiVersion, CallId, Identity, LeaderEpoch, PositionEpoch, RequestId, TopicPartition,
};

/// An offset to commit, or one that was committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Committed {
    pub offset: i64,
    pub leader_epoch: LeaderEpoch,
    pub metadata: Option<String>,
}

/// A partition's committed position for the fetcher: under which position epoch it was
/// asked, and the offset and leader epoch (`None`: nothing committed).
pub(crate) type FoundPosition = (TopicPartition, PositionEpoch, Option<(i64, LeaderEpoch)>);

/// The answer to a committed-offsets lookup: per partition, the committed offset if any.
pub(crate) type CommittedResult = Result<HashMap<TopicPartition, Option<Committed>>>;

/// What the commit component has to tell.
#[derive(Debug)]
pub(crate) enum CommitEvent {
    /// Commit `id` finished.
    Committed { id: CallId, result: Result<()> },
    /// The application's committed-offsets lookup `id` finished.
    Offsets { id: CallId, result: CommittedResult },
    /// Committed offsets for the fetcher (`None`: nothing committed), and the partitions
    /// whose lookup failed (to be asked again after a backoff).
    Positions {
        found: Vec<FoundPosition>,
        failed: Vec<(TopicPartition, PositionEpoch)>,
    },
    /// A problem the application should hear about (the fetcher's lookups have no caller).
    Error(Error),
}

/// What the commit component needs from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct CommitConfig {
    pub request_timeout: Duration,
    pub retry_backoff: Backoff,
    /// read_committed: offset fetches ask for stable offsets only (KIP-447).
    pub require_stable: bool,
}

#[derive(Debug)]
struct CommitJob {
    id: CallId,
    offsets: BTreeMap<TopicPartition, Committed>,
    deadline: Instant,
    retry: Retry,
    not_before: Option<Instant>,
    in_flight: Option<RequestId>,
    last_problem: Option<String>,
    /// Its deadline passed while its request was on the wire: the caller was told it timed
    /// out, and the request is left to finish (its answer ignored) so that later commits
    /// still go out after it (invariant 1).
    abandoned: bool,
    /// Who its last request spoke for (set when it is sent).
    sent_as: Option<Identity>,
    /// It was refused with STALE_MEMBER_EPOCH: it is resent only for the partitions the
    /// member still owns (invariant 6).
    owned_only: bool,
}

#[derive(Debug)]
enum FetchFor {
    /// The application's lookup `id`, due by `deadline`.
    User { id: CallId, deadline: Instant },
    /// The fetcher's unpositioned partitions, with their position epochs.
    Positions(HashMap<TopicPartition, PositionEpoch>),
}

#[derive(Debug)]
struct FetchJob {
    purpose: FetchFor,
    partitions: Vec<TopicPartition>,
    retry: Retry,
    not_before: Option<Instant>,
    in_flight: Option<RequestId>,
    last_problem: Option<String>,
    /// The member epoch its last request named the member with (member id and epoch,
    /// OffsetFetch v9+), so the broker checked its membership (invariant 5); `None`: sent
    /// without.
    sent_member_epoch: Option<i32>,
}

#[derive(Debug, Clone, Copy)]
enum Sent {
    Commit { route: Route },
    Fetch { route: Route },
}

/// The commits and offset fetches of one group.
pub(crate) struct Commits {
    cfg: CommitConfig,
    identity: Identity,
    /// The partitions the consumer owns now; `None` until told (everything counts as
    /// owned).
    owned: Option<HashSet<TopicPartition>>,
    commits: VecDeque<CommitJob>,
    fetches: Vec<FetchJob>,
    sent: HashMap<RequestId, Sent>,
    events: VecDeque<CommitEvent>,
    jitter: Box<dyn Jitter + Send>,
    next_req: RequestId,
}

impl Commits {
    /// Nothing to do yet.
    pub fn new(cfg: CommitConfig, jitter: Box<dyn Jitter + Send>) -> Commits {
        Commits {
            cfg,
            identity: Identity::Outsider,
            owned: None,
            commits: VecDeque::new(),
            fetches: Vec::new(),
            sent: HashMap::new(),
            events: VecDeque::new(),
            jitter,
            next_req: RequestId(1),
        }
    }

    /// Who later commits speak for: the member's generation (or epoch) and ids, or an
    /// outsider's. Commits not yet sent go out with it.
    pub fn set_identity(&mut self, identity: Identity) {
        self.identity = identity;
    }

    /// The partitions the consumer owns now (assigned by the group, or manually), to be
    /// called whenever they change. A commit refused with STALE_MEMBER_EPOCH is resent only
    /// for these (invariant 6); one waiting to be resent with none of them left fails now.
    /// Until the first call every partition counts as owned.
    pub fn set_assignment(&mut self, owned: &[TopicPartition]) {
        self.owned = Some(owned.iter().cloned().collect());
        let mut i = 0;
        while i < self.commits.len() {
            let job = &mut self.commits[i];
            if job.owned_only && job.in_flight.is_none() && !job.abandoned {
                let dropped = drop_unowned(job, self.owned.as_ref());
                if !dropped.is_empty() && job.offsets.is_empty() {
                    if let Some(job) = self.commits.remove(i) {
                        self.fail_revoked(job, &dropped);
                    }
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Ends `job`, whose partitions were all revoked while it waited to be resent.
    fn fail_revoked(&mut self, job: CommitJob, dropped: &[TopicPartition]) {
        let list: Vec<String> = dropped.iter().map(ToString::to_string).collect();
        let mut e = Error::broker(
            ErrorCode::STALE_MEMBER_EPOCH,
            format!(
                "the commit was refused because the member epoch moved on, and its partitions ({}) were revoked or reassigned meanwhile; they are not committed again, since that could overwrite their new owner's progress",
                list.join(", ")
            ),
        );
        e.set_kind(ErrorKind::CommitFailed);
        log::warn!("{e}");
        self.events.push_back(CommitEvent::Committed {
            id: job.id,
            result: Err(e),
        });
    }

    /// Queues commit `id` of `offsets`, due by `deadline`.
    pub fn commit(
        &mut self,
        id: CallId,
        offsets: BTreeMap<TopicPartition, Committed>,
        deadline: Instant,
    ) {
        if offsets.is_empty() {
            self.events
                .push_back(CommitEvent::Committed { id, result: Ok(()) });
            return;
        }
        self.commits.push_back(CommitJob {
            id,
            offsets,
            deadline,
            retry: Retry::default(),
            not_before: None,
            in_flight: None,
            last_problem: None,
            abandoned: false,
            sent_as: None,
            owned_only: false,
        });
    }

    /// Queues the application's lookup `id` of the committed offsets of `partitions`.
    pub fn fetch(&mut self, id: CallId, partitions: Vec<TopicPartition>, deadline: Instant) {
        if partitions.is_empty() {
            self.events.push_back(CommitEvent::Offsets {
                id,
                result: Ok(HashMap::new()),
            });
            return;
        }
        self.fetches.push(FetchJob {
            purpose: FetchFor::User { id, deadline },
            partitions,
            retry: Retry::default(),
            not_before: None,
            in_flight: None,
            last_problem: None,
            sent_member_epoch: None,
        });
    }

    /// Queues a lookup of committed offsets for the fetcher's unpositioned partitions.
    pub fn fetch_positions(&mut self, partitions: Vec<(TopicPartition, PositionEpoch)>) {
        if partitions.is_empty() {
            return;
        }
        // Joins a lookup not yet sent: one request for every partition waiting.
        if let Some(job) = self
            .fetches
            .iter_mut()
            .find(|j| j.in_flight.is_none() && matches!(j.purpose, FetchFor::Positions(_)))
        {
            if let FetchFor::Positions(epochs) = &mut job.purpose {
                for (tp, e) in partitions {
                    if epochs.insert(tp.clone(), e).is_none() {
                        job.partitions.push(tp);
                    }
                }
            }
            return;
        }
        let list = partitions.iter().map(|(tp, _)| tp.clone()).collect();
        self.fetches.push(FetchJob {
            purpose: FetchFor::Positions(partitions.into_iter().collect()),
            partitions: list,
            retry: Retry::default(),
            not_before: None,
            in_flight: None,
            last_problem: None,
            sent_member_epoch: None,
        });
    }

    /// Whether anything waits for the coordinator.
    fn busy(&self) -> bool {
        !self.commits.is_empty() || !self.fetches.is_empty()
    }

    /// The next request to send, if any.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
    ) -> Option<Transmit> {
        if !self.busy() {
            return None;
        }
        let node = coordinator.node()?;
        let route = Route::node(node, Lane::Group);
        let versions = links.ready(route, now)?;
        // The oldest commit first, alone (invariant 1).
        if let Some(job) = self.commits.front_mut() {
            if job.in_flight.is_none() && job.not_before.is_none_or(|t| now >= t) {
                if job.owned_only {
                    // Revoked since the STALE_MEMBER_EPOCH answer: not resent (invariant 6).
                    let dropped = drop_unowned(job, self.owned.as_ref());
                    if !dropped.is_empty() && job.offsets.is_empty() {
                        if let Some(job) = self.commits.pop_front() {
                            self.fail_revoked(job, &dropped);
                        }
                        return None;
                    }
                }
                let Some(v) = versions.pick::<OffsetCommitRequest>() else {
                    let e =
                        Error::unsupported(versions.unsupported::<OffsetCommitRequest>(route.peer));
                    let id = job.id;
                    self.commits.pop_front();
                    self.events
                        .push_back(CommitEvent::Committed { id, result: Err(e) });
                    return None;
                };
                let req = commit_request(coordinator.group_id(), &self.identity, &job.offsets);
                let rid = self.next_req.take_next();
                job.in_flight = Some(rid);
                job.sent_as = Some(self.identity.clone());
                self.sent.insert(rid, Sent::Commit { route });
                return Some(Transmit::new(
                    route,
                    &req,
                    v,
                    Tag {
                        owner: Owner::Commits,
                        id: rid,
                    },
                    self.cfg.request_timeout,
                ));
            }
        }
        let i = self
            .fetches
            .iter()
            .position(|j| j.in_flight.is_none() && j.not_before.is_none_or(|t| now >= t))?;
        let Some(v) = versions.pick::<OffsetFetchRequest>() else {
            let e = Error::unsupported(versions.unsupported::<OffsetFetchRequest>(route.peer));
            let job = self.fetches.swap_remove(i);
            self.fetch_failed_for_good(job, e);
            return None;
        };
        let job = &mut self.fetches[i];
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in &job.partitions {
            topics.entry(tp.topic()).or_default().push(tp.partition());
        }
        let mut req = OffsetFetchRequest::for_group(coordinator.group_id(), topics, v.get());
        if v.get() >= 7 {
            req.require_stable = self.cfg.require_stable;
        }
        // A consumer-protocol member names itself (v9+); the broker then checks that its
        // epoch is current (invariant 5). Others (classic members, outsiders) send null / -1.
        let as_member = self
            .identity
            .kip848_member()
            .filter(|_| v.get() >= MEMBER_FETCH_VERSION);
        if let Some((member_id, epoch)) = as_member {
            if let Some(g) = req.groups.first_mut() {
                g.member_id = Some(member_id.as_str().to_owned());
                g.member_epoch = epoch.0;
            }
        }
        let as_member = as_member.map(|(_, epoch)| epoch.0);
        let rid = self.next_req.take_next();
        job.in_flight = Some(rid);
        job.sent_member_epoch = as_member;
        self.sent.insert(rid, Sent::Fetch { route });
        Some(Transmit::new(
            route,
            &req,
            v,
            Tag {
                owner: Owner::Commits,
                id: rid,
            },
            self.cfg.request_timeout,
        ))
    }

    fn fetch_failed_for_good(&mut self, job: FetchJob, e: Error) {
        match job.purpose {
            FetchFor::User { id, .. } => self
                .events
                .push_back(CommitEvent::Offsets { id, result: Err(e) }),
            FetchFor::Positions(epochs) => {
                self.events.push_back(CommitEvent::Error(e));
                self.events.push_back(CommitEvent::Positions {
                    found: Vec::new(),
                    failed: epochs.into_iter().collect(),
                });
            }
        }
    }

    /// The offset fetch `rid` (job `pos`) named the member, and the broker refused it with
    /// `code` (STALE_MEMBER_EPOCH or UNKNOWN_MEMBER_ID): the member's epoch moved on or it
    /// is rejoining (invariant 5). The fetcher's partitions are reported failed, never as
    /// nothing committed; the application's lookup is retried with the identity current
    /// then.
    fn fetch_refused_membership(
        &mut self,
        pos: usize,
        rid: RequestId,
        code: ErrorCode,
        epoch: i32,
        now: Instant,
    ) {
        let why =
            format!("OffsetFetch: {code} (member epoch {epoch} is not current at the coordinator)");
        match self.fetches[pos].purpose {
            FetchFor::User { .. } => {
                log::debug!("{why}; asking again");
                self.retry_request(rid, why, now);
            }
            FetchFor::Positions(_) => {
                log::debug!("{why}; the fetcher asks again");
                let job = self.fetches.swap_remove(pos);
                if let FetchFor::Positions(epochs) = job.purpose {
                    self.events.push_back(CommitEvent::Positions {
                        found: Vec::new(),
                        failed: epochs.into_iter().collect(),
                    });
                }
            }
        }
    }

    /// Request `rid` got no answer: retry after a backoff; the coordinator's link failed.
    pub fn handle_failure(
        &mut self,
        rid: RequestId,
        failure: &Failure,
        now: Instant,
        coordinator: &mut Coordinator,
    ) {
        let Some(sent) = self.sent.remove(&rid) else {
            return;
        };
        let why = format!("{}: {failure}", route_of(sent));
        coordinator.mark_unknown(&why, now);
        self.retry_request(rid, why, now);
    }

    fn retry_request(&mut self, rid: RequestId, why: String, now: Instant) {
        let policy = self.cfg.retry_backoff;
        if let Some(pos) = self.commits.iter().position(|j| j.in_flight == Some(rid)) {
            if self.commits[pos].abandoned {
                // Its caller has heard of the timeout: no retry.
                self.commits.remove(pos);
                return;
            }
            let job = &mut self.commits[pos];
            job.in_flight = None;
            job.not_before = Some(now + job.retry.failed(&policy, &mut *self.jitter));
            job.last_problem = Some(why);
            return;
        }
        if let Some(job) = self.fetches.iter_mut().find(|j| j.in_flight == Some(rid)) {
            job.in_flight = None;
            job.not_before = Some(now + job.retry.failed(&policy, &mut *self.jitter));
            job.last_problem = Some(why);
        }
    }

    /// Applies the answer to request `rid`.
    pub fn handle_response(
        &mut self,
        rid: RequestId,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
    ) {
        let Some(sent) = self.sent.remove(&rid) else {
            return;
        };
        match sent {
            Sent::Commit { route } => {
                self.on_commit(rid, route, version, body, now, links, coordinator)
            }
            Sent::Fetch { route } => {
                self.on_fetch(rid, route, version, body, now, links, coordinator)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_commit(
        &mut self,
        rid: RequestId,
        route: Route,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
    ) {
        let resp = match links.decode::<OffsetCommitRequest>(route, version, body, now) {
            Ok(r) => r,
            Err(e) => {
                self.retry_request(rid, format!("malformed OffsetCommit response: {e}"), now);
                return;
            }
        };
        let Some(pos) = self.commits.iter().position(|j| j.in_flight == Some(rid)) else {
            return;
        };
        if self.commits[pos].abandoned {
            // Its caller has heard of the timeout; later commits may go now.
            self.commits.remove(pos);
            return;
        }
        let group = coordinator.group_id().to_owned();
        let mut answers: HashMap<(&str, i32), ErrorCode> = HashMap::new();
        for t in &resp.topics {
            for p in &t.partitions {
                answers.insert(
                    (t.name.as_str(), p.partition_index),
                    ErrorCode::from_code(p.error_code),
                );
            }
        }
        let job = &self.commits[pos];
        let sent_as = job.sent_as.clone().unwrap_or_else(|| self.identity.clone());
        let mut retriable: Option<ErrorCode> = None;
        let mut stale = false;
        let mut failed: Option<(TopicPartition, ErrorCode)> = None;
        for tp in job.offsets.keys() {
            let code = answers
                .get(&(tp.topic(), tp.partition()))
                .copied()
                .unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR);
            match code {
                ErrorCode::None => {}
                ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR => {
                    retriable = Some(code);
                }
                // The member epoch moved on: the safe retry of invariant 6.
                ErrorCode::STALE_MEMBER_EPOCH if sent_as.is_kip848() => stale = true,
                c if c.is_retriable() => retriable = retriable.or(Some(c)),
                c => {
                    failed.get_or_insert((tp.clone(), c));
                }
            }
        }
        if let Some((tp, code)) = failed {
            let Some(job) = self.commits.remove(pos) else {
                return;
            };
            let e = commit_error(&group, &sent_as, &tp, code);
            log::warn!("{e}");
            self.events.push_back(CommitEvent::Committed {
                id: job.id,
                result: Err(e),
            });
            return;
        }
        if stale {
            let job = &mut self.commits[pos];
            job.owned_only = true;
            let dropped = drop_unowned(job, self.owned.as_ref());
            if job.offsets.is_empty() {
                if let Some(job) = self.commits.remove(pos) {
                    self.fail_revoked(job, &dropped);
                }
                return;
            }
            log::info!(
                "group {group}: commit refused with STALE_MEMBER_EPOCH at member epoch {} of member {}; retrying {} partitions with the current epoch{}",
                sent_as.generation_or_epoch(),
                sent_as.member_id(),
                job.offsets.len(),
                if dropped.is_empty() {
                    String::new()
                } else {
                    format!(" ({} revoked meanwhile, dropped)", dropped.len())
                }
            );
        }
        if let Some(code) = retriable {
            if matches!(
                code,
                ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR
            ) {
                coordinator.mark_unknown(&format!("OffsetCommit: {code}"), now);
            }
            self.retry_request(rid, format!("OffsetCommit: {code}"), now);
            return;
        }
        if stale {
            let why = format!(
                "OffsetCommit: {} (member epoch {} is no longer current)",
                ErrorCode::STALE_MEMBER_EPOCH,
                sent_as.generation_or_epoch()
            );
            self.retry_request(rid, why, now);
            return;
        }
        if let Some(job) = self.commits.remove(pos) {
            log::debug!("group {group}: committed {} partitions", job.offsets.len());
            self.events.push_back(CommitEvent::Committed {
                id: job.id,
                result: Ok(()),
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_fetch(
        &mut self,
        rid: RequestId,
        route: Route,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
    ) {
        let resp = match links.decode::<OffsetFetchRequest>(route, version, body, now) {
            Ok(r) => r,
            Err(e) => {
                self.retry_request(rid, format!("malformed OffsetFetch response: {e}"), now);
                return;
            }
        };
        let group = coordinator.group_id().to_owned();
        let Some(pos) = self.fetches.iter().position(|j| j.in_flight == Some(rid)) else {
            return;
        };
        let (top, offsets) = match resp.group(&group, version.get()) {
            Ok(x) => x,
            Err(e) => {
                self.retry_request(rid, format!("OffsetFetch: {e}"), now);
                return;
            }
        };
        let top = ErrorCode::from_code(top);
        let sent_epoch = self.fetches[pos].sent_member_epoch;
        let as_member = sent_epoch.is_some();
        if let Some(epoch) = sent_epoch.filter(|_| is_membership_refusal(top)) {
            self.fetch_refused_membership(pos, rid, top, epoch, now);
            return;
        }
        if top.is_err() {
            if top.is_retriable() {
                if matches!(
                    top,
                    ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR
                ) {
                    coordinator.mark_unknown(&format!("OffsetFetch: {top}"), now);
                }
                self.retry_request(rid, format!("OffsetFetch: {top}"), now);
            } else {
                let job = self.fetches.swap_remove(pos);
                let e = Error::broker(
                    top,
                    format!("reading the committed offsets of group {group}"),
                );
                self.fetch_failed_for_good(job, e);
            }
            return;
        }
        let mut found: HashMap<TopicPartition, Option<Committed>> = HashMap::new();
        let mut unstable = None;
        let mut membership = None;
        let mut failed = None;
        let job = &self.fetches[pos];
        // The asked partitions by name, so the answer is matched in one pass (a classic
        // assignment can ask for tens of thousands).
        let asked: HashMap<(&str, i32), &TopicPartition> = job
            .partitions
            .iter()
            .map(|tp| ((tp.topic(), tp.partition()), tp))
            .collect();
        for o in &offsets {
            let Some(&tp) = asked.get(&(o.topic, o.partition)) else {
                continue;
            };
            match ErrorCode::from_code(o.error_code) {
                ErrorCode::None => {
                    let c = (o.offset != NO_OFFSET && o.offset >= 0).then(|| Committed {
                        offset: o.offset,
                        leader_epoch: LeaderEpoch(o.leader_epoch),
                        metadata: o.metadata.map(str::to_owned),
                    });
                    found.insert(tp.clone(), c);
                }
                // The topic is gone (or never existed): nothing is committed for it.
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION => {
                    found.insert(tp.clone(), None);
                }
                c if as_member && is_membership_refusal(c) => membership = Some(c),
                c if c.is_retriable() => unstable = Some(c),
                c => {
                    failed.get_or_insert((tp.clone(), c));
                }
            }
        }
        if let Some((tp, code)) = failed {
            let job = self.fetches.swap_remove(pos);
            let e = Error::broker(
                code,
                format!("reading the committed offset of {tp} in group {group}"),
            )
            .with_partition(tp);
            self.fetch_failed_for_good(job, e);
            return;
        }
        if let Some((code, epoch)) = membership.zip(sent_epoch) {
            self.fetch_refused_membership(pos, rid, code, epoch, now);
            return;
        }
        let missing = job.partitions.iter().any(|tp| !found.contains_key(tp));
        if unstable.is_some() || missing {
            let why = match unstable {
                Some(c) => format!("OffsetFetch: {c}"),
                None => "OffsetFetch: partitions missing from the answer".to_owned(),
            };
            self.retry_request(rid, why, now);
            return;
        }
        let job = self.fetches.swap_remove(pos);
        match job.purpose {
            FetchFor::User { id, .. } => self.events.push_back(CommitEvent::Offsets {
                id,
                result: Ok(found),
            }),
            FetchFor::Positions(epochs) => {
                let found = epochs
                    .into_iter()
                    .map(|(tp, e)| {
                        let c = found
                            .get(&tp)
                            .and_then(|c| c.as_ref())
                            .map(|c| (c.offset, c.leader_epoch));
                        (tp, e, c)
                    })
                    .collect();
                self.events.push_back(CommitEvent::Positions {
                    found,
                    failed: Vec::new(),
                });
            }
        }
    }

    /// Ends the application's requests whose deadline passed, whether or not a request of
    /// theirs is on the wire (invariant 2).
    pub fn handle_timeout(&mut self, now: Instant, coordinator: &Coordinator) {
        let sent = &self.sent;
        let reason = |last: &Option<String>, in_flight: Option<RequestId>| -> String {
            if let Some(e) = coordinator.fatal() {
                return format!(": {e}");
            }
            let waiting = in_flight.and_then(|rid| sent.get(&rid)).map(|s| match s {
                Sent::Commit { route } => {
                    format!("no answer yet to the OffsetCommit sent to {route}")
                }
                Sent::Fetch { route } => {
                    format!("no answer yet to the OffsetFetch sent to {route}")
                }
            });
            match (waiting, last.as_deref().or(coordinator.last_problem())) {
                (Some(w), Some(p)) => format!(" (last problem: {w}; before that: {p})"),
                (Some(p), None) => format!(" (last problem: {p})"),
                (None, Some(p)) => format!(" (last problem: {p})"),
                (None, None) => " (the group coordinator was not found)".to_owned(),
            }
        };
        let mut i = 0;
        while i < self.commits.len() {
            let job = &self.commits[i];
            if now >= job.deadline && !job.abandoned {
                let why = reason(&job.last_problem, job.in_flight);
                let event = CommitEvent::Committed {
                    id: job.id,
                    result: Err(Error::timeout(format!("committing offsets timed out{why}"))),
                };
                if job.in_flight.is_some() {
                    // Left to finish on the wire, ahead of later commits (invariant 1).
                    self.commits[i].abandoned = true;
                } else {
                    self.commits.remove(i);
                    self.events.push_back(event);
                    continue;
                }
                self.events.push_back(event);
            }
            i += 1;
        }
        let mut i = 0;
        while i < self.fetches.len() {
            let job = &self.fetches[i];
            // A lookup's answer changes nothing: one still on the wire is simply ignored.
            let expired = match &job.purpose {
                FetchFor::User { deadline, .. } => now >= *deadline,
                FetchFor::Positions(_) => false,
            };
            if expired {
                let why = reason(&job.last_problem, job.in_flight);
                let job = self.fetches.swap_remove(i);
                if let FetchFor::User { id, .. } = job.purpose {
                    self.events.push_back(CommitEvent::Offsets {
                        id,
                        result: Err(Error::timeout(format!(
                            "reading committed offsets timed out{why}"
                        ))),
                    });
                }
                continue;
            }
            i += 1;
        }
        // The coordinator cannot be found for good: the fetcher's lookups hear it now.
        if let Some(e) = coordinator.fatal().cloned() {
            let mut i = 0;
            while i < self.fetches.len() {
                if matches!(self.fetches[i].purpose, FetchFor::Positions(_)) {
                    let job = self.fetches.swap_remove(i);
                    self.fetch_failed_for_good(job, e.clone());
                    continue;
                }
                i += 1;
            }
        }
    }

    /// The next deadline or end of a backoff.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let commits = self
            .commits
            .iter()
            .flat_map(|j| [Some(j.deadline), j.not_before]);
        let fetches = self.fetches.iter().flat_map(|j| {
            let deadline = match j.purpose {
                FetchFor::User { deadline, .. } => Some(deadline),
                FetchFor::Positions(_) => None,
            };
            [deadline, j.not_before]
        });
        commits.chain(fetches).flatten().filter(|t| *t > now).min()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<CommitEvent> {
        self.events.pop_front()
    }
}

fn route_of(s: Sent) -> Route {
    match s {
        Sent::Commit { route } | Sent::Fetch { route } => route,
    }
}

/// The first OffsetFetch version whose group entry names the asking member.
const MEMBER_FETCH_VERSION: i16 = 9;

/// An offset-fetch refusal that says the named member's epoch is not current (invariant 5).
fn is_membership_refusal(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::STALE_MEMBER_EPOCH | ErrorCode::UNKNOWN_MEMBER_ID
    )
}

/// Removes from `job` the partitions not in `owned` (`None`: all are owned), and returns
/// them.
fn drop_unowned(
    job: &mut CommitJob,
    owned: Option<&HashSet<TopicPartition>>,
) -> Vec<TopicPartition> {
    let Some(owned) = owned else {
        return Vec::new();
    };
    let dropped: Vec<TopicPartition> = job
        .offsets
        .keys()
        .filter(|tp| !owned.contains(*tp))
        .cloned()
        .collect();
    for tp in &dropped {
        job.offsets.remove(tp);
    }
    if !dropped.is_empty() {
        log::info!(
            "commit {}: not committing {} partitions revoked since the member epoch moved on",
            job.id,
            dropped.len()
        );
    }
    dropped
}

fn commit_request(
    group: &str,
    who: &Identity,
    offsets: &BTreeMap<TopicPartition, Committed>,
) -> OffsetCommitRequest {
    let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
    for (tp, c) in offsets {
        let part = OffsetCommitRequestPartition {
            partition_index: tp.partition(),
            committed_offset: c.offset,
            committed_leader_epoch: c.leader_epoch.0,
            committed_metadata: c.metadata.clone(),
        };
        match topics.last_mut() {
            Some(t) if t.name == tp.topic() => t.partitions.push(part),
            _ => topics.push(OffsetCommitRequestTopic {
                name: tp.topic().to_owned(),
                partitions: vec![part],
            }),
        }
    }
    OffsetCommitRequest {
        group_id: group.to_owned(),
        generation_id_or_member_epoch: who.generation_or_epoch(),
        member_id: who.member_id().to_owned(),
        group_instance_id: who.instance_id().map(str::to_owned),
        retention_time_ms: -1,
        topics,
    }
}

/// The error for a commit the broker refused for good, sent as `identity`. Refusals that
/// say the consumer is not (or no longer) the member it spoke as are `CommitFailed`.
fn commit_error(group: &str, identity: &Identity, tp: &TopicPartition, code: ErrorCode) -> Error {
    let member = identity.in_group();
    // What the number in the request is: the classic generation or the KIP-848 member epoch.
    let epoch = identity.describe_epoch();
    let (kind, text) = match code {
        ErrorCode::REBALANCE_IN_PROGRESS if member => (
            ErrorKind::CommitFailed,
            format!(
                "the commit was refused: group {group} is rebalancing, and its partitions may move; commit in RebalanceListener::on_partitions_revoked (the consumer then still owns them), or after the rebalance with the next poll"
            ),
        ),
        ErrorCode::UNKNOWN_MEMBER_ID if member && identity.is_kip848() => (
            ErrorKind::CommitFailed,
            format!(
                "the commit was refused: this consumer is no longer a member of group {group} (it spoke as member {} in {epoch}); the coordinator fenced or removed it (a missed session, group.consumer.session.timeout.ms on the broker, or max.poll.interval.ms), its partitions may belong to another member now, and the next poll rejoins",
                identity.member_id()
            ),
        ),
        // The coordinator checks the member id first: this consumer is still a member, and
        // only its generation is behind the group's.
        ErrorCode::ILLEGAL_GENERATION if member => (
            ErrorKind::CommitFailed,
            format!(
                "the commit was refused: group {group} has rebalanced, or begun another rebalance, since {epoch} the commit was made in; this consumer is still a member: call poll to finish the rebalance, then commit again (that later commit covers the partitions it keeps; commit the ones that move in RebalanceListener::on_partitions_revoked)"
            ),
        ),
        ErrorCode::UNKNOWN_MEMBER_ID if member => (
            ErrorKind::CommitFailed,
            format!(
                "the commit was refused: this consumer is no longer a member of group {group} in {epoch} (it missed its session or max.poll.interval.ms); its partitions may belong to another member now, and the next poll rejoins"
            ),
        ),
        ErrorCode::STALE_MEMBER_EPOCH => (
            ErrorKind::CommitFailed,
            format!(
                "the commit was refused: {epoch} of this consumer is not the current member epoch in group {group}; its partitions may have moved, so the commit is not repeated"
            ),
        ),
        ErrorCode::GROUP_ID_NOT_FOUND if member => (
            ErrorKind::CommitFailed,
            format!(
                "the commit was refused: group {group} no longer exists at its coordinator (it was deleted or converted), so this consumer ({epoch}) is no longer a member of it; the next poll rejoins"
            ),
        ),
        ErrorCode::GROUP_ID_NOT_FOUND => (
            ErrorKind::Broker,
            format!("the commit was refused: group {group} does not exist at its coordinator"),
        ),
        ErrorCode::FENCED_INSTANCE_ID => (
            ErrorKind::CommitFailed,
            format!(
                "the commit was refused: another consumer with the same group.instance.id ({}) joined group {group} and fenced this one, which must stop; give every consumer its own group.instance.id",
                identity.instance_id().unwrap_or("none")
            ),
        ),
        ErrorCode::UNKNOWN_MEMBER_ID | ErrorCode::ILLEGAL_GENERATION | ErrorCode::REBALANCE_IN_PROGRESS => (
            ErrorKind::CommitFailed,
            format!(
                "the commit was refused: this consumer committed as no member of group {group}, which has active members (or is rebalancing), and only its members may commit to it. A consumer with manually assigned partitions needs a group.id no members use, or must join the group; a subscribed one committed between memberships (it was fenced or left and rejoins with the next poll), and its partitions may belong to another member now"
            ),
        ),
        ErrorCode::OFFSET_METADATA_TOO_LARGE => (
            ErrorKind::Broker,
            format!("the metadata committed for {tp} is longer than the broker's offset.metadata.max.bytes"),
        ),
        _ => (ErrorKind::Broker, format!("committing the offset of {tp} in group {group}")),
    };
    let mut e = Error::broker(code, text).with_partition(tp.clone());
    e.set_kind(kind);
    e
}

#[cfg(test)]
mod tests;
