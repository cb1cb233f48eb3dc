//! The classic group protocol's member (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), as
//! the Java consumer's `ConsumerCoordinator` behaves. Sans-IO: the I/O loop drives it with
//! the clock as a parameter, carries out its [`Transmit`]s and hands back the answers; every
//! change of the assignment goes to the user thread as a [`MemberEvent::Callback`].
//!
//! ```text
//!                 subscribe
//!   Unsubscribed ───────────▶ NeedJoin ◀─────────────────────────────────────────────────┐
//!        ▲                     │    ▲  before its JoinGroup the member gives up:          │
//!        │ leave()             │    │  eager: Revoked(all owned), cooperative:            │
//!        │ (from any state     │    │  Revoked(topics no longer subscribed), after a      │
//!        │  but Fatal)         │    │  reset: Lost(all owned)                             │
//!        │                     │    │         ┌──────────────┐                            │
//!        │                     │    └─ token ─┤AwaitCallback │◀── callback needed         │
//!        │                     │              └──────────────┘                            │
//!        │                     │ JoinGroup (coordinator known, no callback outstanding,   │
//!        │                     ▼ backoff over, the user polled since a poll expiry)       │
//!        │                 AwaitJoin ─── leader, partition counts unknown ──▶ AwaitMetadata
//!        │                     │ follower, leaderless group,                    │ newer
//!        │                     │ skip_assignment, or counts known               │ metadata or
//!        │                     ▼                                                │ request.timeout.ms
//!        │                 AwaitSync ◀──────────────────────────────────────────┘
//!        │                     │ the assignment                    errors (backoff), ─────┤
//!        │                     ▼                                   generation reset,      │
//!        │               AwaitCallback  cooperative: Revoked(owned − assigned) first,     │
//!        │                     │        then Assigned(assigned − owned);                  │
//!        │                     │        eager: Assigned(assigned)                         │
//!        │                     ▼ token                                                    │
//!        └────────────────  Stable ── REBALANCE_IN_PROGRESS, subscription or partition ───┘
//!                                     count changed, the rebalance revoked something
//!
//!   any state ── fatal error (a setting the broker rejects, fenced, not authorized) ──▶ Fatal
//! ```
//!
//! A generation reset is UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION (JoinGroup, SyncGroup,
//! Heartbeat), a session without heartbeat answers for `session.timeout.ms`, or
//! `max.poll.interval.ms` without a poll (which also sends LeaveGroup, and holds the next
//! JoinGroup until the application polls again).
//!
//! Heartbeats go out on the group lane every `heartbeat.interval.ms` whenever the member
//! has a valid generation and no JoinGroup is in flight (so in AwaitSync, AwaitMetadata,
//! AwaitCallback, NeedJoin before its JoinGroup, and Stable), as Java's heartbeat thread
//! does. JoinGroup and SyncGroup travel on the join lane, which the coordinator may hold
//! for up to the rebalance timeout.
//!
//! Invariants:
//! 1. At most one JoinGroup or SyncGroup is in flight (join lane), at most one Heartbeat
//!    and one LeaveGroup (group lane). Only the answer to a request the member still waits
//!    for (by its id) is applied; answers that predate a rejoin or a leave are dropped, and
//!    a heartbeat answer for an older generation or member id changes nothing.
//! 2. At most one callback is outstanding, and nothing moves on (no JoinGroup, no next
//!    callback, no Stable) before its token comes back; `owned` changes only then.
//! 3. A JoinGroup goes out only after the callback that prepares it was answered: with the
//!    eager protocol the member owns nothing when it joins; with the cooperative one it
//!    still owns only partitions of subscribed topics.
//! 4. A reset generation (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, session loss, poll
//!    interval expiry) turns what the member owns into a Lost callback, never a Revoked
//!    one, before it joins again.
//! 5. After a cooperative assignment takes partitions away, the member revokes them (and
//!    only them) before it is told what it gained, and rejoins at once; a partition it keeps
//!    never appears in a Revoked callback.
//! 6. Every retry waits: a backoff that grows with consecutive failures, except the first
//!    retry after MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or
//!    REBALANCE_IN_PROGRESS on SyncGroup (immediate, as in Java; repeats back off).
//!    `poll_timeout` never names a passed instant, and between heartbeats a stable member
//!    sleeps.
//! 7. Fatal is final: the error is emitted once and nothing is sent afterwards.
//! 8. The state changes only along the diagram's edges ([`MemberState::legal`], checked by
//!    [`MemberCore::transition`]); any other change is a fatal Protocol error naming
//!    `from`, `to` and why (invariant 7), never a log line and carry on.
//!
//! The states carry what they wait for (the callback and what follows it, the JoinGroup
//! or SyncGroup in flight, the leader's subscriptions); what every member keeps (group,
//! ids, events, identity, the LeaveGroup under way, the poll interval) is the
//! [`MemberCore`]'s. `join.rs` gets the member into a generation (JoinGroup, the leader's
//! assignment, SyncGroup), `heartbeat.rs` keeps it there; this file is the state machine:
//! commands, callbacks, resets, leaving.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::{Backoff, Jitter, Retry};
use crate::cluster::{Cluster, Interest};
use crate::error::Error;
use crate::group::assignor::{rebalance_protocol, Assignor, MemberSubscription, RebalanceProtocol};
use crate::group::coordinator::Coordinator;
use crate::group::member::{
    coordinator_link, Awaited, CallbackKind, CallbackToken, LeavePoll, Member, MemberCore,
    MemberState, RebalancePhase, Subscription,
};
use crate::link::{Failure, Lane, Links, Route, Transmit};
use crate::protocol::api::heartbeat::HeartbeatRequest;
use crate::protocol::api::join_group::JoinGroupRequest;
use crate::protocol::api::leave_group::LeaveGroupRequest;
use crate::protocol::api::sync_group::{SyncGroupRequest, SyncGroupRequestAssignment};
use crate::protocol::api::Api;
use crate::protocol::error_code::ErrorCode;
use crate::types::{
    ApiVersion, GenerationId, Identity, MemberId, MetadataGeneration, RequestId, TopicPartition,
};

