//! The sticky assignment of kafka-clients' `AbstractStickyAssignor` (the part
//! `StickyAssignor` and `CooperativeStickyAssignor` share), ported step by step, with the
//! same result for the same input: where Java lets the iteration order of a `HashMap` or
//! `HashSet` decide, that order is reproduced (`java_order`), and everywhere else Java's
//! orders are fixed ones (members by member id, topics by name, partitions by number).
//!
//! 1. Previous ownership (Java's `allSubscriptionsEqual`): the members' claims are read in
//!    the order of Java's `HashMap` of the subscriptions; a partition already claimed goes
//!    to the newer generation, and when two claims are of the same generation it is owned
//!    by neither and marked as claimed by several members. Older generations are not
//!    discarded otherwise: since KAFKA-14639 (Kafka 3.5) a member that missed a rebalance
//!    keeps its partitions when nobody else claims them.
//! 2. Racks (KIP-881, Java's `RackInfo`): used when members and replicas carry racks that
//!    meet, and not every partition has replicas on every rack; then owned partitions off
//!    the member's rack are given up, and new partitions go to a member on their rack when
//!    balance allows. Partitions are handed out fewest-members-on-their-racks first
//!    whenever some member has a rack.
//! 3. When all members subscribe to the same topics, the constrained algorithm: every
//!    member keeps its owned partitions (on its rack) up to its quota (`floor` or `ceil` of
//!    partitions per member, with exactly `partitions % members` members at `ceil`, the
//!    first ones in `HashMap` order that own enough), then partitions go round-robin to the
//!    members under quota on their racks, then round-robin to the members under quota. The
//!    result is balanced (counts differ by at most one) and moves only what balance and
//!    racks require. Each partition costs O(log members) per rack of its replicas.
//! 4. Otherwise, the general algorithm: owned partitions stay (unless the member no longer
//!    subscribes to their topic or is off their racks), the others go one by one to the
//!    least loaded member subscribed to their topic (on their rack first), then partitions
//!    move from members with at least two more partitions than another member subscribed
//!    to the same topic until no such move is left; a partition moves preferably back to
//!    its owner in an older generation. Its balancing is Java's, quadratic in the partitions
//!    when subscriptions make perfect balance impossible.
//!
//! Deviations from Java, all for inputs Java handles badly (`tests/assignors.rs` meets the
//! first two in kafka-clients 4.4): in the general algorithm a member never gets a
//! partition of a topic it does not subscribe to (Java can hand one back to its owner of an
//! older generation), and an owner of an older generation that is set aside as unable to
//! take part in balancing is skipped (Java throws a `NullPointerException`); besides, an
//! owned partition that does not exist is ignored, a partition listed twice by one member
//! or a topic listed twice counts once, a member with an empty subscription makes
//! subscriptions unequal, and the rebalancing loop stops after a bounded number of rounds.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::java_order::{self, HashOrder};
use super::{Input, Rack};

/// A partition: (topic index in [`Input::topics`], partition number).
pub(super) type Tp = (usize, i32);

/// The result of [`assign`].
pub(super) struct Sticky {
    /// Each member's partitions, by member index.
    pub assignment: Vec<Vec<Tp>>,
    /// Each partition's valid previous owner: the member that owns it after step 1 of the
    /// module doc, unless several members claim it in one generation.
    pub owner: HashMap<Tp, usize>,
}

/// The sticky assignment of `input`'s partitions; `generations[m]` is member `m`'s
/// generation as its member data tells it (`None` when unknown).
pub(super) fn assign(input: &Input<'_>, generations: &[Option<i32>]) -> Sticky {
    let n = input.members.len();
    let java_order = input.java_map_order();
    let ownership = Ownership::new(input, generations, &java_order);
    let owner = ownership
        .owned
        .iter()
        .enumerate()
        .flat_map(|(m, owned)| owned.iter().map(move |&tp| (tp, m)))
        .filter(|(tp, _)| !ownership.multiple.contains(tp))
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
        Constrained::new(input, &racks, ownership, &java_order).build()
    } else {
        General::new(input, &racks, ownership, generations, &java_order).build()
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
    /// Each member's owned partitions (Java's `consumerToOwnedPartitions`).
    owned: Vec<Vec<Tp>>,
    /// The partitions two members claimed in one generation (Java's
    /// `partitionsWithMultiplePreviousOwners`); a later claim of a newer generation can
    /// still own one of them.
    multiple: HashSet<Tp>,
    /// The highest generation of any member (-1 if none is known).
    max_generation: i32,
}

