//! The KIP-848 consumer group protocol's member (`group.protocol=consumer`): one request,
//! ConsumerGroupHeartbeat, carries joining, liveness, acknowledgements and leaving; the
//! broker computes the assignment and the member reconciles towards it, one step at a time.
//! Behaves as the Java client's `ConsumerMembershipManager`, with its state names. Sans-IO:
//! the I/O loop drives it with the clock as a parameter, carries out its [`Transmit`]s and
//! hands back the answers; every change of the assignment goes to the user thread as a
//! [`MemberEvent::Callback`] (see `group::member`).
//!
//! ```text
//!                  subscribe                    epoch > 0, target == owned
//!  Unsubscribed ─────────────▶ Joining ─────────────────────────────────────────▶ Stable
//!       ▲                        │ ▲  target != owned                           │ ▲  │
//!       │                        ▼ │                                             │ │  │ a new
//!       │               ┌──── Reconciling ◀───────────────────────────────────────┘ │  │ target
//!       │               │        │  Revoked(owned − target) ─token─▶                 │  │
//!       │               │        │  Assigned(target − owned) ─token─▶ owned = target  │  │
//!       │               │        ▼                                                   │  │
//!       │               │   Acknowledging ── heartbeat (carries owned) sent ─────────┘  │
//!       │               │        (back to Reconciling if the target moved meanwhile) ◀─┘
//!       │               │
//!       │   FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID (from Joining, Reconciling, Acknowledging,
//!       │   Stable) ──▶ Fenced ── Lost(owned) ─token─▶ Joining (epoch 0, same member id)
//!       │
//!       │  leave() (unsubscribe, close): PrepareLeaving ─▶ Leaving ── heartbeat with epoch
//!       └─────────────────────── -1 (-2 for a static member) answered, failed or not sent ─┘
//!
//!   max.poll.interval.ms without a poll: PrepareLeaving ─▶ Leaving ─▶ Stale, Lost(owned);
//!   the next poll rejoins (Stale ─▶ Joining).
//!   any state ── fatal error (authorization, assignor, regex, group size, ...) ──▶ Fatal
//! ```
//!
//! Heartbeats follow the Java client's rules (protocol reference 1.5, 1.6): the first one
//! and every acknowledgement go out at once, the others every `HeartbeatIntervalMs` the
//! coordinator asked for; a field that did not change since the last heartbeat is sent as
//! null, except in a full request (joining, and the first one after any error or lost
//! answer), which carries everything.
//!
//! Invariants:
//! 1. At most one regular heartbeat is in flight (a leave may go beside it). Only the
//!    answer to the heartbeat the member still waits for is applied, and only if it was
//!    sent since the last rejoin or leave (`Heartbeats::joins`): an answer from before is
//!    dropped, so a late answer never brings back an old epoch.
//! 2. The epoch is never negative outside a leave heartbeat: a success answer with a
//!    negative epoch is ignored.
//! 3. `owned` changes only when a reconciliation completes (after its Assigned callback
//!    came back), and is cleared on fencing and leaving. Heartbeats report `owned` plus
//!    what a running reconciliation adds. So a heartbeat never drops a partition from what
//!    it reports before the Revoked callback for it returned (and auto-commit ran before
//!    that callback), nor one the member is taking: the broker cannot move a partition
//!    whose offsets are not yet committed, or hand over one the member starts fetching. A
//!    reconciliation starts only when no heartbeat is in flight and none failed since the
//!    last answer, so the coordinator's view of what the member owns is settled.
//! 4. The member owns nothing outside its target plus what awaits revocation: a Revoked
//!    callback always comes before the Assigned one, and both before `owned` changes.
//! 5. One reconciliation at a time, and at most one callback outstanding; a newer target
//!    that arrives meanwhile is reconciled after the running one was acknowledged. The
//!    running reconciliation lives in the Reconciling state, so one that a fencing or leave
//!    overtook is dropped with it, and its partitions are reported lost instead.
//! 6. A topic id the metadata cannot name yet stays in the target, pending: it is neither
//!    revoked nor taken; the member asks for metadata and reconciles once it is named.
//! 7. Every retry waits (a growing backoff), and `poll_timeout` never names a passed
//!    instant; a stable member sleeps between heartbeats.
//! 8. Fatal is final: the error is emitted once and nothing is sent afterwards.
//! 9. The state changes only along the diagram's edges ([`MemberState::legal`], checked by
//!    [`MemberCore::transition`]); any other change is a fatal Protocol error naming
//!    `from`, `to` and why (invariant 8), never a log line and carry on.
//!
//! Where things live, as in the Java client: this file is the membership
//! (`ConsumerMembershipManager`: states, joining, fencing, leaving); `heartbeat.rs` the
//! heartbeats (`ConsumerHeartbeatRequestManager`: their schedule, and the full or partial
//! requests built from what the last ones carried); `reconcile.rs` the reconciliation (what
//! the member owns and its target, by topic id, and the steps between them). What every
//! member keeps (group, ids, events, identity, the leave heartbeat under way, which
//! outlives the Leaving state until it is answered, the poll interval) is the
//! [`MemberCore`]'s.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::{Backoff, Jitter};
use crate::cluster::{Cluster, Interest};
use crate::error::Error;
use crate::group::coordinator::Coordinator;
use crate::group::member::{
    coordinator_link, Awaited, CallbackKind, CallbackToken, LeavePoll, Member, MemberCore,
    MemberState, RebalancePhase, Subscription,
};
use crate::link::{Failure, Lane, Links, Transmit};
use crate::protocol::api::consumer_group_heartbeat::ConsumerGroupHeartbeatRequest;
use crate::types::{ApiVersion, Identity, MemberEpoch, MemberId, RequestId, TopicPartition};

