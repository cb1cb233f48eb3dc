//! What a subscribing application hears about rebalances: the [`RebalanceListener`] it
//! implements, and the [`GroupMetadata`] it can read.

use crate::consumer::Consumer;
use crate::types::TopicPartition;

/// Called when the group moves partitions to or away from this consumer.
///
/// # The contract
///
/// - **Thread.** Every method runs on the application's thread, inside
///   [`Consumer::poll`] (or [`Consumer::close`] / [`Consumer::unsubscribe`], which give up
///   the partitions). Never on the I/O thread: it keeps heartbeating while a method runs, so
///   a slow callback does not cost the membership (it only counts towards
///   `max.poll.interval.ms`, as the time between polls does).
/// - **What it may call.** Anything on `consumer` except `poll`, `subscribe*`,
///   `unsubscribe`, `assign` and `close` (those return an error): typically
///   [`commit_sync`](Consumer::commit_sync) or
///   [`commit_offsets_sync`](Consumer::commit_offsets_sync) in `on_partitions_revoked`,
///   [`seek`](Consumer::seek) or [`committed`](Consumer::committed) in
///   `on_partitions_assigned`, and [`position`](Consumer::position),
///   [`pause`](Consumer::pause), [`resume`](Consumer::resume).
/// - **Order.** In one rebalance `on_partitions_revoked` (or `on_partitions_lost`) comes
///   before `on_partitions_assigned`. The member tells the group that it released
///   partitions only after `on_partitions_revoked` returned, so a commit made in it is what
///   the next owner starts from. No record of a revoked or lost partition is returned by
///   `poll` after its callback; records of an assigned partition come only after
///   `on_partitions_assigned` returned.
/// - **Auto-commit.** With `enable.auto.commit=true` the consumer commits what `poll`
///   returned just before `on_partitions_revoked` runs (and never for lost partitions).
/// - **Panics.** A panic in a method is caught: the rebalance goes on as if the method had
///   returned, and the `poll` that ran it returns an error of kind
///   [`ErrorKind::Listener`](crate::ErrorKind::Listener) with the panic message.
///
/// With the classic protocol's eager assignors (`range`, `roundrobin`),
/// `on_partitions_revoked` runs with every owned partition at the start of each rebalance;
/// with `cooperative-sticky` only the partitions that move are revoked, at the end of the
/// rebalance, and the others keep being fetched throughout. `on_partitions_assigned` runs
/// after every completed rebalance, with only the partitions that were added (possibly
/// none).
pub trait RebalanceListener: Send {
    /// `partitions` are taken away while this consumer is still a member: commit what
    /// was processed of them now.
    fn on_partitions_revoked(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        let _ = (consumer, partitions);
    }

    /// `partitions` were added to the assignment (those kept are not repeated).
    fn on_partitions_assigned(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        let _ = (consumer, partitions);
    }

    /// `partitions` were lost: the consumer was removed from the group (it missed
    /// heartbeats for `session.timeout.ms`, did not poll for `max.poll.interval.ms`, or
    /// was fenced), or its membership stopped for good (the `poll` that runs this then
    /// returns [`ErrorKind::GroupFatal`](crate::ErrorKind::GroupFatal)), and another member
    /// may own them already. Committing them would fail.
    /// By default this calls [`on_partitions_revoked`](Self::on_partitions_revoked).
    fn on_partitions_lost(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(consumer, partitions)
    }
}

/// This consumer's place in its group, from [`Consumer::group_metadata`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupMetadata {
    /// The `group.id`.
    pub group_id: String,
    /// The generation of the group this member last joined (with `group.protocol=consumer`:
    /// the member epoch), -1 while not in one.
    pub generation_id: i32,
    /// The member id the coordinator gave this consumer, empty while it has none.
    pub member_id: String,
    /// The `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
}