impl Ownership {
    /// Java's claim resolution, member by member in `java_order`. A claim is compared with
    /// the one the partition's last claimant made, by that claimant's subscription
    /// generation (as Java does; unknown counts as -1).
    fn new(input: &Input<'_>, generations: &[Option<i32>], java_order: &[usize]) -> Ownership {
        let n = input.members.len();
        let generation = |m: usize| generations[m].unwrap_or(-1);
        let subscription_generation = |m: usize| input.members[m].sub.generation.max(-1);
        // Per partition: its last claimant, and the member whose owned list has it.
        let mut last: HashMap<Tp, (usize, Option<usize>)> = HashMap::new();
        let mut multiple = HashSet::new();
        let mut claimed: Vec<BTreeSet<Tp>> = vec![BTreeSet::new(); n];
        for &m in java_order {
            claimed[m] = claims(input, m);
            for &tp in &claimed[m] {
                match last.get(&tp).copied() {
                    None => {
                        last.insert(tp, (m, Some(m)));
                    }
                    Some((other, holder)) => {
                        let (mine, theirs) = (generation(m), subscription_generation(other));
                        if mine == theirs {
                            multiple.insert(tp);
                            last.insert(tp, (m, None));
                        } else if mine > theirs {
                            last.insert(tp, (m, Some(m)));
                        } else {
                            last.insert(tp, (other, holder));
                        }
                    }
                }
            }
        }
        let owned = claimed
            .into_iter()
            .enumerate()
            .map(|(m, tps)| {
                tps.into_iter()
                    .filter(|tp| last.get(tp).is_some_and(|&(_, h)| h == Some(m)))
                    .collect()
            })
            .collect();
        Ownership {
            owned,
            multiple,
            max_generation: (0..n).map(generation).max().unwrap_or(-1).max(-1),
        }
    }
}

/// Java's `AbstractStickyAssignor.RackInfo`.
struct RackInfo<'i, 'a> {
    input: &'i Input<'a>,
    /// Each member's rack, in rack-aware mode only (Java's `consumerRacks`).
    consumer: Vec<Option<Rack>>,
    /// Whether rack-aware mode is on (Java: `consumerRacks` is not empty).
    aware: bool,
    /// For each partition (by topic, then index), how many members are on its replicas'
    /// racks; computed whenever some member has a rack, rack-aware mode or not (as Java
    /// does).
    consumers_by_partition: Option<Vec<Vec<usize>>>,
}

impl<'i, 'a> RackInfo<'i, 'a> {
    fn new(input: &'i Input<'a>) -> RackInfo<'i, 'a> {
        let n = input.members.len();
        let mut consumers_by_rack: BTreeMap<Rack, usize> = BTreeMap::new();
        for m in &input.members {
            if let Some(r) = m.rack {
                *consumers_by_rack.entry(r).or_default() += 1;
            }
        }
        let mut aware = false;
        let mut consumers_by_partition = None;
        if !consumers_by_rack.is_empty() {
            let all_partition_racks: BTreeSet<Rack> = input
                .topics
                .iter()
                .flat_map(|t| t.replica_racks.iter().flat_map(|r| r.iter().copied()))
                .collect();
            // Java's `useRackAwareAssignment`.
            aware = consumers_by_rack
                .keys()
                .any(|r| all_partition_racks.contains(r))
                && !input.topics.iter().all(|t| {
                    t.replica_racks
                        .iter()
                        .all(|r| r.len() == all_partition_racks.len())
                });
            consumers_by_partition = Some(
                input
                    .topics
                    .iter()
                    .map(|t| {
                        t.replica_racks
                            .iter()
                            .map(|racks| {
                                racks
                                    .iter()
                                    .map(|r| consumers_by_rack.get(r).copied().unwrap_or(0))
                                    .sum()
                            })
                            .collect()
                    })
                    .collect(),
            );
        }
        RackInfo {
            input,
            consumer: if aware {
                input.members.iter().map(|m| m.rack).collect()
            } else {
                vec![None; n]
            },
            aware,
            consumers_by_partition,
        }
    }