mod heartbeat;
mod reconcile;

use heartbeat::Heartbeats;
use reconcile::{Assignment, Reconciliation};

/// Fencings in a row of a join request before the member takes a fresh member id.
const JOIN_FENCINGS_BEFORE_NEW_ID: u32 = 3;

/// What the member needs from the configuration.
pub(crate) struct Kip848Config {
    /// `group.instance.id` (static membership).
    pub instance_id: Option<String>,
    /// `max.poll.interval.ms`: the rebalance timeout sent, and the poll deadline.
    pub max_poll_interval: Duration,
    /// `group.remote.assignor` (None: the broker's default).
    pub remote_assignor: Option<String>,
    /// `client.rack`, sent as the rack id.
    pub client_rack: Option<String>,
    /// `retry.backoff.ms` .. `retry.backoff.max.ms`.
    pub retry_backoff: Backoff,
    /// `request.timeout.ms`: a leave not sent by then is given up.
    pub request_timeout: Duration,
    /// Random bytes (drawn by the I/O layer) that make the member ids unique.
    pub member_id_seed: [u8; 16],
}

/// The member's states, as the Java client names them, with what each one keeps.
#[derive(Debug)]
enum State {
    /// No subscription; nothing is sent.
    Unsubscribed,
    /// Sends full heartbeats with epoch 0 until the coordinator gives an epoch.
    Joining,
    /// The target differs from what the member owns: callbacks run, one step at a time.
    Reconciling {
        /// The step under way (its callbacks run); `None` until the next one starts.
        running: Option<Reconciliation>,
    },
    /// A reconciliation completed: the next heartbeat (sent at once) reports it.
    Acknowledging,
    /// Owns its target; heartbeats on the interval.
    Stable,
    /// The coordinator fenced the member: its partitions are lost, then it rejoins.
    Fenced,
    /// About to leave (the callbacks of the leave have run on the user thread).
    PrepareLeaving,
    /// The leave heartbeat (epoch -1 or -2) is to be sent (the leave itself, which
    /// outlives this state until it is answered, is the core's).
    Leaving,
    /// Left because the application did not poll within `max.poll.interval.ms`; the next
    /// poll rejoins.
    Stale,
    /// Stopped for good after a fatal error.
    Fatal,
}