mod heartbeat;
mod join;

use heartbeat::HeartbeatSent;
use join::TopicSnapshot;

/// What the member needs from the configuration.
pub(crate) struct ClassicConfig {
    /// `group.instance.id` (static membership).
    pub instance_id: Option<String>,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// `max.poll.interval.ms`, sent as the JoinGroup rebalance timeout.
    pub rebalance_timeout: Duration,
    /// `heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`.
    pub max_poll_interval: Duration,
    /// `partition.assignment.strategy`, in preference order; never empty.
    pub assignors: Vec<Box<dyn Assignor>>,
    /// `client.rack`, sent as the subscription's rack id.
    pub client_rack: Option<String>,
    /// `retry.backoff.ms` .. `retry.backoff.max.ms`.
    pub retry_backoff: Backoff,
    /// `request.timeout.ms`.
    pub request_timeout: Duration,
}

/// What to do once the outstanding callback's token is back.
#[derive(Debug)]
enum Then {
    /// Send JoinGroup (the callback prepared the join).
    Join,
    /// Tell the user thread what it gained (after a cooperative revocation).
    Assign {
        added: BTreeSet<TopicPartition>,
        owned: BTreeSet<TopicPartition>,
    },
    /// The rebalance is complete: stable, or rejoin if that was asked for meanwhile.
    Rest,
}

/// A SyncGroup to send or in flight.
#[derive(Debug)]
struct Sync {
    protocol: String,
    assignments: Vec<SyncGroupRequestAssignment>,
    /// The leader's view of the topics it assigned (leader only).
    snapshot: Option<BTreeMap<String, TopicSnapshot>>,
    sent: Option<(RequestId, Route)>,
}

/// What the leader keeps while it waits for partition counts.
#[derive(Debug)]
struct Leading {
    protocol: String,
    /// The members whose subscriptions decoded: the assignor's input.
    members: Vec<MemberSubscription>,
    /// The members whose subscriptions did not decode: they get an empty assignment.
    undecodable: Vec<String>,
}

#[derive(Debug)]
enum State {
    /// No subscription.
    Unsubscribed,
    /// Waits to send JoinGroup: for the callback that prepares it, the coordinator, the
    /// join link, a backoff, or (after a poll interval expiry) the user polling again.
    NeedJoin,
    /// Waits for the user thread to finish `callback`.
    AwaitCallback {
        callback: Awaited<Then>,
        /// The reset count when the callback was emitted: a later reset voids its `then`.
        resets: u64,
    },
    /// Waits for the JoinGroup answer.
    AwaitJoin { id: RequestId, route: Route },
    /// The leader waits for the partition counts of the group's topics (bounded).
    AwaitMetadata {
        leading: Leading,
        since: Instant,
        seen: MetadataGeneration,
    },
    /// Waits to send SyncGroup, or for its answer.
    AwaitSync(Sync),
    /// In the group with an assignment; heartbeats.
    Stable,
    /// Stopped for good.
    Fatal,
}

/// A state's name, for logs and the transition check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Unsubscribed,
    NeedJoin,
    AwaitCallback,
    AwaitJoin,
    AwaitMetadata,
    AwaitSync,
    Stable,
    Fatal,
}

