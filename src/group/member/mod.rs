//! What a group member (the classic protocol's, `group::classic`, or KIP-848's,
//! `group::kip848`) and the rest of the consumer exchange: the [`Member`] calls the group
//! component drives either through, the subscription it gets (`subscription.rs`), and the
//! events it gives back. What both members keep alike, the [`MemberCore`] (group, request
//! ids, callback tokens, events, identity, errors, the leave under way, the poll interval)
//! and the check every state change passes, is in `core.rs`. Sans-IO.
//!
//! The member runs on the I/O thread but never changes what is fetched itself: every
//! change of the assignment goes to the user thread as a [`MemberEvent::Callback`], where
//! the consumer updates its partitions (and so the fetcher's), runs the application's
//! `RebalanceListener`, and answers with the event's [`CallbackToken`]. The member does not
//! move on (rejoin, acknowledge, leave) before that answer.
//!
//! Invariants:
//! 1. At most one callback is outstanding at a time; the next one is emitted only after
//!    the previous token came back.
//! 2. `owned` of each callback is exactly the member's assignment once the callback
//!    returned: the user thread makes it the fetched set.

use std::{fmt, time::Instant};

use crate::cluster::Cluster;
use crate::error::Error;
use crate::group::coordinator::Coordinator;
use crate::link::{Failure, Links, Transmit};
use crate::types::{ApiVersion, Identity, RequestId, TopicPartition};

mod core;
mod subscription;

pub(crate) use self::core::{
    coordinator_link, member_transmit, millis, Awaited, LeavePoll, MemberCore, MemberState,
};
pub(crate) use subscription::{Subscription, TopicPattern};

/// A group member of either protocol, as the group component drives it. Sans-IO: every
/// call takes the clock, and what to send comes out of `poll_transmit`.
pub(crate) trait Member: Send {
    /// What the members of both protocols keep alike.
    fn core(&self) -> &MemberCore;
    /// The same, to change.
    fn core_mut(&mut self) -> &mut MemberCore;
    /// Replaces the subscription (joins when not in the group).
    fn subscribe(&mut self, sub: Subscription, now: Instant);
    /// Leaves the group; [`MemberEvent::Left`] follows.
    fn leave(&mut self, now: Instant);
    /// The user thread finished callback `token`.
    fn callback_done(&mut self, token: CallbackToken, now: Instant);
    /// The last instant the application called poll.
    fn user_polled(&mut self, at: Instant);
    /// The next event for the rest of the consumer.
    fn poll_event(&mut self) -> Option<MemberEvent> {
        self.core_mut().poll_event()
    }
    /// Whether the member stopped for good (its error was emitted).
    fn is_fatal(&self) -> bool {
        self.core().is_stopped()
    }
    /// The next request to send, if any.
    fn poll_transmit(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
        cluster: &mut Cluster,
    ) -> Option<Transmit>;
    /// Applies the answer to request `id`.
    #[allow(clippy::too_many_arguments)]
    fn handle_response(
        &mut self,
        id: RequestId,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
        cluster: &mut Cluster,
    );
    /// Request `id` got no answer (its link closed or it timed out).
    fn handle_failure(
        &mut self,
        id: RequestId,
        failure: &Failure,
        now: Instant,
        coordinator: &mut Coordinator,
    );
    /// Time passed.
    fn handle_timeout(&mut self, now: Instant, cluster: &mut Cluster);
    /// The next instant `handle_timeout` (or `poll_transmit`) has something to do.
    fn poll_timeout(&self, now: Instant) -> Option<Instant>;
}

/// Names one rebalance callback the member waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CallbackToken(pub u64);

/// Which `RebalanceListener` method a callback runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallbackKind {
    /// The partitions are given up while the member is still a valid member: the
    /// application may commit their offsets first (auto-commit does).
    Revoked,
    /// The partitions were added to the assignment (called after every completed
    /// rebalance, possibly with none).
    Assigned,
    /// The partitions were lost: the member is no longer (reliably) in the group, someone
    /// else may own them already, and committing them would fail.
    Lost,
}

impl fmt::Display for CallbackKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CallbackKind::Revoked => "on_partitions_revoked",
            CallbackKind::Assigned => "on_partitions_assigned",
            CallbackKind::Lost => "on_partitions_lost",
        })
    }
}

/// Where the member is in a rebalance, for the metrics (`src/metrics/stats.rs`). Each
/// protocol's member says which of its transitions start, complete and abandon one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RebalancePhase {
    /// A rebalance began (one already under way goes on).
    Started,
    /// The member got its new assignment.
    Completed,
    /// The rebalance under way ended without an assignment (an error answer, fenced,
    /// leaving).
    Failed,
}

/// What the member has to tell the rest of the consumer.
#[derive(Debug)]
pub(crate) enum MemberEvent {
    /// Run `kind` on the user thread for `partitions`, make `owned` the assignment, and
    /// answer with `token`.
    Callback {
        token: CallbackToken,
        kind: CallbackKind,
        partitions: Vec<TopicPartition>,
        owned: Vec<TopicPartition>,
    },
    /// Who commits speak for changed (joined, new generation, reset, left).
    Identity(Identity),
    /// A problem the application should hear about from `poll`. `fatal`: the member has
    /// stopped and will not rejoin (a setting the broker rejects, no authorization, ...).
    Error { error: Error, fatal: bool },
    /// A leave asked for with `leave` is done (its LeaveGroup answered, failed, or not
    /// needed).
    Left,
    /// A rebalance reached this phase (for the metrics only).
    Rebalance(RebalancePhase),
}