/// A state's name, for logs and the transition check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Unsubscribed,
    Joining,
    Reconciling,
    Acknowledging,
    Stable,
    Fenced,
    PrepareLeaving,
    Leaving,
    Stale,
    Fatal,
}

impl Kind {
    /// What the edge `from` → `to` means for the rebalance metrics, as Java's
    /// `AbstractMembershipManager` counts it: entering Reconciling starts a rebalance,
    /// leaving it for Acknowledging or Stable completes it, and leaving it any other way
    /// (fenced, leaving, fatal) fails it.
    fn rebalance_phase(from: Kind, to: Kind) -> Option<RebalancePhase> {
        use Kind::*;
        match (from, to) {
            (Reconciling, Acknowledging | Stable) => Some(RebalancePhase::Completed),
            (Reconciling, Reconciling) => None,
            (Reconciling, _) => Some(RebalancePhase::Failed),
            (_, Reconciling) => Some(RebalancePhase::Started),
            _ => None,
        }
    }
}

impl State {
    /// Reconciling, the next step not yet started.
    fn reconciling() -> State {
        State::Reconciling { running: None }
    }
}

impl MemberState for State {
    type Kind = Kind;

    fn kind(&self) -> Kind {
        match self {
            State::Unsubscribed => Kind::Unsubscribed,
            State::Joining => Kind::Joining,
            State::Reconciling { .. } => Kind::Reconciling,
            State::Acknowledging => Kind::Acknowledging,
            State::Stable => Kind::Stable,
            State::Fenced => Kind::Fenced,
            State::PrepareLeaving => Kind::PrepareLeaving,
            State::Leaving => Kind::Leaving,
            State::Stale => Kind::Stale,
            State::Fatal => Kind::Fatal,
        }
    }

    /// Whether the diagram has an edge `from` → `to` (Java's `MemberState` predecessors).
    fn legal(from: Kind, to: Kind) -> bool {
        use Kind::*;
        match (from, to) {
            (Fatal, _) => false,
            (_, Fatal) => true,
            (Unsubscribed | Fenced | Stale, Joining) => true,
            (Joining | Stable | Acknowledging | Reconciling, Reconciling) => true,
            (Reconciling, Acknowledging) => true,
            (Joining | Acknowledging | Reconciling, Stable) => true,
            (Joining | Stable | Reconciling | Acknowledging | PrepareLeaving | Leaving, Fenced) => {
                true
            }
            (
                Joining | Stable | Reconciling | Acknowledging | Unsubscribed | Fenced | Stale,
                PrepareLeaving,
            ) => true,
            (PrepareLeaving, Leaving) => true,
            (Leaving, Stale) => true,
            (PrepareLeaving | Leaving | Fenced | Stale, Unsubscribed) => true,
            _ => false,
        }
    }
}

/// What to do when the outstanding callback comes back.
#[derive(Debug)]
enum Then {
    /// Tell the user thread what the reconciliation adds.
    Assign,
    /// The reconciliation is done: own its target and acknowledge.
    Reconciled,
    /// The partitions were lost: rejoin (or wait for a poll when stale).
    Rejoin,
    /// A fencing or poll expiry overtook the callback: report what the user thread owns
    /// then as lost.
    Lose,
}