impl MemberState for State {
    type Kind = Kind;

    fn kind(&self) -> Kind {
        match self {
            State::Unsubscribed => Kind::Unsubscribed,
            State::NeedJoin => Kind::NeedJoin,
            State::AwaitCallback { .. } => Kind::AwaitCallback,
            State::AwaitJoin { .. } => Kind::AwaitJoin,
            State::AwaitMetadata { .. } => Kind::AwaitMetadata,
            State::AwaitSync(_) => Kind::AwaitSync,
            State::Stable => Kind::Stable,
            State::Fatal => Kind::Fatal,
        }
    }

    /// Whether the diagram has an edge `from` → `to`.
    fn legal(from: Kind, to: Kind) -> bool {
        use Kind::*;
        match (from, to) {
            (Fatal, _) => false,
            (_, Fatal) | (_, Unsubscribed) => true,
            (Unsubscribed, NeedJoin) => true,
            (NeedJoin, AwaitCallback | AwaitJoin) => true,
            (AwaitCallback, NeedJoin | AwaitCallback | Stable) => true,
            (AwaitJoin, NeedJoin | AwaitMetadata | AwaitSync) => true,
            (AwaitMetadata, NeedJoin | AwaitSync) => true,
            (AwaitSync, NeedJoin | AwaitCallback) => true,
            (Stable, NeedJoin) => true,
            _ => false,
        }
    }
}

impl Kind {
    /// What the edge `from` → `to` means for the rebalance metrics: a JoinGroup starts a
    /// rebalance (as in Java, one under way goes on), the SyncGroup answer with the
    /// assignment completes it, and going back to join (an error answer, a reset),
    /// leaving or stopping in between fails it.
    fn rebalance_phase(from: Kind, to: Kind) -> Option<RebalancePhase> {
        use Kind::*;
        match (from, to) {
            (_, AwaitJoin) => Some(RebalancePhase::Started),
            (AwaitSync, AwaitCallback) => Some(RebalancePhase::Completed),
            (AwaitJoin | AwaitMetadata | AwaitSync, NeedJoin | Unsubscribed | Fatal) => {
                Some(RebalancePhase::Failed)
            }
            _ => None,
        }
    }
}

/// One member of a classic-protocol consumer group.
pub(crate) struct ClassicMember {
    cfg: ClassicConfig,
    protocol: RebalanceProtocol,
    jitter: Box<dyn Jitter + Send>,
    /// What every member keeps: the group, ids, events, identity, the leave, the poll
    /// interval.
    core: MemberCore,
    state: State,
    subscription: Option<Subscription>,
    /// The subscribed topics (a pattern's: those the metadata shows that match).
    topics: BTreeSet<String>,
    /// The topics the last JoinGroup carried.
    joined_topics: Option<BTreeSet<String>>,
    /// The leader's: every topic the group subscribes to.
    group_topics: BTreeSet<String>,
    /// The subscription changed: the cluster's interest and topic mode need updating.
    cluster_dirty: bool,
    interest_dirty: bool,
    /// The metadata generation last looked at.
    seen_metadata: Option<MetadataGeneration>,
    /// A pattern subscription joins only after metadata newer than this.
    pattern_wait: Option<MetadataGeneration>,
    generation: GenerationId,
    member_id: MemberId,
    protocol_name: Option<String>,
    owned: BTreeSet<TopicPartition>,
    /// A rejoin was asked for while a rebalance or callback was under way.
    rejoin_needed: bool,
    rejoin_reason: String,
    /// The next JoinGroup must first be prepared (revoke or lose partitions).
    needs_join_prepare: bool,
    /// How many times the generation was reset.
    resets: u64,
    not_before: Option<Instant>,
    join_retry: Retry,
    heartbeat: Option<HeartbeatSent>,
    heartbeat_due: Option<Instant>,
    heartbeat_retry: Retry,
    /// The last proof that the coordinator keeps the member's session.
    session_alive: Option<Instant>,
    /// The leader's: what its assignment used of the metadata, per topic.
    assignment_snapshot: Option<BTreeMap<String, TopicSnapshot>>,
    /// The JoinGroup was answered MEMBER_ID_REQUIRED: joining again with the given id is
    /// the join's second step, not a failed rebalance (for the metrics).
    joining_with_given_id: bool,
}

