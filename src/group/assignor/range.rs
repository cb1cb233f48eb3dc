//! `range`: kafka-clients' `RangeAssignor`, result for result.
//!
//! Per topic, its members in `MemberInfo` order (static members by instance id, then
//! dynamic ones by member id) each get a consecutive range of its partitions; the first
//! `partitions % members` get one more. Topics are independent of each other.
//!
//! Rack-aware mode (KIP-881): used when some topic's members have racks, its partitions'
//! replicas have racks that meet them, and not every partition has replicas on all those
//! racks. Then, before the plain ranges, each member first takes (within the same per-topic
//! quota) the partitions it can read on its own rack: for a single topic, its first quota
//! of such partitions in member order; for topics with the same members and the same
//! partition count (co-partitioned), partition `p` of all of them goes to the first member
//! that matches the racks of partition `p` of every one of them. The rest is assigned in
//! plain ranges of what is left.

use std::collections::{BTreeMap, BTreeSet};

use super::{Assignor, Input, MemberSubscription, PartitionInfo, RebalanceProtocol};
use crate::types::TopicPartition;

/// The `range` assignor.
#[derive(Debug, Clone, Copy, Default)]
pub struct Range;

impl Assignor for Range {
    fn name(&self) -> &'static str {
        "range"
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
        let mut states: Vec<TopicState> = input
            .topics
            .iter()
            .enumerate()
            .map(|(t, topic)| {
                let consumers: Vec<(usize, Option<&str>)> = order
                    .iter()
                    .filter(|&&m| input.members[m].topics.contains(&t))
                    .map(|&m| (m, input.members[m].sub.rack_id()))
                    .collect();
                TopicState::new(t, &topic.partitions, consumers)
            })
            .collect();

        let mut assignment: Vec<Vec<(usize, i32)>> = vec![Vec::new(); input.members.len()];
        if states.iter().any(|s| s.needs_rack_aware) {
            assign_with_rack_matching(&mut states, &mut assignment);
        }
        for state in &mut states {
            state.assign_ranges(false, &mut assignment);
        }
        input.output(assignment)
    }
}

/// Java's `assignWithRackMatching`: topics grouped by their members, then by partition
/// count (the number of partitions with rack information, as Java counts them).
fn assign_with_rack_matching(states: &mut [TopicState], assignment: &mut [Vec<(usize, i32)>]) {
    let mut groups: BTreeMap<(Vec<usize>, usize), Vec<usize>> = BTreeMap::new();
    for (i, s) in states.iter().enumerate() {
        let members = s.consumers.iter().map(|&(m, _)| m).collect();
        groups
            .entry((members, s.partition_racks.len()))
            .or_default()
            .push(i);
    }
    for ((_, num_partitions), group) in groups {
        if group.len() > 1 {
            assign_co_partitioned(states, &group, num_partitions, assignment);
        } else {
            let state = &mut states[group[0]];
            if state.needs_rack_aware {
                state.assign_ranges(true, assignment);
            }
        }
    }
}

/// Java's `assignCoPartitionedWithRackMatching`: partition `p` of every topic of `group`
/// goes to the first remaining member that matches all their racks and can take more.
fn assign_co_partitioned(
    states: &mut [TopicState],
    group: &[usize],
    num_partitions: usize,
    assignment: &mut [Vec<(usize, i32)>],
) {
    let mut remaining: Vec<usize> = states[group[0]].consumers.iter().map(|&(m, _)| m).collect();
    for p in 0..num_partitions as i32 {
        let matching = remaining.iter().copied().find(|&c| {
            group.iter().all(|&t| {
                let s = &states[t];
                // Java assumes partitions 0..n; never hand out one that does not exist.
                s.unassigned.contains(&p) && s.racks_match(c, p) && s.max_assignable(c) > 0
            })
        });
        let Some(consumer) = matching else { continue };
        for &t in group {
            states[t].assign(consumer, &[p], assignment);
        }
        if group
            .iter()
            .all(|&t| states[t].max_assignable(consumer) == 0)
        {
            remaining.retain(|&c| c != consumer);
            if remaining.is_empty() {
                break;
            }
        }
    }
}