/// One member of a KIP-848 consumer group.
pub(crate) struct Kip848Member {
    cfg: Kip848Config,
    jitter: Box<dyn Jitter + Send>,
    /// What every member keeps: the group, ids, events, identity, the leave, the poll
    /// interval.
    core: MemberCore,
    state: State,
    subscription: Option<Subscription>,
    /// The cluster's topic mode and interest need updating.
    cluster_dirty: bool,
    /// The member id: generated here (v1, kept for the member's life), or the one the
    /// coordinator assigned (v0, `assigned_id`).
    member_id: MemberId,
    assigned_id: bool,
    epoch: MemberEpoch,
    /// What the member owns and its target, by topic id.
    assignment: Assignment,
    /// The callback the member waits for: a reconciliation's (while Reconciling, unless a
    /// fencing or leave overtook it) or the Lost one of a fencing or poll expiry.
    callback: Option<Awaited<Then>>,
    /// What the user thread owns after the last answered (or outstanding) callback.
    user_owned: BTreeSet<TopicPartition>,
    heartbeats: Heartbeats,
    unreleased_retries: u32,
    /// Fencings in a row of a join (epoch 0) request, and the backoff the next join waits.
    join_fencings: u32,
    join_delay: Option<Duration>,
}

impl Member for Kip848Member {
    /// Replaces the subscription: joins when not in the group; a member of the group sends
    /// the new subscription with its next heartbeat.
    fn subscribe(&mut self, sub: Subscription, now: Instant) {
        if self.core.refuses_subscription() {
            return;
        }
        self.user_polled(now);
        self.subscription = Some(sub);
        self.cluster_dirty = true;
        if matches!(self.state, State::Unsubscribed) {
            self.join(now, "subscribed");
        }
    }

    /// Leaves the group (unsubscribe or close). The user thread has already run the revoke
    /// or lost callback and committed, so no callback comes from here. A member of the
    /// group sends a heartbeat with epoch -1 (-2 for a static member, which keeps its
    /// partitions for the session timeout); [`MemberEvent::Left`] follows once it is
    /// answered or failed, or at once when none is sent. An outstanding callback is
    /// forgotten.
    fn leave(&mut self, now: Instant) {
        if self.is_fatal() {
            self.core.left();
            return;
        }
        let in_group = self.heartbeats_allowed()
            && (self.assigned_id || self.epoch.in_group() || self.heartbeats.in_flight());
        self.subscription = None;
        self.cluster_dirty = true;
        self.callback = None;
        self.user_owned.clear();
        self.core.clear_poll_expiry();
        let leaving = matches!(
            self.state,
            State::PrepareLeaving | State::Leaving | State::Stale | State::Unsubscribed
        );
        if !leaving {
            // The member rejoined since a leave went: it was the old membership's (its
            // answer is dropped), this one leaves on its own.
            self.core.drop_leave();
        }
        if let Some(job) = self.core.leave_job() {
            // A leave after a poll expiry is under way: it is now the user's.
            job.for_user = true;
            self.forget_membership();
            if matches!(self.state, State::Stale) {
                // Its heartbeat went already: out of the group, and a subscribe rejoins.
                self.transition(
                    State::Unsubscribed,
                    "left (the leave heartbeat is in flight)",
                );
            }
            return;
        }
        if in_group {
            self.transition(State::PrepareLeaving, "leaving the group");
            self.start_leave(now, true);
        } else {
            self.forget_membership();
            if !matches!(self.state, State::Unsubscribed) {
                if !matches!(self.state, State::PrepareLeaving) {
                    self.transition(State::PrepareLeaving, "leaving (not in the group)");
                }
                self.transition(State::Unsubscribed, "left (no leave heartbeat needed)");
            }
            self.core.left();
        }
    }