impl Member for ClassicMember {
    /// Replaces the subscription; starts joining, or rejoins if the subscribed topics
    /// changed (noticed at the next `handle_timeout` or `poll_transmit`, which see the
    /// metadata a pattern is matched against).
    fn subscribe(&mut self, sub: Subscription, now: Instant) {
        if self.core.refuses_subscription() {
            return;
        }
        self.user_polled(now);
        if let Subscription::Topics(t) = &sub {
            self.topics = t.clone();
        }
        self.subscription = Some(sub);
        self.cluster_dirty = true;
        if matches!(self.state, State::Unsubscribed) {
            self.rejoin_needed = true;
            self.rejoin_reason = "subscribed".to_owned();
            self.needs_join_prepare = true;
            self.not_before = None;
            self.joined_topics = None;
            self.transition(State::NeedJoin, "subscribed");
            self.advance();
        }
    }

    /// Leaves the group (unsubscribe or close). The user thread has already run the
    /// revoke or lost callback and committed, so no callback comes from here. A dynamic
    /// member with a member id sends LeaveGroup (a static one does not, as in Java);
    /// [`MemberEvent::Left`] follows once it is answered or failed, or at once when none is
    /// sent. An outstanding callback is forgotten.
    fn leave(&mut self, now: Instant) {
        let member_id = std::mem::take(&mut self.member_id);
        let fatal = self.is_fatal();
        if !fatal && !matches!(self.state, State::Unsubscribed) {
            self.transition(State::Unsubscribed, "leaving the group");
        }
        self.heartbeat = None;
        self.heartbeat_due = None;
        self.session_alive = None;
        self.subscription = None;
        self.topics.clear();
        self.joined_topics = None;
        self.group_topics.clear();
        self.cluster_dirty = true;
        self.generation = GenerationId::UNKNOWN;
        self.protocol_name = None;
        self.owned.clear();
        self.rejoin_needed = false;
        self.needs_join_prepare = false;
        self.not_before = None;
        self.core.clear_poll_expiry();
        self.assignment_snapshot = None;
        self.resets += 1;
        self.core.set_identity(Identity::Outsider);
        if self.cfg.instance_id.is_none() && !member_id.is_empty() && !fatal {
            log::info!(
                "group {}: member {member_id} leaves the group",
                self.core.group()
            );
            self.core.start_leave(
                member_id,
                "the consumer unsubscribed or is closing",
                true,
                now,
            );
        } else {
            self.core.left();
        }
    }

    /// The user thread finished callback `token`. A token that is not the outstanding one
    /// is ignored.
    fn callback_done(&mut self, token: CallbackToken, now: Instant) {
        let outstanding = match &self.state {
            State::AwaitCallback { callback, .. } => Some(callback.token),
            _ => None,
        };
        if !self.core.is_outstanding(token, outstanding) {
            return;
        }
        // The user thread runs callbacks from poll: it is polling.
        self.user_polled(now);
        if self.core.clear_poll_expiry() {
            log::info!("group {}: the application polls again", self.core.group());
        }
        // Keep the state's kind (for the transition check) while taking its contents.
        let State::AwaitCallback { callback, resets } = &mut self.state else {
            unreachable!("checked above");
        };
        let (owned_after, resets) = (std::mem::take(&mut callback.owned_after), *resets);
        let then = std::mem::replace(&mut callback.then, Then::Rest);
        self.owned = owned_after;
        let voided = resets != self.resets;
        match then {
            Then::Assign { added, owned } if !voided => {
                self.emit(CallbackKind::Assigned, added, owned, Then::Rest);
            }
            Then::Rest if !voided => self.rest(),
            _ => {
                self.transition(State::NeedJoin, "callback done");
                self.advance();
            }
        }
    }

    /// The last instant the application called poll.
    fn user_polled(&mut self, at: Instant) {
        self.core.user_polled(at);
    }

    fn core(&self) -> &MemberCore {
        &self.core
    }

    fn core_mut(&mut self) -> &mut MemberCore {
        &mut self.core
    }

    /// The next request to send, if any.
    fn poll_transmit(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
        cluster: &mut Cluster,
    ) -> Option<Transmit> {
        self.core.learn_group(coordinator);
        self.sync_cluster(cluster);
        self.check_metadata(now, cluster);
        self.advance();
        if let Some(t) = self.poll_leave(now, links, coordinator) {
            return Some(t);
        }
        let t = match self.state {
            State::NeedJoin => self.poll_join(now, links, coordinator, cluster),
            State::AwaitSync(Sync { sent: None, .. }) => self.poll_sync(now, links, coordinator),
            _ => None,
        };
        if t.is_some() {
            return t;
        }
        self.poll_heartbeat(now, links, coordinator)
    }

