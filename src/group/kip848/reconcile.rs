//! The KIP-848 member's reconciliation (Java's `ConsumerMembershipManager`
//! reconciliation): from what it owns towards the coordinator's target, one step at a time,
//! with the user thread's callbacks between the steps. [`Assignment`] keeps what the member
//! owns and its target by topic id; the step under way, a [`Reconciliation`], lives in the
//! member's Reconciling state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::{sync::Arc, time::Instant};

use super::{Kip848Member, State, Then};
use crate::cluster::Cluster;
use crate::group::member::CallbackKind;
use crate::protocol::api::consumer_group_heartbeat::TopicPartitions;
use crate::protocol::message::Uuid;
use crate::types::{MetadataGeneration, TopicPartition};

/// Partitions by topic id.
pub(super) type ById = BTreeMap<Uuid, BTreeSet<i32>>;

/// The reconciliation under way.
#[derive(Debug)]
pub(super) struct Reconciliation {
    /// The resolvable part of the target it reconciles to.
    pub target: ById,
    /// Its version (the target's when it started).
    pub version: u64,
    /// The partitions it adds, and what the member owns after it (by name).
    pub added: BTreeSet<TopicPartition>,
    pub owned_after: BTreeSet<TopicPartition>,
}

/// What the member owns and what the coordinator wants it to own, by topic id, and the
/// names it knows for those topics.
#[derive(Debug, Default)]
pub(super) struct Assignment {
    /// What the member owns, as its heartbeats report it, and the version of the target
    /// it came from.
    pub owned: ById,
    owned_version: u64,
    /// The last target assignment the coordinator sent, and its version (bumped when a
    /// different one arrives).
    pub target: Option<ById>,
    target_version: u64,
    /// Names of the topics the member owns or reconciles (kept when metadata forgets them).
    names: HashMap<Uuid, Arc<str>>,
    /// The metadata generation of the last refresh asked for unresolved topic ids.
    asked_metadata: Option<MetadataGeneration>,
}

impl Assignment {
    /// Whether the member owns its whole target (of the current version).
    pub fn target_reached(&self) -> bool {
        match &self.target {
            None => true,
            Some(t) => *t == self.owned,
        }
    }

    /// The coordinator sent `target`: its version if it differs from the last one.
    pub fn set_target(&mut self, target: ById) -> Option<u64> {
        if self.target.as_ref() == Some(&target) {
            return None;
        }
        self.target_version += 1;
        self.target = Some(target);
        Some(self.target_version)
    }

    /// What heartbeats report as owned, and its version: what the member owns plus what
    /// `running` adds. A report without the latter (a full heartbeat after an error, say)
    /// would let the coordinator take a partition it moved meanwhile as revoked, and hand
    /// it over while the Assigned callback takes it here.
    pub fn reported(&self, running: Option<&Reconciliation>) -> (u64, ById) {
        let mut reported = self.owned.clone();
        if let Some(r) = running {
            for (id, parts) in &r.target {
                reported.entry(*id).or_default().extend(parts);
            }
        }
        (self.owned_version, reported)
    }

    /// `r` completed: the member owns its target.
    pub fn reconciled(&mut self, r: Reconciliation) {
        self.owned = r.target;
        self.owned_version = r.version;
        self.keep_names();
    }

    /// Out of the group: nothing owned, no target.
    pub fn forget(&mut self) {
        self.owned.clear();
        self.target = None;
    }

    /// Names the topic ids of `by_id` from the metadata or the member's cache; returns the
    /// named part (as partitions by id, and by name) and whether some id stayed unnamed.
    pub fn resolve(
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

    /// The partitions of the last target (resolved names only): what the member may own.
    #[cfg(test)]
    pub fn target_names(&self, cluster: &Cluster) -> Option<BTreeSet<TopicPartition>> {
        let target = self.target.as_ref()?;
        Some(
            self.resolve(target, cluster)
                .0
                .values()
                .flatten()
                .cloned()
                .collect(),
        )
    }

    /// Keeps the names of the owned and targeted topics only.
    fn keep_names(&mut self) {
        let owned = &self.owned;
        let target = &self.target;
        self.names.retain(|id, _| {
            owned.contains_key(id) || target.as_ref().is_some_and(|t| t.contains_key(id))
        });
    }
}

impl Kip848Member {
    /// Starts the next reconciliation step when the member is Reconciling and nothing
    /// runs (invariant 5), nor a heartbeat is in flight or failed since the last answer
    /// (what heartbeats sent is cleared then): that heartbeat (an acknowledgement say) may
    /// report owned partitions without those the step would add, and if the coordinator
    /// moved them meanwhile it takes that as their revocation and hands them over at once;
    /// the answer tells whether they are still the member's.
    pub(super) fn reconcile(&mut self, now: Instant, cluster: &mut Cluster) {
        if !matches!(self.state, State::Reconciling { running: None })
            || self.callback.is_some()
            || self.heartbeats.in_flight()
            || !self.heartbeats.reported_owned()
        {
            return;
        }
        let a = &mut self.assignment;
        let Some(target) = a.target.clone() else {
            return;
        };
        let (named, unnamed) = a.resolve(&target, cluster);
        if unnamed && a.asked_metadata != Some(cluster.generation()) {
            a.asked_metadata = Some(cluster.generation());
            log::info!(
                "group {}: the target names topic ids the metadata does not know yet; \
                 refreshing it",
                self.core.group()
            );
            cluster.request_update();
        }
        for (id, tps) in &named {
            if let Some(tp) = tps.iter().next() {
                a.names.entry(*id).or_insert_with(|| Arc::from(tp.topic()));
            }
        }
        let resolved: ById = named
            .iter()
            .map(|(id, tps)| (*id, tps.iter().map(TopicPartition::partition).collect()))
            .collect();
        if resolved == a.owned {
            if !unnamed {
                self.transition(State::Stable, "the target is what the member owns");
            } else if a.owned_version != a.target_version {
                // Only the unnamed part differs: acknowledge the new version, no callbacks.
                a.owned_version = a.target_version;
                self.transition(State::Acknowledging, "target named in part; acknowledging");
                self.heartbeats.send_at(now);
            }
            return;
        }
        let version = a.target_version;
        let after: BTreeSet<TopicPartition> = named.into_values().flatten().collect();
        let owned_now = self.user_owned.clone();
        let revoked: BTreeSet<TopicPartition> = owned_now.difference(&after).cloned().collect();
        let added: BTreeSet<TopicPartition> = after.difference(&owned_now).cloned().collect();
        log::info!(
            "group {} member {} epoch {}: reconciling to version {version}: revoking \
             {revoked:?}, adding {added:?}",
            self.core.group(),
            self.member_id,
            self.epoch,
        );
        self.state = State::Reconciling {
            running: Some(Reconciliation {
                target: resolved,
                version,
                added: added.clone(),
                owned_after: after.clone(),
            }),
        };
        let callback = if revoked.is_empty() {
            let kind = CallbackKind::Assigned;
            self.core.callback(kind, added, after, Then::Reconciled)
        } else {
            let kept = owned_now.intersection(&after).cloned().collect();
            let kind = CallbackKind::Revoked;
            self.core.callback(kind, revoked, kept, Then::Assign)
        };
        self.wait_for(callback);
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