    /// The racks of `tp`'s replicas, in rack-aware mode (Java's `partitionRacks`).
    fn partition_racks(&self, tp: Tp) -> Option<&'i [Rack]> {
        if !self.aware {
            return None;
        }
        let i = self.input.partition_index(tp.0, tp.1)?;
        Some(&self.input.topics[tp.0].replica_racks[i])
    }

    /// Java's `racksMismatch`: the member has a rack and the partition has no replica on it.
    fn mismatch(&self, member: usize, tp: Tp) -> bool {
        match self.consumer[member] {
            None => false,
            Some(rack) => self
                .partition_racks(tp)
                .is_none_or(|r| r.binary_search(&rack).is_err()),
        }
    }

    /// Java's `sortPartitionsByRackConsumers` (a stable sort).
    fn sort_by_rack_consumers(&self, partitions: &mut [Tp]) {
        if let Some(counts) = &self.consumers_by_partition {
            partitions.sort_by_key(|&(t, p)| {
                self.input.partition_index(t, p).map_or(0, |i| counts[t][i])
            });
        }
    }
}

/// A list of members (Java's `unfilledMembersWith...` lists) in a fixed order, with the
/// members of each rack on the side, so that "the first member from here on whose rack
/// holds a replica of this partition" is a few ordered-set look-ups, not a scan.
#[derive(Default)]
struct RackedList {
    /// Key (the member's place in the list's order) to member.
    members: BTreeMap<u64, usize>,
    keys: HashMap<usize, u64>,
    /// Per rack: the keys of its members (only kept for a rack-aware list).
    by_rack: HashMap<Rack, BTreeSet<u64>>,
}

impl RackedList {
    fn insert(&mut self, key: u64, member: usize, rack: Option<Rack>) {
        self.members.insert(key, member);
        self.keys.insert(member, key);
        if let Some(r) = rack {
            self.by_rack.entry(r).or_default().insert(key);
        }
    }

    fn remove(&mut self, member: usize, rack: Option<Rack>) {
        if let Some(key) = self.keys.remove(&member) {
            self.members.remove(&key);
            if let Some(set) = rack.and_then(|r| self.by_rack.get_mut(&r)) {
                set.remove(&key);
            }
        }
    }

    fn clear(&mut self) {
        self.members.clear();
        self.keys.clear();
        self.by_rack.clear();
    }

    fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The first member with key `from` or more, else (wrapping) the first one.
    fn first_from(&self, from: u64) -> Option<usize> {
        self.members
            .range(from..)
            .next()
            .or_else(|| self.members.first_key_value())
            .map(|(_, &m)| m)
    }

    /// Java's `nextRackConsumer`: the first member with key `from` or more, wrapping
    /// around, on one of `racks`.
    fn next_on_racks(&self, racks: &[Rack], from: u64) -> Option<usize> {
        let mut after: Option<u64> = None;
        let mut before: Option<u64> = None;
        for r in racks {
            let Some(set) = self.by_rack.get(r) else {
                continue;
            };
            if let Some(&k) = set.range(from..).next() {
                after = Some(after.map_or(k, |a| a.min(k)));
            } else if let Some(&k) = set.first() {
                before = Some(before.map_or(k, |b| b.min(k)));
            }
        }
        after.or(before).map(|k| self.members[&k])
    }
}