    /// Applies the answer to request `id`.
    fn handle_response(
        &mut self,
        id: RequestId,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
        cluster: &mut Cluster,
    ) {
        self.core.learn_group(coordinator);
        match &self.state {
            State::AwaitJoin { id: want, route } if *want == id => {
                let route = *route;
                match links.decode::<JoinGroupRequest>(route, version, body, now) {
                    Ok(resp) => self.on_join(resp, now, coordinator, cluster),
                    Err(e) => self.malformed("JoinGroup", e, now),
                }
            }
            State::AwaitSync(Sync {
                sent: Some((want, route)),
                ..
            }) if *want == id => {
                let route = *route;
                match links.decode::<SyncGroupRequest>(route, version, body, now) {
                    Ok(resp) => self.on_sync(resp, now, coordinator),
                    Err(e) => self.malformed("SyncGroup", e, now),
                }
            }
            _ if self.heartbeat.as_ref().is_some_and(|h| h.id == id) => {
                let sent = self.heartbeat.take().expect("checked");
                match links.decode::<HeartbeatRequest>(sent.route, version, body, now) {
                    Ok(resp) => self.on_heartbeat(&sent, resp.error_code, now, coordinator),
                    Err(_) => self.heartbeat_failed(now),
                }
            }
            _ if self.core.is_leave(id) => {
                self.core.leave_answered::<LeaveGroupRequest>(
                    version,
                    body,
                    now,
                    links,
                    |resp, job| resp.error_for(job.member_id.as_str(), version.get()),
                );
            }
            _ => log::debug!(
                "group {}: dropping the answer to request {id} (no longer waited for)",
                self.core.group()
            ),
        }
        self.sync_cluster(cluster);
        self.advance();
    }

    /// Request `id` got no answer (its link closed or it timed out).
    fn handle_failure(
        &mut self,
        id: RequestId,
        failure: &Failure,
        now: Instant,
        coordinator: &mut Coordinator,
    ) {
        self.core.learn_group(coordinator);
        match &self.state {
            State::AwaitJoin { id: want, .. } if *want == id => {
                coordinator.mark_unknown(&format!("JoinGroup: {failure}"), now);
                self.retry_join(now, false, "JoinGroup failed");
            }
            State::AwaitSync(Sync {
                sent: Some((want, _)),
                ..
            }) if *want == id => {
                coordinator.mark_unknown(&format!("SyncGroup: {failure}"), now);
                self.retry_join(now, false, "SyncGroup failed");
            }
            _ if self.heartbeat.as_ref().is_some_and(|h| h.id == id) => {
                self.heartbeat = None;
                coordinator.mark_unknown(&format!("Heartbeat: {failure}"), now);
                self.heartbeat_failed(now);
            }
            _ if self.core.is_leave(id) => {
                self.core
                    .leave_failed("LeaveGroup", failure, now, coordinator);
            }
            _ => {}
        }
        self.advance();
    }

    /// Time passed: heartbeat and backoff deadlines, the session and the poll interval,
    /// metadata changes.
    fn handle_timeout(&mut self, now: Instant, cluster: &mut Cluster) {
        self.sync_cluster(cluster);
        self.check_metadata(now, cluster);
        self.core.check_leave_deadline(now);
        if self.core.check_poll_interval(now, self.member_active()) {
            self.poll_interval_expired(now);
        }
        if self.heartbeats_allowed() {
            if let Some(alive) = self.session_alive {
                if now >= alive + self.cfg.session_timeout {
                    log::warn!(
                        "group {}: no heartbeat answer within session.timeout.ms ({} ms): the \
                         coordinator has most likely removed member {} from generation {}; its \
                         partitions are lost",
                        self.core.group(),
                        self.cfg.session_timeout.as_millis(),
                        self.member_id,
                        self.generation
                    );
                    self.reset("session timed out without a heartbeat answer", true);
                }
            }
        }
        self.advance();
    }

    /// The next instant `handle_timeout` (or `poll_transmit`) has something to do; `None`
    /// when only an answer, a callback or the user can move the member on.
    fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let mut next = self.core.deadlines(now, self.member_active());
        match &self.state {
            State::Unsubscribed | State::Fatal => return next.next(),
            State::NeedJoin if !self.needs_join_prepare && !self.core.poll_expired() => {
                next.maybe(self.not_before);
            }
            State::AwaitMetadata { since, .. } => next.at(*since + self.cfg.request_timeout),
            _ => {}
        }
        if self.heartbeats_allowed() {
            if self.heartbeat.is_none() {
                next.maybe(self.heartbeat_due);
            }
            next.maybe(self.session_alive.map(|t| t + self.cfg.session_timeout));
        }
        next.next()
    }
}