    /// The user thread finished callback `token`. A token that is not the outstanding one
    /// is ignored.
    fn callback_done(&mut self, token: CallbackToken, now: Instant) {
        let outstanding = self.callback.as_ref().map(|c| c.token);
        if !self.core.is_outstanding(token, outstanding) {
            return;
        }
        // The user thread runs callbacks from poll: it is polling.
        self.user_polled(now);
        let Some(Awaited {
            then, owned_after, ..
        }) = self.callback.take()
        else {
            return;
        };
        self.user_owned = owned_after;
        match then {
            Then::Assign => {
                if let State::Reconciling { running: Some(r) } = &self.state {
                    let (added, owned_after) = (r.added.clone(), r.owned_after.clone());
                    let kind = CallbackKind::Assigned;
                    let c = self
                        .core
                        .callback(kind, added, owned_after, Then::Reconciled);
                    self.wait_for(c);
                }
            }
            Then::Reconciled => {
                if let State::Reconciling { running } = &mut self.state {
                    if let Some(r) = running.take() {
                        self.assignment.reconciled(r);
                        self.transition(State::Acknowledging, "reconciliation done");
                        self.heartbeats.send_at(now);
                    }
                }
            }
            Then::Rejoin => self.rejoin_if_ready(now),
            Then::Lose => self.lose_owned(now),
        }
    }

    /// The last instant the application called poll.
    fn user_polled(&mut self, at: Instant) {
        if self.core.user_polled(at) {
            self.rejoin_if_ready(at);
        }
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
        self.reconcile(now, cluster);
        let (epoch, instance_id) = (self.leave_epoch(), self.cfg.instance_id.clone());
        let leave = self
            .core
            .poll_leave(now, links, coordinator, |group, job, _| {
                ConsumerGroupHeartbeatRequest {
                    group_id: group.to_owned(),
                    member_id: job.member_id.as_str().to_owned(),
                    member_epoch: epoch.0,
                    instance_id,
                    ..Default::default()
                }
            });
        if let LeavePoll::Sent { transmit, for_user } = leave {
            self.out_of_group(for_user, "leave heartbeat sent", now);
            return Some(transmit);
        }
        self.after_leave(leave, now);
        if !self.heartbeat_due(now) {
            return None;
        }
        let lane = Lane::Group;
        let (route, v) =
            coordinator_link::<ConsumerGroupHeartbeatRequest>(now, links, coordinator, lane)?;
        self.send_heartbeat(route, v)
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
        if let Some(sent) = self.heartbeats.take(id) {
            match links.decode::<ConsumerGroupHeartbeatRequest>(sent.route, version, body, now) {
                Ok(resp) => self.on_heartbeat(&sent, resp, now, coordinator),
                Err(e) => {
                    log::warn!(
                        "group {}: malformed ConsumerGroupHeartbeat response: {e}",
                        self.core.group()
                    );
                    self.heartbeat_failed(now);
                }
            }
        } else if self.core.is_leave(id) {
            let ended = self.core.leave_answered::<ConsumerGroupHeartbeatRequest>(
                version,
                body,
                now,
                links,
                |resp, _| Ok(resp.error_code),
            );
            self.after_leave(ended, now);
        } else {
            log::debug!(
                "group {}: dropping the answer to request {id} (no longer waited for)",
                self.core.group()
            );
        }
        self.sync_cluster(cluster);
        self.reconcile(now, cluster);
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
        if self.heartbeats.take(id).is_some() {
            coordinator.mark_unknown(&format!("ConsumerGroupHeartbeat: {failure}"), now);
            self.heartbeat_failed(now);
        } else if self.core.is_leave(id) {
            let ended =
                self.core
                    .leave_failed("ConsumerGroupHeartbeat (leave)", failure, now, coordinator);
            self.after_leave(ended, now);
        }
    }

    /// Time passed: the poll interval, a leave's deadline, metadata changes.
    fn handle_timeout(&mut self, now: Instant, cluster: &mut Cluster) {
        self.sync_cluster(cluster);
        let ended = self.core.check_leave_deadline(now);
        self.after_leave(ended, now);
        if self.core.check_poll_interval(now, self.in_group()) {
            self.poll_interval_expired(now);
        }
        self.reconcile(now, cluster);
    }

    /// The next instant `handle_timeout` (or `poll_transmit`) has something to do; `None`
    /// when only an answer, a callback or the user can move the member on.
    fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let mut next = self.core.deadlines(now, self.in_group());
        if self.heartbeats_allowed() {
            next.maybe(self.heartbeats.next());
        }
        next.next()
    }
}

