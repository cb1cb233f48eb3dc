//! `cooperative-sticky`: kafka-clients' `CooperativeStickyAssignor`.
//!
//! The target assignment is the sticky one of `AbstractStickyAssignor` (see the `sticky`
//! module: balanced, keeps partitions with their owners where balance allows, rack-aware
//! per KIP-881), the same as Java's for the same input (in the same member order) except
//! for inputs Java mishandles. The cooperative adjustment then leaves out of this
//! generation's assignment every partition that would change hands: a partition that some
//! other member claims goes to its new member only in the follow-up rebalance, after its
//! owner has revoked it (a member whose assignment lacks a partition it owns revokes it and
//! rejoins). So no partition is ever owned by two members because of an assignment.
//!
//! A partition stays in the assignment of member `m` when no other member claims it, or
//! when `m` is its valid previous owner. In its general case (unequal subscriptions) Java
//! keeps it as well when `m` claims it in an older generation than another member or in
//! the same generation as another member; this assignor leaves it out then, until the
//! other claimant has revoked it. So its assignment is Java's, or Java's less such
//! partitions.
//!
//! Owned partitions of a generation older than the group's highest still count as owned
//! when no member of a newer generation claims them (Java since Kafka 3.5, KAFKA-14639; the
//! rule before dropped them all, which made a member that missed one rebalance lose
//! everything).
//!
//! The member's generation: the subscription's (v2+) when known, else the int32 in the user
//! data, which is what Java writes there for pre-v2 peers (see
//! [`CooperativeSticky::subscription_user_data`]).

use std::collections::{BTreeMap, HashMap};

use byteorder::{BigEndian, ByteOrder};

use super::sticky::{self, Tp};
use super::{Assignor, Input, MemberSubscription, PartitionInfo, RebalanceProtocol};
use crate::types::TopicPartition;

/// The `cooperative-sticky` assignor.
#[derive(Debug, Clone, Copy, Default)]
pub struct CooperativeSticky;

impl CooperativeSticky {
    /// The target assignment, before the cooperative adjustment: where every partition is
    /// meant to end up once the partitions that move have been revoked.
    pub fn target_assignment(
        &self,
        topics: &BTreeMap<String, Vec<PartitionInfo>>,
        members: &[MemberSubscription],
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let input = Input::new(topics, members);
        let result = sticky::assign(&input, &generations(&input));
        input.output(result.assignment)
    }
}

/// The member's generation, as Java's `CooperativeStickyAssignor.memberData` reads it.
fn member_generation(m: &MemberSubscription) -> Option<i32> {
    if m.generation >= 0 {
        return Some(m.generation);
    }
    let data = m.user_data.as_ref()?;
    Some(match data.get(..4) {
        Some(bytes) => BigEndian::read_i32(bytes),
        // Java: user data it cannot read counts as the default generation.
        None => -1,
    })
}

fn generations(input: &Input<'_>) -> Vec<Option<i32>> {
    input
        .members
        .iter()
        .map(|m| member_generation(m.sub))
        .collect()
}

impl Assignor for CooperativeSticky {
    fn name(&self) -> &'static str {
        "cooperative-sticky"
    }

    fn protocols(&self) -> &'static [RebalanceProtocol] {
        &[RebalanceProtocol::Cooperative, RebalanceProtocol::Eager]
    }

    /// Java's `CooperativeStickyAssignor.subscriptionUserData`: the generation as a
    /// big-endian int32 (read by peers whose subscription version lacks the field).
    fn subscription_user_data(&self, generation: i32) -> Option<Vec<u8>> {
        Some(generation.to_be_bytes().to_vec())
    }

    fn assign(
        &self,
        topics: &BTreeMap<String, Vec<PartitionInfo>>,
        members: &[MemberSubscription],
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let input = Input::new(topics, members);
        let result = sticky::assign(&input, &generations(&input));
        let mut claimants: HashMap<Tp, Vec<usize>> = HashMap::new();
        for m in 0..input.members.len() {
            for tp in sticky::claims(&input, m) {
                claimants.entry(tp).or_default().push(m);
            }
        }
        let adjusted = result
            .assignment
            .into_iter()
            .enumerate()
            .map(|(m, partitions)| {
                partitions
                    .into_iter()
                    .filter(|tp| {
                        result.owner.get(tp) == Some(&m)
                            || claimants.get(tp).is_none_or(|c| c.iter().all(|&o| o == m))
                    })
                    .collect()
            })
            .collect();
        input.output(adjusted)
    }
}

#[cfg(test)]
mod tests;
