//! `roundrobin`: kafka-clients' `RoundRobinAssignor`, result for result.
//!
//! All partitions of all subscribed topics (topics by name, partitions by number) are dealt
//! out one by one to the members in `MemberInfo` order (static members by instance id, then
//! dynamic ones by member id), going round; a member not subscribed to a partition's topic
//! is skipped for it.

use std::collections::BTreeMap;

use super::{Assignor, Input, MemberSubscription, PartitionInfo, RebalanceProtocol};
use crate::types::TopicPartition;

/// The `roundrobin` assignor.
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundRobin;

impl Assignor for RoundRobin {
    fn name(&self) -> &'static str {
        "roundrobin"
    }

    fn protocols(&self) -> &'static [RebalanceProtocol] {
        &[RebalanceProtocol::Eager]
    }

    fn assign(
        &self,
        topics: &BTreeMap<String, Vec<PartitionInfo>>,
        members: &[MemberSubscription],
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let input = Input::new(topics, members);
        let order = input.member_info_order();
        let mut assignment: Vec<Vec<(usize, i32)>> = vec![Vec::new(); input.members.len()];
        // Java's `CircularIterator` over the members: `next` is the one it would return.
        let mut next = 0;
        for (t, topic) in input.topics.iter().enumerate() {
            for p in &topic.partitions {
                // Some member subscribes to every topic in `input.topics`.
                while !input.members[order[next]].topics.contains(&t) {
                    next = (next + 1) % order.len();
                }
                assignment[order[next]].push((t, p.partition));
                next = (next + 1) % order.len();
            }
        }
        input.output(assignment)
    }
}

#[cfg(test)]
mod tests;
