//! The sticky assignment of kafka-clients' `AbstractStickyAssignor` (the part
//! `StickyAssignor` and `CooperativeStickyAssignor` share), ported step by step, with
//! Java's hash-map iteration orders replaced by fixed ones (members by member id, topics by
//! name, partitions by number).
//!
//! 1. Previous ownership: each member's owned partitions of assigned topics count, except
//!    that a partition claimed by several members goes to the claim with the highest
//!    generation, and is owned by nobody if several members claim it in that generation.
//!    (Java resolves the claims member by member in hash-map order, which can give a
//!    different answer when three or more members claim one partition; this answer does
//!    not depend on any order.) Older generations are not discarded otherwise: since
//!    KAFKA-14639 (Kafka 3.5) a member that missed a rebalance keeps its partitions when
//!    nobody else claims them.
//! 2. Racks (KIP-881): used when members and replicas carry racks that meet, and not every
//!    partition has replicas on every rack; then owned partitions off the member's rack
//!    are given up, and new partitions go to a member on their rack when balance allows.
//! 3. When all members subscribe to the same topics, the constrained algorithm: every
//!    member keeps its owned partitions up to its quota (`floor` or `ceil` of partitions
//!    per member, with exactly `partitions % members` members at `ceil`), and the rest is
//!    dealt round-robin to the members under quota. The result is balanced (counts differ
//!    by at most one) and moves only what balance requires.
//! 4. Otherwise, the general algorithm: owned partitions stay (unless the member no longer
//!    subscribes to their topic), the others go one by one to the least loaded member
//!    subscribed to their topic, then partitions move from members with at least two more
//!    partitions than another member subscribed to the same topic until no such move is
//!    left; a partition moves preferably back to its owner in an older generation.
//!
//! Deviations from Java, all for inputs Java handles badly (`tests/assignors.rs` meets the
//! first two in kafka-clients 4.4): in the general algorithm a member never gets a
//! partition of a topic it does not subscribe to (Java can hand one back to its owner of an
//! older generation), and an owner of an older generation that is set aside as unable to
//! take part in balancing is skipped (Java throws a `NullPointerException`); besides, an
//! owned partition that does not exist is ignored, a topic listed twice by one member
//! counts once, a member with an empty subscription makes subscriptions unequal, and the
//! rebalancing loop stops after a bounded number of rounds.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::Input;

/// A partition: (topic index in [`Input::topics`], partition number).
pub(super) type Tp = (usize, i32);

/// The result of [`assign`].
pub(super) struct Sticky {
    /// Each member's partitions, by member index.
    pub assignment: Vec<Vec<Tp>>,
    /// Each partition's valid previous owner (see the module doc, step 1).
    pub owner: HashMap<Tp, usize>,
}

/// The sticky assignment of `input`'s partitions; `generations[m]` is member `m`'s
/// generation as its member data tells it (`None` when unknown).
pub(super) fn assign(input: &Input<'_>, generations: &[Option<i32>]) -> Sticky {
    let n = input.members.len();
    let ownership = Ownership::new(input, generations);
    let owner = ownership
        .owned
        .iter()
        .enumerate()
        .flat_map(|(m, owned)| owned.iter().map(move |&tp| (tp, m)))
        .collect();
    if n == 0 {
        return Sticky {
            assignment: Vec::new(),
            owner,
        };
    }
    let racks = RackInfo::new(input);
    let all_equal = input
        .members
        .windows(2)
        .all(|w| w[0].all_topics == w[1].all_topics);
    let assignment = if all_equal {
        Constrained::new(input, &racks, ownership).build()
    } else {
        General::new(input, &racks, ownership, generations).build()
    };
    Sticky { assignment, owner }
}

/// Member `m`'s claims: its owned partitions that exist in `input`, without repeats.
pub(super) fn claims(input: &Input<'_>, m: usize) -> BTreeSet<Tp> {
    input.members[m]
        .sub
        .owned_partitions
        .iter()
        .filter_map(|tp| {
            let t = input.topic_index(tp.topic())?;
            input
                .has_partition(t, tp.partition())
                .then_some((t, tp.partition()))
        })
        .collect()
}