impl Kip848Member {
    /// A member with no subscription yet, and a fresh member id.
    pub fn new(cfg: Kip848Config, mut jitter: Box<dyn Jitter + Send>) -> Kip848Member {
        let member_id = new_member_id(&cfg.member_id_seed, &mut *jitter);
        let identity = Identity::Kip848 {
            epoch: MemberEpoch(-1),
            member_id: member_id.clone(),
            instance_id: cfg.instance_id.clone(),
        };
        let core = MemberCore::new(identity, cfg.max_poll_interval, cfg.request_timeout);
        Kip848Member {
            cfg,
            jitter,
            core,
            state: State::Unsubscribed,
            subscription: None,
            cluster_dirty: false,
            member_id,
            assigned_id: false,
            epoch: MemberEpoch::JOIN,
            assignment: Assignment::default(),
            callback: None,
            user_owned: BTreeSet::new(),
            heartbeats: Heartbeats::new(),
            unreleased_retries: 0,
            join_fencings: 0,
            join_delay: None,
        }
    }

    /// The name of the member's state.
    #[cfg(test)]
    fn state(&self) -> Kind {
        self.state.kind()
    }

    /// The member epoch.
    #[cfg(test)]
    pub fn epoch(&self) -> i32 {
        self.epoch.0
    }

    /// The member id.
    #[cfg(any(test, feature = "__testing"))]
    pub fn member_id(&self) -> &str {
        self.member_id.as_str()
    }

    /// What the user thread owns once the outstanding callback (if any) came back.
    #[cfg(any(test, feature = "__testing"))]
    pub fn user_owned(&self) -> Vec<TopicPartition> {
        self.user_owned.iter().cloned().collect()
    }

    /// Whether a fencing or poll expiry overtook the outstanding callback: what the user
    /// thread owns once it comes back is lost.
    #[cfg(test)]
    pub fn lost_pending(&self) -> bool {
        self.callback
            .as_ref()
            .is_some_and(|c| matches!(c.then, Then::Lose))
    }

    /// What heartbeats report as owned (see [`Assignment::reported`]).
    fn reported(&self) -> (u64, reconcile::ById) {
        let running = match &self.state {
            State::Reconciling { running } => running.as_ref(),
            _ => None,
        };
        self.assignment.reported(running)
    }

    // ----- leaving ---------------------------------------------------------------------

    /// Leaves with a heartbeat of epoch -1 (-2 for a static member): from PrepareLeaving.
    fn start_leave(&mut self, now: Instant, for_user: bool) {
        let member_id = self.member_id.clone();
        self.forget_membership();
        let reason = if for_user {
            "the consumer unsubscribed or is closing"
        } else {
            "max.poll.interval.ms expired"
        };
        self.core.start_leave(member_id, reason, for_user, now);
        self.transition(State::Leaving, "sending the leave heartbeat");
    }

    /// The epoch a leave heartbeat carries: -1, or -2 for a static member (which keeps its
    /// partitions for the session timeout).
    fn leave_epoch(&self) -> MemberEpoch {
        if self.cfg.instance_id.is_some() {
            MemberEpoch::LEAVE_STATIC
        } else {
            MemberEpoch::LEAVE
        }
    }

    /// Clears the membership: epoch 0, nothing owned, no target, no reconciliation, no
    /// heartbeat awaited.
    fn forget_membership(&mut self) {
        self.heartbeats.forget();
        self.epoch = MemberEpoch::JOIN;
        self.assignment.forget();
        if let State::Reconciling { running } = &mut self.state {
            *running = None;
        }
        self.update_identity();
    }