/// Java's `ConstrainedAssignmentBuilder`: all members subscribe to the same topics.
struct Constrained<'i, 'a> {
    input: &'i Input<'a>,
    racks: &'i RackInfo<'i, 'a>,
    java_order: &'i [usize],
    owned: Vec<Vec<Tp>>,
    multiple: HashSet<Tp>,
    min_quota: usize,
    max_quota: usize,
    /// How many members get `max_quota` (when it differs from `min_quota`).
    expected_over: usize,
    current_over: usize,
    /// Java's `unfilledMembersWithUnderMinQuotaPartitions`, keyed by member index (member
    /// id order, which is where Java sorts it).
    under_min: RackedList,
    /// Java's `unfilledMembersWithExactlyMinQuotaPartitions`, keyed by insertion.
    exactly_min: RackedList,
    next_exactly_key: u64,
    assignment: Vec<Vec<Tp>>,
}

impl<'i, 'a> Constrained<'i, 'a> {
    fn new(
        input: &'i Input<'a>,
        racks: &'i RackInfo<'i, 'a>,
        ownership: Ownership,
        java_order: &'i [usize],
    ) -> Self {
        let n = input.members.len();
        let total: usize = input.topics.iter().map(|t| t.partitions.len()).sum();
        Constrained {
            input,
            racks,
            java_order,
            owned: ownership.owned,
            multiple: ownership.multiple,
            min_quota: total / n,
            max_quota: total.div_ceil(n),
            expected_over: total % n,
            current_over: 0,
            under_min: RackedList::default(),
            exactly_min: RackedList::default(),
            next_exactly_key: 0,
            assignment: vec![Vec::new(); n],
        }
    }

    fn build(mut self) -> Vec<Vec<Tp>> {
        let (assigned, under_min, exactly_min) = self.assign_owned();
        let mut unassigned: Vec<Tp> = self
            .input
            .topics
            .iter()
            .enumerate()
            .flat_map(|(t, topic)| topic.partitions.iter().map(move |p| (t, p.partition)))
            .filter(|tp| !assigned.contains(tp))
            .collect();
        // Java sorts both lists by member id: member indexes are in that order.
        for c in under_min {
            self.under_min.insert(c as u64, c, self.racks.consumer[c]);
        }
        let mut exactly_min = exactly_min;
        exactly_min.sort_unstable();
        for c in exactly_min {
            self.push_exactly_min(c);
        }
        self.racks.sort_by_rack_consumers(&mut unassigned);
        let unassigned = self.assign_rack_aware_round_robin(unassigned);
        self.assign_round_robin(unassigned);
        self.assignment
    }

    fn push_exactly_min(&mut self, c: usize) {
        let key = self.next_exactly_key;
        self.next_exactly_key += 1;
        self.exactly_min.insert(key, c, self.racks.consumer[c]);
    }

    /// Java's `assignOwnedPartitions`, members in `HashMap` order: each member keeps its
    /// owned partitions (on its rack, not claimed by several members) up to its quota.
    /// Returns the partitions kept and the members under `min_quota` and at exactly
    /// `min_quota` that may get one more.
    fn assign_owned(&mut self) -> (HashSet<Tp>, Vec<usize>, Vec<usize>) {
        let mut assigned = HashSet::new();
        let (mut under_min, mut exactly_min) = (Vec::new(), Vec::new());
        for &c in self.java_order {
            let mut owned: Vec<Tp> = self.owned[c]
                .iter()
                .copied()
                .filter(|&tp| !self.racks.mismatch(c, tp) && !self.multiple.contains(&tp))
                .collect();
            // By partition, then topic (topic indexes are in name order).
            owned.sort_unstable_by_key(|&(t, p)| (p, t));
            let keep = if owned.len() < self.min_quota {
                under_min.push(c);
                owned.len()
            } else if owned.len() >= self.max_quota && self.current_over < self.expected_over {
                self.current_over += 1;
                if self.current_over == self.expected_over {
                    exactly_min.clear();
                }
                self.max_quota
            } else {
                if self.current_over < self.expected_over {
                    exactly_min.push(c);
                }
                self.min_quota
            };
            owned.truncate(keep);
            assigned.extend(owned.iter().copied());
            self.assignment[c] = owned;
        }
        (assigned, under_min, exactly_min)
    }