impl ClassicMember {
    /// A member with no subscription yet.
    pub fn new(cfg: ClassicConfig, jitter: Box<dyn Jitter + Send>) -> ClassicMember {
        assert!(
            !cfg.assignors.is_empty(),
            "partition.assignment.strategy names no assignor"
        );
        let protocol = rebalance_protocol(&cfg.assignors);
        let identity = Identity::classic(
            GenerationId::UNKNOWN,
            MemberId::none(),
            cfg.instance_id.clone(),
        );
        let core = MemberCore::new(identity, cfg.max_poll_interval, cfg.request_timeout);
        ClassicMember {
            cfg,
            protocol,
            jitter,
            core,
            state: State::Unsubscribed,
            subscription: None,
            topics: BTreeSet::new(),
            joined_topics: None,
            group_topics: BTreeSet::new(),
            cluster_dirty: false,
            interest_dirty: false,
            seen_metadata: None,
            pattern_wait: None,
            generation: GenerationId::UNKNOWN,
            member_id: MemberId::none(),
            protocol_name: None,
            owned: BTreeSet::new(),
            rejoin_needed: false,
            rejoin_reason: String::new(),
            needs_join_prepare: false,
            resets: 0,
            not_before: None,
            join_retry: Retry::default(),
            heartbeat: None,
            heartbeat_due: None,
            heartbeat_retry: Retry::default(),
            session_alive: None,
            assignment_snapshot: None,
            joining_with_given_id: false,
        }
    }

    /// Who commits speak for right now: the generation of the last completed SyncGroup and
    /// the member id (generation -1 when not in a generation).
    #[cfg(test)]
    pub fn identity(&self) -> Identity {
        self.core.identity().clone()
    }

    /// The partitions the member owns (after the last answered callback), sorted.
    #[cfg(test)]
    pub fn owned(&self) -> Vec<TopicPartition> {
        self.owned.iter().cloned().collect()
    }

    // ----- callbacks ------------------------------------------------------------------

    /// Before a JoinGroup: what the user thread must give up first (Java's
    /// `onJoinPrepare`).
    fn prepare_join(&mut self) {
        self.needs_join_prepare = false;
        self.assignment_snapshot = None;
        if !self.group_topics.is_empty() {
            self.group_topics.clear();
            self.interest_dirty = true;
        }
        let owned = self.owned.clone();
        if !self.generation.is_known() || self.member_id.is_empty() {
            if !owned.is_empty() {
                log::info!(
                    "group {}: giving away all assigned partitions as lost since the \
                     generation or member id has been reset: {owned:?}",
                    self.core.group()
                );
                self.emit(CallbackKind::Lost, owned, BTreeSet::new(), Then::Join);
            }
            return;
        }
        match self.protocol {
            RebalanceProtocol::Eager => {
                log::info!(
                    "group {}: revoking previously assigned partitions {owned:?}",
                    self.core.group()
                );
                self.emit(CallbackKind::Revoked, owned, BTreeSet::new(), Then::Join);
            }
            RebalanceProtocol::Cooperative => {
                let (revoked, keep): (BTreeSet<TopicPartition>, BTreeSet<TopicPartition>) = owned
                    .into_iter()
                    .partition(|tp| !self.topics.contains(tp.topic()));
                if !revoked.is_empty() {
                    log::info!(
                        "group {}: revoking partitions of topics no longer subscribed: \
                         {revoked:?}",
                        self.core.group()
                    );
                    self.emit(CallbackKind::Revoked, revoked, keep, Then::Join);
                }
            }
        }
    }

    fn emit(
        &mut self,
        kind: CallbackKind,
        partitions: BTreeSet<TopicPartition>,
        owned_after: BTreeSet<TopicPartition>,
        then: Then,
    ) {
        let callback = self.core.callback(kind, partitions, owned_after, then);
        let why = format!("{} (callback {})", callback.kind, callback.token.0);
        let resets = self.resets;
        self.transition(State::AwaitCallback { callback, resets }, &why);
    }

    /// The rebalance's callbacks are done: stable, or join again if asked meanwhile.
    fn rest(&mut self) {
        if self.rejoin_needed || self.joined_topics.as_ref() != Some(&self.topics) {
            let why = if self.rejoin_reason.is_empty() {
                "rejoin needed".to_owned()
            } else {
                self.rejoin_reason.clone()
            };
            self.transition(State::NeedJoin, &why);
            self.advance();
        } else {
            self.transition(State::Stable, "assignment applied");
        }
    }

    /// Prepares a join waiting for it (emits the callback it needs).
    fn advance(&mut self) {
        if matches!(self.state, State::NeedJoin) && self.needs_join_prepare {
            self.prepare_join();
        }
    }