/// Who owns what before this assignment (Java's `allSubscriptionsEqual` side output).
struct Ownership {
    /// Each member's valid owned partitions (Java's `consumerToOwnedPartitions`);
    /// a partition claimed by several members in its highest claiming generation is in
    /// none of them (Java's `partitionsWithMultiplePreviousOwners`).
    owned: Vec<Vec<Tp>>,
    /// The highest generation of any member (-1 if none is known).
    max_generation: i32,
}

impl Ownership {
    fn new(input: &Input<'_>, generations: &[Option<i32>]) -> Ownership {
        let n = input.members.len();
        let generation = |m: usize| generations[m].unwrap_or(-1);
        let mut claimants: BTreeMap<Tp, Vec<usize>> = BTreeMap::new();
        for m in 0..n {
            for tp in claims(input, m) {
                claimants.entry(tp).or_default().push(m);
            }
        }
        let mut owned = vec![Vec::new(); n];
        for (tp, members) in claimants {
            let top = members.iter().map(|&m| generation(m)).max().unwrap_or(-1);
            let winners: Vec<usize> = members
                .into_iter()
                .filter(|&m| generation(m) == top)
                .collect();
            if let [m] = winners[..] {
                owned[m].push(tp);
            }
        }
        Ownership {
            owned,
            max_generation: (0..n).map(generation).max().unwrap_or(-1).max(-1),
        }
    }
}

/// Java's `AbstractStickyAssignor.RackInfo`.
struct RackInfo<'a> {
    /// Each member's rack, in rack-aware mode only (Java's `consumerRacks`).
    consumer: Vec<Option<&'a str>>,
    /// Whether rack-aware mode is on (Java: `consumerRacks` is not empty).
    aware: bool,
    /// Each partition's replica racks, in rack-aware mode only.
    partition: HashMap<Tp, BTreeSet<&'a str>>,
    /// For each partition, how many members are on its replicas' racks; computed whenever
    /// some member has a rack, rack-aware mode or not (as Java does).
    consumers_by_partition: HashMap<Tp, usize>,
}

impl<'a> RackInfo<'a> {
    fn new(input: &Input<'a>) -> RackInfo<'a> {
        let n = input.members.len();
        let mut consumers_by_rack: BTreeMap<&str, usize> = BTreeMap::new();
        for m in &input.members {
            if let Some(r) = m.sub.rack_id() {
                *consumers_by_rack.entry(r).or_default() += 1;
            }
        }
        let mut partition: HashMap<Tp, BTreeSet<&str>> = HashMap::new();
        if !consumers_by_rack.is_empty() {
            for (t, topic) in input.topics.iter().enumerate() {
                for p in &topic.partitions {
                    let racks = p.replica_racks.iter().map(String::as_str).collect();
                    partition.insert((t, p.partition), racks);
                }
            }
        }
        let all_partition_racks: BTreeSet<&str> = partition.values().flatten().copied().collect();
        let aware = !consumers_by_rack.is_empty()
            && consumers_by_rack
                .keys()
                .any(|r| all_partition_racks.contains(r))
            && !partition.values().all(|r| *r == all_partition_racks);
        let consumers_by_partition = partition
            .iter()
            .map(|(&tp, racks)| {
                let count = racks
                    .iter()
                    .map(|r| consumers_by_rack.get(r).copied().unwrap_or(0))
                    .sum();
                (tp, count)
            })
            .collect();
        RackInfo {
            consumer: if aware {
                input.members.iter().map(|m| m.sub.rack_id()).collect()
            } else {
                vec![None; n]
            },
            aware,
            partition: if aware { partition } else { HashMap::new() },
            consumers_by_partition,
        }
    }

    /// Java's `racksMismatch`: the member has a rack and the partition has no replica on it.
    fn mismatch(&self, member: usize, tp: Tp) -> bool {
        match self.consumer[member] {
            None => false,
            Some(rack) => !self.partition.get(&tp).is_some_and(|r| r.contains(rack)),
        }
    }

    /// Java's `sortPartitionsByRackConsumers` (a stable sort).
    fn sort_by_rack_consumers(&self, partitions: &mut [Tp]) {
        if !self.consumers_by_partition.is_empty() {
            partitions.sort_by_key(|tp| self.consumers_by_partition.get(tp).copied().unwrap_or(0));
        }
    }

    /// Java's `nextRackConsumer`: the index in `members`, from `first` on (wrapping), of
    /// the first member on one of the partition's racks.
    fn next_rack_consumer(&self, tp: Tp, members: &[usize], first: usize) -> Option<usize> {
        let racks = self.partition.get(&tp).filter(|r| !r.is_empty())?;
        (0..members.len())
            .map(|i| (first + i) % members.len())
            .find(|&i| self.consumer[members[i]].is_some_and(|r| racks.contains(r)))
    }
}

/// Java's `ConstrainedAssignmentBuilder`: all members subscribe to the same topics.
struct Constrained<'i, 'a> {
    input: &'i Input<'a>,
    racks: &'i RackInfo<'a>,
    owned: Vec<Vec<Tp>>,
    min_quota: usize,
    max_quota: usize,
    /// How many members get `max_quota` (when it differs from `min_quota`).
    expected_over: usize,
    current_over: usize,
    under_min: Vec<usize>,
    exactly_min: Vec<usize>,
    assignment: Vec<Vec<Tp>>,
}

impl<'i, 'a> Constrained<'i, 'a> {
    fn new(input: &'i Input<'a>, racks: &'i RackInfo<'a>, ownership: Ownership) -> Self {
        let n = input.members.len();
        let total: usize = input.topics.iter().map(|t| t.partitions.len()).sum();
        Constrained {
            input,
            racks,
            owned: ownership.owned,
            min_quota: total / n,
            max_quota: total.div_ceil(n),
            expected_over: total % n,
            current_over: 0,
            under_min: Vec::new(),
            exactly_min: Vec::new(),
            assignment: vec![Vec::new(); n],
        }
    }