    /// Leaving (its heartbeat sent, or given up): Stale after a poll expiry, else
    /// Unsubscribed, and joining again at once if the application subscribed meanwhile.
    fn out_of_group(&mut self, for_user: bool, why: &str, now: Instant) {
        if !matches!(self.state, State::Leaving) {
            return;
        }
        if self.core.poll_expired() && !for_user {
            self.transition(State::Stale, "left after max.poll.interval.ms");
        } else {
            self.transition(State::Unsubscribed, why);
            if self.subscription.is_some() {
                self.join(now, "subscribed again while leaving");
            }
        }
    }

    /// A leave that ended (answered, failed or given up) takes the member out of the
    /// group if it still waits for that.
    fn after_leave(&mut self, poll: LeavePoll, now: Instant) {
        if let LeavePoll::Ended(job) = poll {
            self.out_of_group(job.for_user, "left", now);
        }
    }

    /// `max.poll.interval.ms` passed without a poll: leave, lose the partitions, and
    /// rejoin on the next poll (as Java).
    fn poll_interval_expired(&mut self, now: Instant) {
        log::warn!(
            "group {} member {} epoch {}: the application did not poll within \
             max.poll.interval.ms ({} ms); leaving the group, its partitions are lost, and \
             the next poll rejoins",
            self.core.group(),
            self.member_id,
            self.epoch,
            self.core.max_poll_interval().as_millis()
        );
        self.transition(State::PrepareLeaving, "max.poll.interval.ms expired");
        self.start_leave(now, false);
        self.lose_owned_after_callback(now);
    }

    // ----- fencing and joining -----------------------------------------------------------

    /// The coordinator fenced the member: its partitions are lost, then it rejoins with
    /// epoch 0 and the same member id.
    fn fenced(&mut self, why: &str, now: Instant) {
        if matches!(self.state, State::Joining) {
            // Brokers before KAFKA-19233 fence a rejoin (epoch 0) with the same member id
            // while they still hold the member at a higher epoch: back off, and after a few
            // in a row start over with a fresh id (the old one expires with its session).
            self.join_fencings += 1;
            self.join_delay = Some(
                self.heartbeats
                    .backoff(&self.cfg.retry_backoff, &mut *self.jitter),
            );
            if self.join_fencings >= JOIN_FENCINGS_BEFORE_NEW_ID {
                let fresh = new_member_id(&self.cfg.member_id_seed, &mut *self.jitter);
                log::warn!(
                    "group {}: member {} was fenced {} times in a row while joining; \
                     rejoining as {fresh}",
                    self.core.group(),
                    self.member_id,
                    self.join_fencings
                );
                self.member_id = fresh;
                self.assigned_id = false;
                self.join_fencings = 0;
            }
        }
        log::warn!(
            "group {} member {} epoch {}: fenced ({why}); its partitions are lost, rejoining",
            self.core.group(),
            self.member_id,
            self.epoch
        );
        self.transition(State::Fenced, why);
        self.forget_membership();
        self.lose_owned_after_callback(now);
    }

    /// What the user thread owns is lost: at once, or once the outstanding callback (which
    /// a fencing or poll expiry overtook) comes back.
    fn lose_owned_after_callback(&mut self, now: Instant) {
        match &mut self.callback {
            Some(c) => c.then = Then::Lose,
            None => self.lose_owned(now),
        }
    }

    /// Tells the user thread that what it owns is lost (when it owns anything), then
    /// rejoins when ready.
    fn lose_owned(&mut self, now: Instant) {
        if self.user_owned.is_empty() {
            self.rejoin_if_ready(now);
        } else {
            let lost = std::mem::take(&mut self.user_owned);
            let c = self
                .core
                .callback(CallbackKind::Lost, lost, BTreeSet::new(), Then::Rejoin);
            self.wait_for(c);
        }
    }

    /// From Fenced, or Stale once the application polls again: join with epoch 0.
    fn rejoin_if_ready(&mut self, now: Instant) {
        if self.callback.is_some() || self.subscription.is_none() {
            return;
        }
        match self.state {
            State::Fenced => self.join(now, "rejoining after being fenced"),
            State::Stale if !self.core.poll_expired() => {
                self.join(now, "rejoining after max.poll.interval.ms")
            }
            _ => {}
        }
    }

