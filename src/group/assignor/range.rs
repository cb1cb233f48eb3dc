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
//! that matches the racks of partition `p` of every one of them and can take more. The rest
//! is assigned in plain ranges of what is left. A member without a rack matches every
//! partition (as in Java). Without racks on both sides the result is the plain one.
//!
//! Cost: every partition is looked up in ordered sets (the unassigned partitions, per rack
//! and in all; the members that can take more, per rack), so a topic of `p` partitions
//! costs O(p log p) times its replicas' racks, never a scan of the members or partitions
//! per partition.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{Assignor, Input, MemberSubscription, PartitionInfo, Rack, RebalanceProtocol};
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
        let mut states: Vec<TopicState> = (0..input.topics.len())
            .map(|t| {
                let consumers: Vec<usize> = order
                    .iter()
                    .copied()
                    .filter(|&m| input.members[m].topics.contains(&t))
                    .collect();
                TopicState::new(&input, t, consumers)
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
/// count (the number of partitions with rack information, as Java counts them: none when
/// no member of the topic has a rack). Groups touch disjoint topics, so their order does
/// not matter.
fn assign_with_rack_matching(states: &mut [TopicState], assignment: &mut [Vec<(usize, i32)>]) {
    let mut groups: BTreeMap<(&[usize], usize), Vec<usize>> = BTreeMap::new();
    for (i, s) in states.iter().enumerate() {
        let counted = if s.has_racks { s.partitions.len() } else { 0 };
        groups.entry((&s.consumers, counted)).or_default().push(i);
    }
    let groups: Vec<(usize, Vec<usize>)> = groups
        .into_iter()
        .map(|((_, count), group)| (count, group))
        .collect();
    for (num_partitions, group) in groups {
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
/// goes to the first member (in `MemberInfo` order) that can take more and matches the
/// racks of partition `p` of every topic of the group. The topics of a group have the same
/// members and partition count, and get the same partitions here, so every member's
/// quota is the same in all of them: the first topic's stands for all.
fn assign_co_partitioned(
    states: &mut [TopicState],
    group: &[usize],
    num_partitions: usize,
    assignment: &mut [Vec<(usize, i32)>],
) {
    let lead = group[0];
    // The members that can take more, by position: those without a rack, and per rack.
    let mut open_any: BTreeSet<usize> = BTreeSet::new();
    let mut open_by_rack: HashMap<Rack, BTreeSet<usize>> = HashMap::new();
    for (pos, rack) in states[lead].racks.iter().enumerate() {
        if states[lead].max_assignable(pos) == 0 {
            continue;
        }
        match rack {
            None => open_any.insert(pos),
            Some(r) => open_by_rack.entry(*r).or_default().insert(pos),
        };
    }
    for p in 0..num_partitions as i32 {
        if open_any.is_empty() && open_by_rack.values().all(BTreeSet::is_empty) {
            break; // Java: no remaining member
        }
        // Java assumes partitions 0..n; never hand out one that does not exist.
        let Some(indexes) = group
            .iter()
            .map(|&t| states[t].index_of(p))
            .collect::<Option<Vec<usize>>>()
        else {
            continue;
        };
        if group
            .iter()
            .zip(&indexes)
            .any(|(&t, &i)| !states[t].unassigned.contains(&i))
        {
            continue;
        }
        // The racks partition `p` has replicas on in every topic of the group.
        let (first, rest) = (&group[0], &group[1..]);
        let common = states[*first].partition_racks[indexes[0]]
            .iter()
            .filter(|r| {
                rest.iter()
                    .zip(&indexes[1..])
                    .all(|(&t, &i)| states[t].partition_racks[i].binary_search(r).is_ok())
            });
        let mut best = open_any.first().copied();
        for r in common {
            if let Some(&pos) = open_by_rack.get(r).and_then(BTreeSet::first) {
                best = Some(best.map_or(pos, |b| b.min(pos)));
            }
        }
        let Some(pos) = best else { continue };
        let mut ended_extra = false;
        for (&t, &i) in group.iter().zip(&indexes) {
            ended_extra |= states[t].assign(pos, &[i], assignment);
        }
        let lead_state = &states[lead];
        let closed: Vec<usize> = if ended_extra {
            // Every member at the plain quota is now full too.
            (0..lead_state.consumers.len())
                .filter(|&c| lead_state.max_assignable(c) == 0)
                .collect()
        } else if lead_state.max_assignable(pos) == 0 {
            vec![pos]
        } else {
            Vec::new()
        };
        for c in closed {
            match lead_state.racks[c] {
                None => open_any.remove(&c),
                Some(r) => open_by_rack.get_mut(&r).is_some_and(|s| s.remove(&c)),
            };
        }
    }
}

/// Java's `RangeAssignor.TopicAssignmentState`: one topic's assignment in progress.
/// Members are named by their position in `consumers`, partitions by their index in
/// `partitions`.
struct TopicState {
    topic: usize,
    /// Its partition numbers, sorted.
    partitions: Vec<i32>,
    /// Its members (member indexes) in `MemberInfo` order.
    consumers: Vec<usize>,
    /// Each member's rack.
    racks: Vec<Option<Rack>>,
    /// Whether some member has a rack (Java then collects the partitions' racks).
    has_racks: bool,
    needs_rack_aware: bool,
    /// Each partition's replica racks (sorted).
    partition_racks: Vec<Box<[Rack]>>,
    /// The partitions not yet assigned, in order.
    unassigned: BTreeSet<usize>,
    /// The same, per rack of their replicas (only in rack-aware mode).
    unassigned_by_rack: HashMap<Rack, BTreeSet<usize>>,
    /// How many partitions each member has.
    num_assigned: Vec<usize>,
    per_consumer: usize,
    remaining_with_extra: usize,
}

impl TopicState {
    fn new(input: &Input<'_>, topic: usize, consumers: Vec<usize>) -> TopicState {
        let info = &input.topics[topic];
        let n = consumers.len();
        let racks: Vec<Option<Rack>> = consumers.iter().map(|&m| input.members[m].rack).collect();
        let consumer_racks: BTreeSet<Rack> = racks.iter().flatten().copied().collect();
        let has_racks = !consumer_racks.is_empty();
        let partition_racks = info.replica_racks.clone();
        let all_partition_racks: BTreeSet<Rack> = if has_racks {
            partition_racks
                .iter()
                .flat_map(|r| r.iter().copied())
                .collect()
        } else {
            BTreeSet::new()
        };
        // Java's `useRackAwareAssignment`.
        let needs_rack_aware = has_racks
            && !consumer_racks.is_disjoint(&all_partition_racks)
            && !partition_racks
                .iter()
                .all(|r| r.len() == all_partition_racks.len());
        let unassigned: BTreeSet<usize> = (0..info.partitions.len()).collect();
        let mut unassigned_by_rack: HashMap<Rack, BTreeSet<usize>> = HashMap::new();
        if has_racks {
            for (i, rs) in partition_racks.iter().enumerate() {
                for r in rs.iter().filter(|r| consumer_racks.contains(r)) {
                    unassigned_by_rack.entry(*r).or_default().insert(i);
                }
            }
        }
        TopicState {
            topic,
            partitions: info.partitions.iter().map(|p| p.partition).collect(),
            num_assigned: vec![0; n],
            consumers,
            racks,
            has_racks,
            needs_rack_aware,
            partition_racks,
            unassigned,
            unassigned_by_rack,
            per_consumer: info.partitions.len().checked_div(n).unwrap_or(0),
            remaining_with_extra: info.partitions.len().checked_rem(n).unwrap_or(0),
        }
    }

    /// The index of partition number `p`.
    fn index_of(&self, p: i32) -> Option<usize> {
        match self.partitions.get(usize::try_from(p).ok()?) {
            Some(&q) if q == p => usize::try_from(p).ok(),
            _ => self.partitions.binary_search(&p).ok(),
        }
    }

    /// How many more partitions the member at `pos` may take.
    fn max_assignable(&self, pos: usize) -> usize {
        let max = self.per_consumer + usize::from(self.remaining_with_extra > 0);
        max.saturating_sub(self.num_assigned[pos])
    }

    /// Gives the member at `pos` the partitions at `indexes` (all unassigned). Returns
    /// whether that took the last extra partition (Java's `onAssigned`).
    fn assign(
        &mut self,
        pos: usize,
        indexes: &[usize],
        assignment: &mut [Vec<(usize, i32)>],
    ) -> bool {
        let member = self.consumers[pos];
        for &i in indexes {
            assignment[member].push((self.topic, self.partitions[i]));
            self.unassigned.remove(&i);
            for r in self.partition_racks[i].iter() {
                if let Some(set) = self.unassigned_by_rack.get_mut(r) {
                    set.remove(&i);
                }
            }
        }
        self.num_assigned[pos] += indexes.len();
        if self.num_assigned[pos] > self.per_consumer && self.remaining_with_extra > 0 {
            self.remaining_with_extra -= 1;
            return self.remaining_with_extra == 0;
        }
        false
    }

    /// Java's `assignRanges`: each member in order takes, up to its quota, the first
    /// unassigned partitions (with `rack_matching`, only those on its rack, unless it has
    /// no rack).
    fn assign_ranges(&mut self, rack_matching: bool, assignment: &mut [Vec<(usize, i32)>]) {
        for pos in 0..self.consumers.len() {
            if self.unassigned.is_empty() {
                break;
            }
            let max = self.max_assignable(pos);
            if max == 0 {
                continue;
            }
            let from = match self.racks[pos] {
                Some(r) if rack_matching => self.unassigned_by_rack.get(&r),
                _ => Some(&self.unassigned),
            };
            let take: Vec<usize> = from
                .map(|set| set.iter().copied().take(max).collect())
                .unwrap_or_default();
            if !take.is_empty() {
                self.assign(pos, &take, assignment);
            }
        }
    }
}

#[cfg(test)]
mod tests;