    fn build(mut self) -> Vec<Vec<Tp>> {
        let assigned = self.assign_owned();
        let mut unassigned: Vec<Tp> = self
            .input
            .topics
            .iter()
            .enumerate()
            .flat_map(|(t, topic)| topic.partitions.iter().map(move |p| (t, p.partition)))
            .filter(|tp| !assigned.contains(tp))
            .collect();
        // Member indexes are in member-id order already.
        self.under_min.sort_unstable();
        self.exactly_min.sort_unstable();
        self.racks.sort_by_rack_consumers(&mut unassigned);
        let unassigned = self.assign_rack_aware_round_robin(unassigned);
        self.assign_round_robin(unassigned);
        self.assignment
    }

    /// Java's `assignOwnedPartitions`: each member keeps its owned partitions (on its rack)
    /// up to its quota. Returns the partitions kept.
    fn assign_owned(&mut self) -> HashSet<Tp> {
        let mut assigned = HashSet::new();
        for c in 0..self.owned.len() {
            let mut owned: Vec<Tp> = self.owned[c]
                .iter()
                .copied()
                .filter(|&tp| !self.racks.mismatch(c, tp))
                .collect();
            // By partition, then topic (topic indexes are in name order).
            owned.sort_unstable_by_key(|&(t, p)| (p, t));
            let keep = if owned.len() < self.min_quota {
                self.under_min.push(c);
                owned.len()
            } else if owned.len() >= self.max_quota && self.current_over < self.expected_over {
                self.current_over += 1;
                if self.current_over == self.expected_over {
                    self.exactly_min.clear();
                }
                self.max_quota
            } else {
                if self.current_over < self.expected_over {
                    self.exactly_min.push(c);
                }
                self.min_quota
            };
            owned.truncate(keep);
            assigned.extend(owned.iter().copied());
            self.assignment[c] = owned;
        }
        assigned
    }