    /// Asks for a rejoin: at once when stable, else once the rebalance under way is done.
    fn request_rejoin(&mut self, reason: &str) {
        log::info!(
            "group {}: request joining due to: {reason}",
            self.core.group()
        );
        self.rejoin_needed = true;
        self.rejoin_reason = reason.to_owned();
        if matches!(self.state, State::Stable) {
            self.not_before = None;
            self.transition(State::NeedJoin, reason);
            self.advance();
        }
    }

    /// The generation (and perhaps the member id) is no longer valid: what the member owns
    /// is lost, and it joins again.
    fn reset(&mut self, reason: &str, reset_member_id: bool) {
        log::info!(
            "group {}: resetting generation {}{} due to: {reason}",
            self.core.group(),
            self.generation,
            if reset_member_id {
                " and member id"
            } else {
                ""
            }
        );
        self.generation = GenerationId::UNKNOWN;
        if reset_member_id {
            self.member_id = MemberId::none();
        }
        self.protocol_name = None;
        self.resets += 1;
        self.needs_join_prepare = true;
        self.rejoin_needed = true;
        self.rejoin_reason = reason.to_owned();
        self.assignment_snapshot = None;
        self.heartbeat_due = None;
        self.session_alive = None;
        self.core.set_identity(self.reset_identity());
        match self.state {
            State::AwaitCallback { .. } | State::NeedJoin | State::Unsubscribed | State::Fatal => {}
            _ => self.transition(State::NeedJoin, reason),
        }
    }

    fn reset_identity(&self) -> Identity {
        Identity::classic(
            GenerationId::UNKNOWN,
            self.member_id.clone(),
            self.cfg.instance_id.clone(),
        )
    }

    /// `max.poll.interval.ms` passed without a poll: leave (a dynamic member), lose the
    /// partitions, and rejoin only once the application polls again.
    fn poll_interval_expired(&mut self, now: Instant) {
        log::warn!(
            "group {}: consumer poll timeout has expired: the time between calls to poll() was \
             longer than max.poll.interval.ms ({} ms), which typically means the poll loop \
             spends too much time processing records. Increase max.poll.interval.ms or poll \
             more often (process fewer records per poll, max.poll.records). The member leaves \
             the group and rejoins at the next poll.",
            self.core.group(),
            self.core.max_poll_interval().as_millis()
        );
        if self.cfg.instance_id.is_none() && !self.member_id.is_empty() {
            self.core.start_leave(
                self.member_id.clone(),
                "consumer poll timeout has expired.",
                false,
                now,
            );
        }
        self.reset("consumer poll timeout has expired", true);
    }

    // ----- leaving ---------------------------------------------------------------------

    /// Whether the member is in (or joining) the group.
    fn member_active(&self) -> bool {
        self.subscription.is_some() && !matches!(self.state, State::Unsubscribed | State::Fatal)
    }

    fn poll_leave(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
    ) -> Option<Transmit> {
        let poll = self
            .core
            .poll_leave(now, links, coordinator, |group, job, v| {
                LeaveGroupRequest::for_member(
                    group,
                    job.member_id.as_str(),
                    None,
                    Some(job.reason),
                    v.get(),
                )
            });
        match poll {
            LeavePoll::Sent { transmit, .. } => Some(transmit),
            LeavePoll::Idle | LeavePoll::Ended(_) => None,
        }
    }

    // ----- the cluster -------------------------------------------------------------------

    /// Brings the cluster's view in line with the subscription (topic mode, interest), and
    /// reacts to new metadata: a pattern's topics, the leader's partition counts.
    fn sync_cluster(&mut self, cluster: &mut Cluster) {
        if self.cluster_dirty {
            self.cluster_dirty = false;
            let pattern = matches!(self.subscription, Some(Subscription::Pattern(_)));
            cluster.set_all_topics(pattern);
            if pattern {
                cluster.request_update();
                self.pattern_wait = Some(cluster.generation());
            } else {
                self.pattern_wait = None;
            }
            self.seen_metadata = None;
            self.interest_dirty = true;
        }
        let generation = cluster.generation();
        if self.seen_metadata != Some(generation) {
            self.seen_metadata = Some(generation);
            if let Some(sub) = &self.subscription {
                let names = cluster.topic_names();
                let topics = sub.topics(names.iter().map(|t| &**t));
                if topics != self.topics {
                    log::info!(
                        "group {}: subscribed topics now {topics:?} (were {:?})",
                        self.core.group(),
                        self.topics
                    );
                    self.topics = topics;
                    self.interest_dirty = true;
                }
            }
            if let Some(snapshot) = &self.assignment_snapshot {
                let racks = self.has_rack();
                let changed: Vec<String> = snapshot
                    .iter()
                    .filter(|(t, s)| TopicSnapshot::of(cluster, t, racks) != **s)
                    .map(|(t, _)| t.clone())
                    .collect();
                if !changed.is_empty() {
                    self.assignment_snapshot = None;
                    self.request_rejoin(&format!(
                        "cached metadata has changed for topics {changed:?} since the last \
                         assignment"
                    ));
                }
            }
            if self.member_active()
                && self
                    .joined_topics
                    .as_ref()
                    .is_some_and(|j| *j != self.topics)
            {
                self.request_rejoin("the subscription has changed since the last join");
            }
        }
        if self.interest_dirty {
            self.interest_dirty = false;
            if self.subscription.is_none() {
                cluster.clear_interest(Interest::Group);
            } else {
                let all: BTreeSet<&String> = self.topics.iter().chain(&self.group_topics).collect();
                cluster.set_interest(
                    Interest::Group,
                    all.into_iter().map(|t| Arc::from(t.as_str())),
                );
            }
        }
    }