/// Java's `RangeAssignor.TopicAssignmentState`: one topic's assignment in progress.
struct TopicState<'a> {
    topic: usize,
    /// Its members in `MemberInfo` order, with their racks.
    consumers: Vec<(usize, Option<&'a str>)>,
    needs_rack_aware: bool,
    /// Each partition's replica racks; empty unless some member of the topic has a rack.
    partition_racks: BTreeMap<i32, BTreeSet<&'a str>>,
    /// Its partitions not yet assigned, in order.
    unassigned: Vec<i32>,
    /// How many partitions each member has (by member index).
    num_assigned: BTreeMap<usize, usize>,
    per_consumer: usize,
    remaining_with_extra: usize,
}

impl<'a> TopicState<'a> {
    fn new(
        topic: usize,
        partitions: &[&'a PartitionInfo],
        consumers: Vec<(usize, Option<&'a str>)>,
    ) -> TopicState<'a> {
        let n = consumers.len();
        let consumer_racks: BTreeSet<&str> = consumers.iter().filter_map(|&(_, r)| r).collect();
        let mut partition_racks = BTreeMap::new();
        if !consumer_racks.is_empty() {
            for p in partitions {
                let racks: BTreeSet<&str> = p.replica_racks.iter().map(String::as_str).collect();
                partition_racks.insert(p.partition, racks);
            }
        }
        let all_partition_racks: BTreeSet<&str> =
            partition_racks.values().flatten().copied().collect();
        // Java's `useRackAwareAssignment`.
        let needs_rack_aware = !consumer_racks.is_empty()
            && !consumer_racks.is_disjoint(&all_partition_racks)
            && !partition_racks.values().all(|r| *r == all_partition_racks);
        TopicState {
            topic,
            num_assigned: consumers.iter().map(|&(m, _)| (m, 0)).collect(),
            consumers,
            needs_rack_aware,
            partition_racks,
            unassigned: partitions.iter().map(|p| p.partition).collect(),
            per_consumer: partitions.len().checked_div(n).unwrap_or(0),
            remaining_with_extra: partitions.len().checked_rem(n).unwrap_or(0),
        }
    }

    fn rack_of(&self, consumer: usize) -> Option<&'a str> {
        self.consumers
            .iter()
            .find(|&&(m, _)| m == consumer)
            .and_then(|&(_, r)| r)
    }

    /// Java's `racksMatch`: a member without a rack matches every partition.
    fn racks_match(&self, consumer: usize, partition: i32) -> bool {
        match self.rack_of(consumer) {
            None => true,
            Some(rack) => self
                .partition_racks
                .get(&partition)
                .is_some_and(|r| r.contains(rack)),
        }
    }

    fn max_assignable(&self, consumer: usize) -> usize {
        let max = self.per_consumer + usize::from(self.remaining_with_extra > 0);
        max.saturating_sub(self.num_assigned[&consumer])
    }

    fn assign(
        &mut self,
        consumer: usize,
        partitions: &[i32],
        assignment: &mut [Vec<(usize, i32)>],
    ) {
        assignment[consumer].extend(partitions.iter().map(|&p| (self.topic, p)));
        let n = self.num_assigned.entry(consumer).or_insert(0);
        *n += partitions.len();
        if *n > self.per_consumer {
            self.remaining_with_extra = self.remaining_with_extra.saturating_sub(1);
        }
        self.unassigned.retain(|p| !partitions.contains(p));
    }

    /// Java's `assignRanges`: each member in order takes, up to its quota, the first
    /// unassigned partitions (with `rack_matching`, only those on its rack).
    fn assign_ranges(&mut self, rack_matching: bool, assignment: &mut [Vec<(usize, i32)>]) {
        let consumers: Vec<usize> = self.consumers.iter().map(|&(m, _)| m).collect();
        for consumer in consumers {
            if self.unassigned.is_empty() {
                break;
            }
            let take: Vec<i32> = self
                .unassigned
                .iter()
                .copied()
                .filter(|&p| !rack_matching || self.racks_match(consumer, p))
                .take(self.max_assignable(consumer))
                .collect();
            if !take.is_empty() {
                self.assign(consumer, &take, assignment);
            }
        }
    }
}

#[cfg(test)]
mod tests;