    /// Java's `assignRackAwareRoundRobin`: partitions go, in turn, to the members under
    /// quota on their racks. Returns the partitions left.
    fn assign_rack_aware_round_robin(&mut self, unassigned: Vec<Tp>) -> Vec<Tp> {
        if !self.racks.aware {
            return unassigned;
        }
        // Java's `nextUnfilledConsumerIndex`, as a key: the member after the last one
        // served, wrapping.
        let mut next_key = 0;
        let mut left = Vec::new();
        for tp in unassigned {
            let racks = self.racks.partition_racks(tp).unwrap_or(&[]);
            let mut consumer = None;
            if let Some(c) = self.under_min.next_on_racks(racks, next_key) {
                let count = self.assignment[c].len() + 1;
                if count >= self.min_quota {
                    self.under_min.remove(c, self.racks.consumer[c]);
                    if count < self.max_quota && self.current_over < self.expected_over {
                        self.push_exactly_min(c);
                    }
                }
                next_key = c as u64 + 1;
                consumer = Some(c);
            } else if !self.exactly_min.is_empty() {
                if let Some(c) = self.exactly_min.next_on_racks(racks, 0) {
                    if self.assignment[c].len() + 1 == self.max_quota {
                        self.exactly_min.remove(c, self.racks.consumer[c]);
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
        // Java's iterator over `under_min`: the key of its next element.
        let mut next_key = 0;
        for tp in unassigned {
            let c = if let Some((&k, &c)) = self.under_min.members.range(next_key..).next() {
                next_key = k + 1;
                c
            } else if self.under_min.is_empty() {
                // Java polls the head; with both lists empty it throws (unreachable: the
                // quotas leave room for every partition).
                let Some(c) = self.exactly_min.first_from(0) else {
                    break;
                };
                self.exactly_min.remove(c, self.racks.consumer[c]);
                c
            } else {
                // Java starts a new iterator.
                let Some((&k, &c)) = self.under_min.members.first_key_value() else {
                    break;
                };
                next_key = k + 1;
                c
            };
            self.assignment[c].push(tp);
            let count = self.assignment[c].len();
            if count == self.min_quota {
                self.under_min.remove(c, self.racks.consumer[c]);
                self.push_exactly_min(c);
            } else if count == self.max_quota {
                self.current_over += 1;
            }
        }
    }
}

/// Java's `PartitionMovements`: which partitions moved between which members during the
/// general algorithm, to move a partition back rather than another one further.
struct Movements {
    /// By topic, by (from, to): the partitions that moved so, in the iteration order of
    /// Java's `HashSet` of them (which decides the one that moves back).
    by_topic: BTreeMap<usize, BTreeMap<(usize, usize), HashOrder>>,
    /// Each moved partition's (first owner, current owner).
    moves: HashMap<Tp, (usize, usize)>,
    /// Each topic's `String.hashCode`.
    topic_hashes: Vec<i32>,
}

impl Movements {
    fn new(input: &Input<'_>) -> Movements {
        Movements {
            by_topic: BTreeMap::new(),
            moves: HashMap::new(),
            topic_hashes: input
                .topics
                .iter()
                .map(|t| java_order::string_hash(&t.name))
                .collect(),
        }
    }

    fn remove_record(&mut self, tp: Tp) -> Option<(usize, usize)> {
        let pair = self.moves.remove(&tp)?;
        if let Some(topic) = self.by_topic.get_mut(&tp.0) {
            if let Some(set) = topic.get_mut(&pair) {
                set.remove(partition_key(tp.1));
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
        let hash = java_order::topic_partition_hash(self.topic_hashes[tp.0], tp.1);
        self.by_topic
            .entry(tp.0)
            .or_default()
            .entry(pair)
            .or_default()
            .insert(partition_key(tp.1), hash);
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
    /// `new`, move back a partition of the same topic that moved from `new` to `old` (the
    /// first of them Java's `HashSet` iterates).
    fn actual_partition_to_move(&self, tp: Tp, old: usize, new: usize) -> Tp {
        let Some(topic) = self.by_topic.get(&tp.0) else {
            return tp;
        };
        let old = self.moves.get(&tp).map_or(old, |&(first, _)| first);
        match topic.get(&(new, old)).and_then(HashOrder::first) {
            Some(key) => (tp.0, key as u32 as i32),
            None => tp,
        }
    }
}

/// A partition number as a [`HashOrder`] key.
fn partition_key(partition: i32) -> u64 {
    u64::from(partition as u32)
}

/// A member's partitions in the order of Java's `ArrayList` of them (appended when
/// assigned, removed where they stand), with removal in O(1): a removed partition leaves a
/// hole in its slot (which [`General::partition_consumer`] keeps), and the holes are
/// squeezed out, order kept, once they outnumber the partitions (so each removal costs
/// O(1) amortized, not a search and a shift of the list).
#[derive(Clone, Default)]
struct Partitions {
    slots: Vec<Option<Tp>>,
    len: usize,
}

impl Partitions {
    fn len(&self) -> usize {
        self.len
    }

    /// The partitions, in order.
    fn iter(&self) -> impl Iterator<Item = Tp> + '_ {
        self.slots.iter().flatten().copied()
    }

    /// Appends `tp`; returns its slot.
    fn push(&mut self, tp: Tp) -> usize {
        self.slots.push(Some(tp));
        self.len += 1;
        self.slots.len() - 1
    }

    /// Removes `tp`, which is in `slot`; returns whether it was there.
    fn remove(&mut self, tp: Tp, slot: usize) -> bool {
        match self.slots.get_mut(slot) {
            Some(s) if *s == Some(tp) => {
                *s = None;
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// Whether the holes outnumber the partitions (and are worth squeezing out).
    fn sparse(&self) -> bool {
        let holes = self.slots.len() - self.len;
        holes > 16 && holes > self.len
    }

    /// Squeezes the holes out, order kept; `moved(tp, slot)` learns each partition's new
    /// slot.
    fn compact(&mut self, mut moved: impl FnMut(Tp, usize)) {
        self.slots.retain(Option::is_some);
        for (slot, tp) in self.slots.iter().flatten().enumerate() {
            moved(*tp, slot);
        }
    }
}

/// Where an assigned partition is: its member, and its slot in the member's
/// [`Partitions`].
#[derive(Clone, Copy)]
struct Place {
    member: usize,
    slot: usize,
}

/// Java's `GeneralAssignmentBuilder`: members subscribe to different topics.
struct General<'i, 'a> {
    input: &'i Input<'a>,
    racks: &'i RackInfo<'i, 'a>,
    generations: &'i [Option<i32>],
    java_order: &'i [usize],
    max_generation: i32,
    /// Each topic's members (Java's `topic2AllPotentialConsumers`).
    topic_consumers: Vec<Vec<usize>>,
    /// Each member's partitions (`None` while it is set aside as fixed).
    current: Vec<Option<Partitions>>,
    /// Each assigned partition's member (Java's `currentPartitionConsumer`), and its slot
    /// in the member's [`Partitions`].
    partition_consumer: HashMap<Tp, Place>,
    /// Per member, by topic: how many of the topic's partitions `partition_consumer` gives
    /// it (absent when none), so that the balance check is per member and topic, not per
    /// partition.
    topic_counts: Vec<HashMap<usize, usize>>,
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
        racks: &'i RackInfo<'i, 'a>,
        ownership: Ownership,
        generations: &'i [Option<i32>],
        java_order: &'i [usize],
    ) -> Self {
        let mut topic_consumers = vec![Vec::new(); input.topics.len()];
        for (m, member) in input.members.iter().enumerate() {
            for &t in &member.topics {
                topic_consumers[t].push(m);
            }
        }
        let mut partition_consumer = HashMap::new();
        let mut topic_counts = vec![HashMap::new(); input.members.len()];
        for (m, owned) in ownership.owned.iter().enumerate() {
            for (slot, &tp) in owned.iter().enumerate() {
                partition_consumer.insert(tp, Place { member: m, slot });
                *topic_counts[m].entry(tp.0).or_default() += 1;
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
            java_order,
            max_generation: ownership.max_generation,
            topic_consumers,
            current: ownership
                .owned
                .into_iter()
                .map(|owned| {
                    Some(Partitions {
                        len: owned.len(),
                        slots: owned.into_iter().map(Some).collect(),
                    })
                })
                .collect(),
            partition_consumer,
            topic_counts,
            sorted_all,
            sorted: BTreeSet::new(),
            revocation_required: false,
            movements: Movements::new(input),
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
            .map(|list| list.map(|l| l.iter().collect()).unwrap_or_default())
            .collect()
    }

    /// Java's `prepopulateCurrentAssignments`: the partitions owned by members of older
    /// generations, each with its owner of the newest such generation (of equally new
    /// ones, the first in `HashMap` order).
    fn prev_assignment(&self) -> HashMap<Tp, usize> {
        let mut prev: HashMap<Tp, (usize, i32)> = HashMap::new();
        for &m in self.java_order {
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
            let mut kept = Partitions::default();
            for tp in owned.iter() {
                if !self.input.members[c].topics.contains(&tp.0) || self.racks.mismatch(c, tp) {
                    self.partition_consumer.remove(&tp);
                    self.count_out(c, tp);
                    self.revocation_required = true;
                } else {
                    assigned.insert(tp);
                    let slot = kept.push(tp);
                    self.partition_consumer
                        .insert(tp, Place { member: c, slot });
                }
            }
            self.current[c] = Some(kept);
        }
        assigned
    }

    fn len(&self, c: usize) -> Option<usize> {
        self.current[c].as_ref().map(Partitions::len)
    }

    fn count_in(&mut self, c: usize, tp: Tp) {
        *self.topic_counts[c].entry(tp.0).or_default() += 1;
    }

    fn count_out(&mut self, c: usize, tp: Tp) {
        if let Some(n) = self.topic_counts[c].get_mut(&tp.0) {
            *n -= 1;
            if *n == 0 {
                self.topic_counts[c].remove(&tp.0);
            }
        }
    }

    /// The member `tp` is assigned to.
    fn consumer(&self, tp: Tp) -> Option<usize> {
        self.partition_consumer.get(&tp).map(|p| p.member)
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
    /// to a member subscribed to its topic with at least two fewer partitions. Java looks
    /// at every partition of the member's topics; the same answer comes from the members
    /// with at least two more partitions (taking part in balancing) that have one of those
    /// topics, so a check costs O(members² × topics), not O(partitions).
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
            let topics = &self.input.members[c].topics;
            for &(other_count, other) in self.sorted.iter().rev() {
                if count + 1 >= other_count {
                    break;
                }
                let counts = &self.topic_counts[other];
                let shares = if counts.len() < topics.len() {
                    counts.keys().any(|t| topics.contains(t))
                } else {
                    topics.iter().any(|t| counts.contains_key(t))
                };
                if shares {
                    return false;
                }
            }
        }
        true
    }

    /// Java's `getBalanceScore`: the sum of count differences over all pairs of members.
    fn balance_score(assignment: &[Option<Partitions>]) -> usize {
        let counts: Vec<usize> = assignment.iter().flatten().map(Partitions::len).collect();
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
            let slot = list.push(tp);
            self.partition_consumer
                .insert(tp, Place { member: c, slot });
        }
        self.count_in(c, tp);
        self.insert_sorted(c);
        true
    }

    /// Java's `maybeAssign`: each partition in turn (the assigned ones removed from
    /// `partitions` with `remove`, in one pass).
    fn maybe_assign(&mut self, partitions: &mut Vec<Tp>, rack_matching: bool, remove: bool) {
        partitions.retain(|&tp| {
            let assigned = !self.topic_consumers[tp.0].is_empty()
                && self.maybe_assign_partition(tp, rack_matching);
            !(assigned && remove)
        });
    }

    fn can_topic_participate(&self, t: usize) -> bool {
        self.topic_consumers[t].len() >= 2
    }

    fn can_consumer_participate(&self, c: usize) -> bool {
        let Some(list) = self.current[c].as_ref() else {
            return false;
        };
        list.len() < self.max_assignment_size(c)
            || list.iter().any(|(t, _)| self.can_topic_participate(t))
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
        let pre_balance_counts = self.topic_counts.clone();
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
            self.topic_counts = pre_balance_counts;
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
                let Some(c) = self.consumer(tp) else {
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
                    (self.racks.consumer[c], self.racks.partition_racks(tp))
                {
                    if racks.binary_search(&rack).is_ok() {
                        found = self.topic_consumers[tp.0].iter().any(|&other| {
                            self.racks.consumer[other]
                                .is_some_and(|r| racks.binary_search(&r).is_ok())
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
        let Some(old) = self.consumer(tp) else {
            return;
        };
        let tp = self.movements.actual_partition_to_move(tp, old, new);
        self.process_partition_movement(tp, new);
    }

    fn process_partition_movement(&mut self, tp: Tp, new: usize) {
        let Some(&Place { member: old, slot }) = self.partition_consumer.get(&tp) else {
            return;
        };
        if self.current[old].is_none() || self.current[new].is_none() {
            return;
        }
        self.remove_sorted(old);
        self.remove_sorted(new);
        self.movements.move_partition(tp, old, new);
        if let Some(list) = self.current[old].as_mut() {
            if list.remove(tp, slot) && list.sparse() {
                let places = &mut self.partition_consumer;
                list.compact(|tp, slot| {
                    if let Some(place) = places.get_mut(&tp) {
                        place.slot = slot;
                    }
                });
            }
        }
        if let Some(list) = self.current[new].as_mut() {
            let slot = list.push(tp);
            self.partition_consumer
                .insert(tp, Place { member: new, slot });
        }
        self.count_out(old, tp);
        self.count_in(new, tp);
        self.insert_sorted(new);
        self.insert_sorted(old);
    }
}

#[cfg(test)]
mod partitions_tests {
    use super::{Partitions, Tp};
    use std::collections::HashMap;

    #[test]
    fn removals_keep_the_order_and_compaction_keeps_every_slot_right() {
        let mut list = Partitions::default();
        let mut slots: HashMap<Tp, usize> = HashMap::new();
        for p in 0..100 {
            slots.insert((p as usize % 3, p), list.push((p as usize % 3, p)));
        }
        let mut expected: Vec<Tp> = list.iter().collect();
        let mut compacted = 0;
        // Remove every partition but each fifth, from the back half first.
        for p in (50..100).chain(0..50).filter(|p| p % 5 != 0) {
            let tp = (p as usize % 3, p);
            assert!(list.remove(tp, slots[&tp]), "{tp:?} is in its slot");
            assert!(!list.remove(tp, slots[&tp]), "{tp:?} is removed once");
            slots.remove(&tp);
            expected.retain(|&x| x != tp);
            if list.sparse() {
                list.compact(|tp, slot| {
                    slots.insert(tp, slot);
                });
                compacted += 1;
            }
            assert_eq!(list.iter().collect::<Vec<_>>(), expected);
            assert_eq!(list.len(), expected.len());
            for (&tp, &slot) in &slots {
                assert_eq!(list.slots[slot], Some(tp));
            }
        }
        assert!(compacted > 0, "the holes were squeezed out at least once");
        let slot = list.push((0, 1000));
        assert_eq!(list.slots[slot], Some((0, 1000)));
    }
}