    fn join(&mut self, now: Instant, why: &str) {
        self.forget_membership();
        self.transition(State::Joining, why);
        let delay = self.join_delay.take().unwrap_or(Duration::ZERO);
        self.heartbeats.send_at(now + delay);
    }

    /// Waits for `callback` (which the core emitted) before moving on.
    fn wait_for(&mut self, callback: Awaited<Then>) {
        log::info!(
            "group {} member {} epoch {}: {} (callback {}), owning {} partitions then",
            self.core.group(),
            self.member_id,
            self.epoch,
            callback.kind,
            callback.token.0,
            callback.owned_after.len()
        );
        self.callback = Some(callback);
    }

    // ----- the cluster -------------------------------------------------------------------

    /// Brings the cluster's topic mode and interest in line with the subscription. A
    /// pattern is resolved by the broker; the member needs every topic's metadata to name
    /// the ids it is assigned.
    fn sync_cluster(&mut self, cluster: &mut Cluster) {
        if !self.cluster_dirty {
            return;
        }
        self.cluster_dirty = false;
        match &self.subscription {
            None => {
                cluster.clear_interest(Interest::Group);
            }
            Some(Subscription::Topics(t)) => {
                cluster.set_all_topics(false);
                cluster.set_interest(Interest::Group, t.iter().map(|t| Arc::from(t.as_str())));
            }
            Some(Subscription::Pattern(_)) => {
                cluster.set_all_topics(true);
                cluster.clear_interest(Interest::Group);
                cluster.request_update();
            }
        }
    }

    // ----- small helpers -------------------------------------------------------------

    /// Commits speak for the member with its epoch while it has one (-1 otherwise).
    fn update_identity(&mut self) {
        let identity = Identity::Kip848 {
            epoch: if self.epoch.in_group() {
                self.epoch
            } else {
                MemberEpoch(-1)
            },
            member_id: self.member_id.clone(),
            instance_id: self.cfg.instance_id.clone(),
        };
        self.core.set_identity(identity);
    }

    /// Stops for good: the error goes out once, nothing is sent afterwards.
    fn fatal(&mut self, error: Error) {
        if self.core.fatal(error) {
            self.heartbeats.stop();
            self.transition(State::Fatal, "fatal error");
        }
    }

    /// The one way the state changes: checked against the diagram (an illegal transition
    /// is fatal) and logged with the member id and epoch. A transition to the state the
    /// member is in changes nothing (it keeps the state's data).
    /// The rebalance metrics hear what the edge means ([`Kind::rebalance_phase`]).
    fn transition(&mut self, to: State, why: &str) {
        let (from, to_kind) = (self.state.kind(), to.kind());
        if from == to_kind {
            return;
        }
        let who = format!("member {} epoch {}", self.member_id, self.epoch);
        if let Err(error) = self.core.transition(&mut self.state, to, &who, why) {
            self.fatal(error);
            return;
        }
        self.core.rebalance(Kind::rebalance_phase(from, to_kind));
    }
}

/// A member id as the Java client makes one (KIP-1082): 16 random bytes, URL-safe base64
/// without padding (22 characters). The bytes are the seed mixed with the jitter source's:
/// unique across processes by the seed, and across the ids of one member by the jitter.
fn new_member_id(seed: &[u8; 16], jitter: &mut dyn Jitter) -> MemberId {
    let mut bytes = *seed;
    for chunk in bytes.chunks_mut(4) {
        let r = jitter.next_u32().to_le_bytes();
        for (b, x) in chunk.iter_mut().zip(r) {
            *b ^= x;
        }
    }
    MemberId::new(crate::sasl::base64::encode_url(&bytes))
}

#[cfg(test)]
mod tests;