    /// Java's `assignRackAwareRoundRobin`: partitions go, in turn, to the members under
    /// quota on their racks. Returns the partitions left.
    fn assign_rack_aware_round_robin(&mut self, unassigned: Vec<Tp>) -> Vec<Tp> {
        if !self.racks.aware {
            return unassigned;
        }
        let mut next_index = 0;
        let mut left = Vec::new();
        for tp in unassigned {
            let mut consumer = None;
            if let Some(mut index) = self
                .racks
                .next_rack_consumer(tp, &self.under_min, next_index)
            {
                let c = self.under_min[index];
                let count = self.assignment[c].len() + 1;
                if count >= self.min_quota {
                    self.under_min.remove(index);
                    if count < self.max_quota && self.current_over < self.expected_over {
                        self.exactly_min.push(c);
                    }
                } else {
                    index += 1;
                }
                next_index = if self.under_min.is_empty() {
                    0
                } else {
                    index % self.under_min.len()
                };
                consumer = Some(c);
            } else if !self.exactly_min.is_empty() {
                if let Some(index) = self.racks.next_rack_consumer(tp, &self.exactly_min, 0) {
                    let c = self.exactly_min[index];
                    if self.assignment[c].len() + 1 == self.max_quota {
                        self.exactly_min.remove(index);
                        self.current_over += 1;
                        if self.current_over == self.expected_over {
                            self.exactly_min.clear();
                        }
                    }
                    consumer = Some(c);
                }
            }
            match consumer {
                Some(c) => self.assignment[c].push(tp),
                None => left.push(tp),
            }
        }
        left
    }

    /// Java's `assignRoundRobin`: the members under `min_quota` in turn, then those at
    /// `min_quota` that may still get one more.
    fn assign_round_robin(&mut self, unassigned: Vec<Tp>) {
        // Java's iterator over `under_min`: the index of its next element.
        let mut cursor = 0;
        for tp in unassigned {
            let c = if cursor < self.under_min.len() {
                cursor += 1;
                self.under_min[cursor - 1]
            } else if self.under_min.is_empty() {
                if self.exactly_min.is_empty() {
                    // Java throws here; unreachable, the quotas leave room for every
                    // partition.
                    break;
                }
                self.exactly_min.remove(0)
            } else {
                cursor = 1;
                self.under_min[0]
            };
            self.assignment[c].push(tp);
            let count = self.assignment[c].len();
            if count == self.min_quota {
                cursor -= 1;
                self.under_min.remove(cursor);
                self.exactly_min.push(c);
            } else if count == self.max_quota {
                self.current_over += 1;
            }
        }
    }
}

/// Java's `PartitionMovements`: which partitions moved between which members during the
/// general algorithm, to move a partition back rather than another one further.
#[derive(Default)]
struct Movements {
    /// By topic, by (from, to): the partitions that moved so.
    by_topic: BTreeMap<usize, BTreeMap<(usize, usize), BTreeSet<i32>>>,
    /// Each moved partition's (first owner, current owner).
    moves: HashMap<Tp, (usize, usize)>,
}

impl Movements {
    fn remove_record(&mut self, tp: Tp) -> Option<(usize, usize)> {
        let pair = self.moves.remove(&tp)?;
        if let Some(topic) = self.by_topic.get_mut(&tp.0) {
            if let Some(set) = topic.get_mut(&pair) {
                set.remove(&tp.1);
                if set.is_empty() {
                    topic.remove(&pair);
                }
            }
            if topic.is_empty() {
                self.by_topic.remove(&tp.0);
            }
        }
        Some(pair)
    }

    fn add_record(&mut self, tp: Tp, pair: (usize, usize)) {
        self.moves.insert(tp, pair);
        self.by_topic
            .entry(tp.0)
            .or_default()
            .entry(pair)
            .or_default()
            .insert(tp.1);
    }

    fn move_partition(&mut self, tp: Tp, old: usize, new: usize) {
        match self.remove_record(tp) {
            Some((first, _)) => {
                if first != new {
                    self.add_record(tp, (first, new));
                }
            }
            None => self.add_record(tp, (old, new)),
        }
    }

