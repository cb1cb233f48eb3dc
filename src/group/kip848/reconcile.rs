//! The KIP-848 member's reconciliation (Java's `ConsumerMembershipManager`
//! reconciliation): from what it owns towards the coordinator's target, one step at a time,
//! with the user thread's callbacks between the steps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use super::{Kip848Member, State, Then};
use crate::cluster::Cluster;
use crate::group::member::CallbackKind;
use crate::protocol::api::consumer_group_heartbeat::TopicPartitions;
use crate::protocol::message::Uuid;
use crate::types::TopicPartition;

/// Partitions by topic id.
pub(super) type ById = BTreeMap<Uuid, BTreeSet<i32>>;

/// The reconciliation under way.
#[derive(Debug)]
pub(super) struct Reconciliation {
    /// The resolvable part of the target it reconciles to.
    pub target: ById,
    /// Its version (`target_version` when it started).
    pub version: u64,
    /// The partitions it adds, and what the member owns after it (by name).
    pub added: BTreeSet<TopicPartition>,
    pub owned_after: BTreeSet<TopicPartition>,
}

impl Kip848Member {
    /// Whether the member owns its whole target (of the current version).
    pub(super) fn target_reached(&self) -> bool {
        match &self.target {
            None => true,
            Some(t) => *t == self.owned,
        }
    }

    /// Names the topic ids of `by_id` from the metadata or the member's cache; returns the
    /// named part (as partitions by id, and by name) and whether some id stayed unnamed.
    pub(super) fn resolve(
        &self,
        by_id: &ById,
        cluster: &Cluster,
    ) -> (BTreeMap<Uuid, BTreeSet<TopicPartition>>, bool) {
        let mut named = BTreeMap::new();
        let mut unnamed = false;
        for (id, parts) in by_id {
            let name = cluster
                .topic_name(id)
                .cloned()
                .or_else(|| self.names.get(id).cloned());
            match name {
                Some(name) => {
                    named.insert(
                        *id,
                        parts
                            .iter()
                            .map(|p| TopicPartition::new(Arc::clone(&name), *p))
                            .collect(),
                    );
                }
                None => unnamed = true,
            }
        }
        (named, unnamed)
    }

    /// Starts the next reconciliation step when the member is Reconciling and nothing
    /// runs (invariant 5), nor a heartbeat is in flight or failed since the last answer
    /// (`sent` is cleared then): that heartbeat (an acknowledgement say) may report owned
    /// partitions without those the step would add, and if the coordinator moved them
    /// meanwhile it takes that as their revocation and hands them over at once; the answer
    /// tells whether they are still the member's.
    pub(super) fn reconcile(&mut self, now: Instant, cluster: &mut Cluster) {
        if self.state != State::Reconciling
            || self.callback.is_some()
            || self.reconciliation.is_some()
            || self.heartbeat.is_some()
            || self.sent.owned.is_none()
        {
            return;
        }
        let Some(target) = self.target.clone() else {
            return;
        };
        let (named, unnamed) = self.resolve(&target, cluster);
        if unnamed && self.asked_metadata != Some(cluster.generation()) {
            self.asked_metadata = Some(cluster.generation());
            log::info!(
                "group {}: the target names topic ids the metadata does not know yet; \
                 refreshing it",
                self.core.group()
            );
            cluster.request_update();
        }
        for (id, tps) in &named {
            if let Some(tp) = tps.iter().next() {
                self.names
                    .entry(*id)
                    .or_insert_with(|| Arc::from(tp.topic()));
            }
        }
        let resolved: ById = named
            .iter()
            .map(|(id, tps)| (*id, tps.iter().map(TopicPartition::partition).collect()))
            .collect();
        if resolved == self.owned {
            if !unnamed {
                self.transition(State::Stable, "the target is what the member owns");
            } else if self.owned_version != self.target_version {
                // Only the unnamed part differs: acknowledge the new version, no callbacks.
                self.owned_version = self.target_version;
                self.transition(State::Acknowledging, "target named in part; acknowledging");
                self.heartbeat_due = Some(now);
            }
            return;
        }
        let after: BTreeSet<TopicPartition> = named.into_values().flatten().collect();
        let owned_now = self.user_owned.clone();
        let revoked: BTreeSet<TopicPartition> = owned_now.difference(&after).cloned().collect();
        let added: BTreeSet<TopicPartition> = after.difference(&owned_now).cloned().collect();
        log::info!(
            "group {} member {} epoch {}: reconciling to version {}: revoking {:?}, adding {:?}",
            self.core.group(),
            self.member_id,
            self.epoch,
            self.target_version,
            revoked,
            added
        );
        self.reconciliation = Some(Reconciliation {
            target: resolved,
            version: self.target_version,
            added: added.clone(),
            owned_after: after.clone(),
        });
        if revoked.is_empty() {
            self.emit(CallbackKind::Assigned, added, after, Then::Reconciled);
        } else {
            let kept = owned_now.intersection(&after).cloned().collect();
            self.emit(CallbackKind::Revoked, revoked, kept, Then::Assign);
        }
    }

    /// Keeps the names of the owned topics only.
    pub(super) fn keep_names(&mut self) {
        let owned = &self.owned;
        let target = &self.target;
        self.names.retain(|id, _| {
            owned.contains_key(id) || target.as_ref().is_some_and(|t| t.contains_key(id))
        });
    }
}

/// The assignment as sets, without negative or repeated partitions (a repeat must not
/// look like a change) and without the zero id.
pub(super) fn sanitize(parts: &[TopicPartitions]) -> ById {
    let mut out = ById::new();
    for t in parts {
        if t.topic_id.is_zero() {
            continue;
        }
        let set: BTreeSet<i32> = t.partitions.iter().copied().filter(|p| *p >= 0).collect();
        if !set.is_empty() {
            out.entry(t.topic_id).or_default().extend(set);
        }
    }
    out
}

pub(super) fn to_wire(parts: &ById) -> Vec<TopicPartitions> {
    parts
        .iter()
        .map(|(id, ps)| TopicPartitions {
            topic_id: *id,
            partitions: ps.iter().copied().collect(),
        })
        .collect()
}