    // ----- small helpers -------------------------------------------------------------

    fn assignor_names(&self) -> String {
        self.cfg
            .assignors
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The message of a fatal broker error: names the group and the setting to look at.
    fn fatal_message(&self, api: &str, code: ErrorCode) -> String {
        let g = self.core.group();
        match code {
            ErrorCode::INVALID_SESSION_TIMEOUT => format!(
                "group {g}: {api} refused session.timeout.ms={}: it is outside what the broker \
                 allows (group.min.session.timeout.ms / group.max.session.timeout.ms)",
                self.cfg.session_timeout.as_millis()
            ),
            ErrorCode::INCONSISTENT_GROUP_PROTOCOL => format!(
                "group {g}: {api}: the group's members support no common assignor: \
                 partition.assignment.strategy offers {}, the group uses others (or another \
                 protocol type)",
                self.assignor_names()
            ),
            ErrorCode::INVALID_GROUP_ID => format!("group {g}: {api}: group.id {g:?} is invalid"),
            ErrorCode::GROUP_AUTHORIZATION_FAILED => format!(
                "group {g}: {api}: not authorized to access the group (group.id={g}; check the \
                 ACLs of the consumer's principal)"
            ),
            ErrorCode::GROUP_MAX_SIZE_REACHED => format!(
                "group {g}: {api}: the group already has the maximum number of members the \
                 broker allows (group.max.size)"
            ),
            ErrorCode::FENCED_INSTANCE_ID => format!(
                "group {g}: {api}: another consumer with group.instance.id={} joined the group \
                 and fenced this one: every consumer needs its own group.instance.id",
                self.cfg.instance_id.as_deref().unwrap_or("")
            ),
            ErrorCode::UNSUPPORTED_VERSION => format!(
                "group {g}: {api}: the broker does not support this request version{}",
                if self.cfg.instance_id.is_some() {
                    "; unset group.instance.id and retry to see if the problem resolves"
                } else {
                    ""
                }
            ),
            c => format!("group {g}: {api} failed with {}", c.name()),
        }
    }

    /// The coordinator's link on `lane` and the version of `A` to speak there, once it is
    /// ready; a broker that speaks none of this client's versions stops the member.
    fn link<A: Api>(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
        lane: Lane,
    ) -> Option<(Route, ApiVersion)> {
        match coordinator_link::<A>(now, links, coordinator, lane)? {
            (route, Ok(v)) => Some((route, v)),
            (_, Err(msg)) => {
                let msg = format!("group {}: {msg}", self.core.group());
                self.fatal(Error::unsupported(msg));
                None
            }
        }
    }

    /// Stops for good: the error goes out once, nothing is sent afterwards.
    fn fatal(&mut self, error: Error) {
        if self.core.fatal(error) {
            self.heartbeat = None;
            self.not_before = None;
            self.transition(State::Fatal, "fatal error");
        }
    }

    /// The one way the state changes: checked against the diagram (an illegal transition
    /// is fatal) and logged with the member id and generation.
    /// The rebalance metrics hear what the edge means ([`Kind::rebalance_phase`]).
    fn transition(&mut self, to: State, why: &str) {
        let who = format!("member {:?} generation {}", self.member_id, self.generation);
        let (from, to_kind) = (self.state.kind(), to.kind());
        if let Err(error) = self.core.transition(&mut self.state, to, &who, why) {
            self.fatal(error);
            return;
        }
        let second_step = std::mem::take(&mut self.joining_with_given_id);
        let phase = Kind::rebalance_phase(from, to_kind)
            .filter(|p| !(second_step && *p == RebalancePhase::Failed));
        self.core.rebalance(phase);
    }
}

#[cfg(test)]
mod tests;