    /// Java's `getTheActualPartitionToBeMoved`: rather than moving `tp` from `old` to
    /// `new`, move back a partition of the same topic that moved from `new` to `old`.
    fn actual_partition_to_move(&self, tp: Tp, old: usize, new: usize) -> Tp {
        let Some(topic) = self.by_topic.get(&tp.0) else {
            return tp;
        };
        let old = self.moves.get(&tp).map_or(old, |&(first, _)| first);
        match topic.get(&(new, old)).and_then(|set| set.first()) {
            Some(&p) => (tp.0, p),
            None => tp,
        }
    }
}

/// Java's `GeneralAssignmentBuilder`: members subscribe to different topics.
struct General<'i, 'a> {
    input: &'i Input<'a>,
    racks: &'i RackInfo<'a>,
    generations: &'i [Option<i32>],
    max_generation: i32,
    /// Each topic's members (Java's `topic2AllPotentialConsumers`).
    topic_consumers: Vec<Vec<usize>>,
    /// Each member's partitions (`None` while it is set aside as fixed).
    current: Vec<Option<Vec<Tp>>>,
    /// Each assigned partition's member (Java's `currentPartitionConsumer`).
    partition_consumer: HashMap<Tp, usize>,
    /// All partitions, topics with fewer members first (Java's `sortedAllPartitions`).
    sorted_all: Vec<Tp>,
    /// The members by (partition count, member index) (Java's `sortedCurrentSubscriptions`).
    sorted: BTreeSet<(usize, usize)>,
    revocation_required: bool,
    movements: Movements,
}

impl<'i, 'a> General<'i, 'a> {
    fn new(
        input: &'i Input<'a>,
        racks: &'i RackInfo<'a>,
        ownership: Ownership,
        generations: &'i [Option<i32>],
    ) -> Self {
        let mut topic_consumers = vec![Vec::new(); input.topics.len()];
        for (m, member) in input.members.iter().enumerate() {
            for &t in &member.topics {
                topic_consumers[t].push(m);
            }
        }
        let mut partition_consumer = HashMap::new();
        for (m, owned) in ownership.owned.iter().enumerate() {
            for &tp in owned {
                partition_consumer.insert(tp, m);
            }
        }
        // Topic indexes are in name order: a stable sort by member count gives Java's
        // `TopicComparator` order.
        let mut topics: Vec<usize> = (0..input.topics.len()).collect();
        topics.sort_by_key(|&t| topic_consumers[t].len());
        let sorted_all = topics
            .iter()
            .flat_map(|&t| {
                input.topics[t]
                    .partitions
                    .iter()
                    .map(move |p| (t, p.partition))
            })
            .collect();
        General {
            input,
            racks,
            generations,
            max_generation: ownership.max_generation,
            topic_consumers,
            current: ownership.owned.into_iter().map(Some).collect(),
            partition_consumer,
            sorted_all,
            sorted: BTreeSet::new(),
            revocation_required: false,
            movements: Movements::default(),
        }
    }

    fn build(mut self) -> Vec<Vec<Tp>> {
        let prev = self.prev_assignment();
        let assigned = self.assign_owned();
        let unassigned: Vec<Tp> = self
            .sorted_all
            .iter()
            .copied()
            .filter(|tp| !assigned.contains(tp))
            .collect();
        for c in 0..self.current.len() {
            self.insert_sorted(c);
        }
        self.balance(&prev, unassigned);
        self.current
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect()
    }

    /// Java's `prepopulateCurrentAssignments`: the partitions owned by members of older
    /// generations, each with its owner of the newest such generation.
    fn prev_assignment(&self) -> HashMap<Tp, usize> {
        let mut prev: HashMap<Tp, (usize, i32)> = HashMap::new();
        for m in 0..self.input.members.len() {
            let generation = match self.generations[m] {
                Some(g) if g < self.max_generation => g,
                None if self.max_generation > -1 => -1,
                _ => continue,
            };
            for tp in claims(self.input, m) {
                let entry = prev.entry(tp).or_insert((m, generation));
                if generation > entry.1 {
                    *entry = (m, generation);
                }
            }
        }
        prev.into_iter().map(|(tp, (m, _))| (tp, m)).collect()
    }

    /// Java's `assignOwnedPartitions`: owned partitions stay unless the member no longer
    /// subscribes to their topic or (rack-aware) is off their racks.
    fn assign_owned(&mut self) -> HashSet<Tp> {
        let mut assigned = HashSet::new();
        for c in 0..self.current.len() {
            let owned = self.current[c].take().unwrap_or_default();
            let mut kept = Vec::with_capacity(owned.len());
            for tp in owned {
                if !self.input.members[c].topics.contains(&tp.0) || self.racks.mismatch(c, tp) {
                    self.partition_consumer.remove(&tp);
                    self.revocation_required = true;
                } else {
                    assigned.insert(tp);
                    kept.push(tp);
                }
            }
            self.current[c] = Some(kept);
        }
        assigned
    }

    fn len(&self, c: usize) -> Option<usize> {
        self.current[c].as_ref().map(Vec::len)
    }

    fn insert_sorted(&mut self, c: usize) {
        if let Some(n) = self.len(c) {
            self.sorted.insert((n, c));
        }
    }

    fn remove_sorted(&mut self, c: usize) {
        if let Some(n) = self.len(c) {
            self.sorted.remove(&(n, c));
        }
    }

    fn subscribes(&self, c: usize, topic: usize) -> bool {
        self.input.members[c].topics.contains(&topic)
    }

    /// All the partitions member `c` could get.
    fn max_assignment_size(&self, c: usize) -> usize {
        self.input.members[c]
            .topics
            .iter()
            .map(|&t| self.input.topics[t].partitions.len())
            .sum()
    }

    /// Java's `isBalanced`: member counts differ by at most one, or no partition can move
    /// to a member subscribed to its topic with at least two fewer partitions.
    fn is_balanced(&self) -> bool {
        let (Some(&(min, _)), Some(&(max, _))) = (self.sorted.first(), self.sorted.last()) else {
            return true;
        };
        if min + 1 >= max {
            return true;
        }
        for &(count, c) in &self.sorted {
            if count == self.max_assignment_size(c) {
                continue;
            }
            for &t in &self.input.members[c].topics {
                for p in &self.input.topics[t].partitions {
                    let Some(&other) = self.partition_consumer.get(&(t, p.partition)) else {
                        continue;
                    };
                    if other == c {
                        continue;
                    }
                    if let Some(other_count) = self.len(other) {
                        if count + 1 < other_count {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// Java's `getBalanceScore`: the sum of count differences over all pairs of members.
    fn balance_score(assignment: &[Option<Vec<Tp>>]) -> usize {
        let counts: Vec<usize> = assignment.iter().flatten().map(Vec::len).collect();
        let mut score = 0;
        for (i, a) in counts.iter().enumerate() {
            for b in &counts[i + 1..] {
                score += a.abs_diff(*b);
            }
        }
        score
    }

    /// Java's `maybeAssignPartition`: to the least loaded member subscribed to its topic
    /// (on its rack, with `rack_matching`).
    fn maybe_assign_partition(&mut self, tp: Tp, rack_matching: bool) -> bool {
        let found =
            self.sorted.iter().map(|&(_, c)| c).find(|&c| {
                self.subscribes(c, tp.0) && (!rack_matching || !self.racks.mismatch(c, tp))
            });
        let Some(c) = found else { return false };
        self.remove_sorted(c);
        if let Some(list) = self.current[c].as_mut() {
            list.push(tp);
        }
        self.partition_consumer.insert(tp, c);
        self.insert_sorted(c);
        true
    }

    /// Java's `maybeAssign`.
    fn maybe_assign(&mut self, partitions: &mut Vec<Tp>, rack_matching: bool, remove: bool) {
        let mut i = 0;
        while i < partitions.len() {
            let tp = partitions[i];
            if !self.topic_consumers[tp.0].is_empty()
                && self.maybe_assign_partition(tp, rack_matching)
                && remove
            {
                partitions.remove(i);
            } else {
                i += 1;
            }
        }
    }

    fn can_topic_participate(&self, t: usize) -> bool {
        self.topic_consumers[t].len() >= 2
    }

    fn can_consumer_participate(&self, c: usize) -> bool {
        let Some(list) = self.current[c].as_ref() else {
            return false;
        };
        list.len() < self.max_assignment_size(c)
            || list.iter().any(|&(t, _)| self.can_topic_participate(t))
    }

    /// Java's `balance`.
    fn balance(&mut self, prev: &HashMap<Tp, usize>, mut unassigned: Vec<Tp>) {
        let initializing = self.sorted.last().is_none_or(|&(n, _)| n == 0);

        let mut to_assign = unassigned.clone();
        if self.racks.aware {
            self.maybe_assign(&mut to_assign, true, true);
        }
        self.maybe_assign(&mut to_assign, false, false);

        // Only partitions and members that can move take part in the reassignment.
        let fixed_topics: Vec<bool> = (0..self.input.topics.len())
            .map(|t| !self.can_topic_participate(t))
            .collect();
        self.sorted_all.retain(|tp| !fixed_topics[tp.0]);
        unassigned.retain(|tp| !fixed_topics[tp.0]);
        let mut fixed = Vec::new();
        for c in 0..self.current.len() {
            if !self.can_consumer_participate(c) {
                self.remove_sorted(c);
                if let Some(list) = self.current[c].take() {
                    fixed.push((c, list));
                }
            }
        }

        let pre_balance = self.current.clone();
        let pre_balance_consumers = self.partition_consumer.clone();
        if !self.revocation_required {
            // First try to balance by moving only the newly assigned partitions.
            self.perform_reassignments(&unassigned, prev);
        }
        let all = self.sorted_all.clone();
        let performed = self.perform_reassignments(&all, prev);
        if !initializing
            && performed
            && Self::balance_score(&self.current) >= Self::balance_score(&pre_balance)
        {
            self.current = pre_balance;
            self.partition_consumer = pre_balance_consumers;
        }

        for (c, list) in fixed {
            self.current[c] = Some(list);
            self.insert_sorted(c);
        }
    }

    /// Java's `performReassignments`: move partitions, in the order of `partitions`, to
    /// less loaded members until balanced or nothing moves. Returns whether any moved.
    fn perform_reassignments(&mut self, partitions: &[Tp], prev: &HashMap<Tp, usize>) -> bool {
        // Java loops until nothing moves; a bound keeps a pathological input finite.
        let max_rounds = (self.sorted_all.len() + 1) * (self.current.len() + 1);
        let mut performed = false;
        for _ in 0..max_rounds {
            let mut modified = false;
            for &tp in partitions {
                if self.is_balanced() {
                    break;
                }
                let Some(&c) = self.partition_consumer.get(&tp) else {
                    continue;
                };
                let Some(count) = self.len(c) else { continue };

                // Back to its owner of an older generation, when that is more balanced.
                if let Some(&owner) = prev.get(&tp) {
                    let back = self.subscribes(owner, tp.0)
                        && self.len(owner).is_some_and(|n| count > n + 1);
                    if back {
                        self.reassign_partition_to(tp, owner);
                        performed = true;
                        modified = true;
                        continue;
                    }
                }

                // Otherwise to the least loaded member, if one subscribed to the topic (on
                // the partition's rack, when `c` is on it) has at least two fewer.
                let heavier = |other: usize| self.len(other).is_some_and(|n| count > n + 1);
                let mut found = false;
                if let (Some(rack), Some(racks)) =
                    (self.racks.consumer[c], self.racks.partition.get(&tp))
                {
                    if racks.contains(rack) {
                        found = self.topic_consumers[tp.0].iter().any(|&other| {
                            self.racks.consumer[other].is_some_and(|r| racks.contains(r))
                                && heavier(other)
                        });
                    }
                }
                if !found {
                    found = self.topic_consumers[tp.0]
                        .iter()
                        .any(|&other| heavier(other));
                }
                if found {
                    self.reassign_partition(tp);
                    performed = true;
                    modified = true;
                }
            }
            if !modified {
                break;
            }
        }
        performed
    }

    /// To the least loaded member subscribed to its topic.
    fn reassign_partition(&mut self, tp: Tp) {
        let new = self
            .sorted
            .iter()
            .map(|&(_, c)| c)
            .find(|&c| self.subscribes(c, tp.0));
        if let Some(new) = new {
            self.reassign_partition_to(tp, new);
        }
    }

    fn reassign_partition_to(&mut self, tp: Tp, new: usize) {
        let Some(&old) = self.partition_consumer.get(&tp) else {
            return;
        };
        let tp = self.movements.actual_partition_to_move(tp, old, new);
        self.process_partition_movement(tp, new);
    }

    fn process_partition_movement(&mut self, tp: Tp, new: usize) {
        let Some(&old) = self.partition_consumer.get(&tp) else {
            return;
        };
        if self.current[old].is_none() || self.current[new].is_none() {
            return;
        }
        self.remove_sorted(old);
        self.remove_sorted(new);
        self.movements.move_partition(tp, old, new);
        if let Some(list) = self.current[old].as_mut() {
            if let Some(i) = list.iter().position(|&x| x == tp) {
                list.remove(i);
            }
        }
        if let Some(list) = self.current[new].as_mut() {
            list.push(tp);
        }
        self.partition_consumer.insert(tp, new);
        self.insert_sorted(new);
        self.insert_sorted(old);
    }
}
