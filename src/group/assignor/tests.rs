//! Shared helpers for the assignor tests, the name and protocol choice, and a fixed-seed
//! randomized check of the invariants of every assignor.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// Topics with `0..n` partitions and no racks.
pub(super) fn topics(spec: &[(&str, i32)]) -> BTreeMap<String, Vec<PartitionInfo>> {
    spec.iter()
        .map(|&(t, n)| (t.to_owned(), PartitionInfo::without_racks(n)))
        .collect()
}

/// Topics whose partition `p` has replicas on racks `spec[t][p]`.
pub(super) fn rack_topics(spec: &[(&str, &[&[&str]])]) -> BTreeMap<String, Vec<PartitionInfo>> {
    spec.iter()
        .map(|&(t, parts)| {
            let infos = parts
                .iter()
                .enumerate()
                .map(|(p, racks)| PartitionInfo {
                    partition: p as i32,
                    replica_racks: racks.iter().map(|r| (*r).to_owned()).collect(),
                })
                .collect();
            (t.to_owned(), infos)
        })
        .collect()
}

pub(super) fn tp(t: &str, p: i32) -> TopicPartition {
    TopicPartition::new(t, p)
}

/// A dynamic member.
pub(super) fn member(id: &str, topics: &[&str]) -> MemberSubscription {
    MemberSubscription::new(id, topics)
}

/// Test-only setters.
pub(super) trait With: Sized {
    fn instance(self, id: &str) -> Self;
    fn owns(self, partitions: &[(&str, i32)]) -> Self;
    fn generation(self, generation: i32) -> Self;
    fn rack(self, rack: &str) -> Self;
}

impl With for MemberSubscription {
    fn instance(mut self, id: &str) -> Self {
        self.group_instance_id = Some(id.to_owned());
        self
    }
    fn owns(mut self, partitions: &[(&str, i32)]) -> Self {
        self.owned_partitions = partitions.iter().map(|&(t, p)| tp(t, p)).collect();
        self
    }
    fn generation(mut self, generation: i32) -> Self {
        self.generation = generation;
        self
    }
    fn rack(mut self, rack: &str) -> Self {
        self.rack = Some(rack.to_owned());
        self
    }
}

pub(super) type Assignment = BTreeMap<String, Vec<TopicPartition>>;

/// The expected assignment, written compactly.
pub(super) fn expect(spec: &[(&str, &[(&str, i32)])]) -> Assignment {
    spec.iter()
        .map(|&(m, parts)| {
            let mut v: Vec<TopicPartition> = parts.iter().map(|&(t, p)| tp(t, p)).collect();
            v.sort();
            (m.to_owned(), v)
        })
        .collect()
}

/// How many partitions each member got.
pub(super) fn counts(a: &Assignment) -> BTreeMap<&str, usize> {
    a.iter().map(|(m, v)| (m.as_str(), v.len())).collect()
}

/// Every partition of every subscribed, existing topic.
pub(super) fn all_partitions(
    topics: &BTreeMap<String, Vec<PartitionInfo>>,
    members: &[MemberSubscription],
) -> BTreeSet<TopicPartition> {
    let subscribed: BTreeSet<&str> = members
        .iter()
        .flat_map(|m| m.topics.iter().map(String::as_str))
        .collect();
    topics
        .iter()
        .filter(|(t, _)| subscribed.contains(t.as_str()))
        .flat_map(|(t, parts)| parts.iter().map(move |p| tp(t, p.partition)))
        .collect()
}

/// Checks the module invariants 1 and 2 (2 when `eager`) and that every member appears.
pub(super) fn check_invariants(
    topics: &BTreeMap<String, Vec<PartitionInfo>>,
    members: &[MemberSubscription],
    result: &Assignment,
    eager: bool,
) {
    let ids: BTreeSet<&str> = members.iter().map(|m| m.member_id.as_str()).collect();
    let got: BTreeSet<&str> = result.keys().map(String::as_str).collect();
    assert_eq!(got, ids, "every member and only members are in the result");
    let mut seen = BTreeMap::new();
    for (m, parts) in result {
        let sub = members.iter().rev().find(|s| &s.member_id == m).unwrap();
        for p in parts {
            assert!(
                sub.topics.iter().any(|t| t == p.topic()),
                "{p} went to {m}, which does not subscribe to its topic: {result:?}"
            );
            assert!(
                topics
                    .get(p.topic())
                    .is_some_and(|ps| ps.iter().any(|i| i.partition == p.partition())),
                "{p} does not exist: {result:?}"
            );
            if let Some(other) = seen.insert(p.clone(), m) {
                panic!("{p} went to both {other} and {m}: {result:?}");
            }
        }
    }
    if eager {
        let all = all_partitions(topics, members);
        let assigned: BTreeSet<TopicPartition> = seen.into_keys().collect();
        assert_eq!(assigned, all, "every partition is assigned: {result:?}");
    }
}

/// A small deterministic generator (SplitMix64).
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(super) fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    pub(super) fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// A random group: topics (some without partitions, some subscribed but missing), members
/// with random subscriptions (often all equal), instance ids, racks, generations and owned
/// partitions from a random previous assignment (with a few conflicting claims).
pub(super) fn random_case(
    rng: &mut Rng,
) -> (
    BTreeMap<String, Vec<PartitionInfo>>,
    Vec<MemberSubscription>,
) {
    const RACKS: [&str; 3] = ["ra", "rb", "rc"];
    let with_racks = rng.chance(30);
    let n_topics = 1 + rng.below(4);
    let mut topics: BTreeMap<String, Vec<PartitionInfo>> = BTreeMap::new();
    let mut names = Vec::new();
    for t in 0..n_topics {
        let name = format!("t{t}");
        names.push(name.clone());
        if rng.chance(10) {
            continue; // subscribed to, but does not exist
        }
        let n = rng.below(9) as i32;
        let parts = (0..n)
            .map(|partition| PartitionInfo {
                partition,
                replica_racks: if with_racks {
                    RACKS
                        .iter()
                        .filter(|_| rng.chance(50))
                        .map(|r| (*r).to_owned())
                        .collect()
                } else {
                    Vec::new()
                },
            })
            .collect();
        topics.insert(name, parts);
    }
    let n_members = 1 + rng.below(7);
    let all_equal = rng.chance(50);
    let generation = 1 + rng.below(5) as i32;
    let mut members = Vec::new();
    for m in 0..n_members {
        let mut subscribed: Vec<&str> = if all_equal {
            names.iter().map(String::as_str).collect()
        } else {
            names
                .iter()
                .map(String::as_str)
                .filter(|_| rng.chance(60))
                .collect()
        };
        if subscribed.is_empty() {
            subscribed.push(&names[rng.below(names.len())]);
        }
        let mut sub = member(&format!("m{}", rng.below(100) * 10 + m), &subscribed);
        if rng.chance(30) {
            sub.group_instance_id = Some(format!("i{}", rng.below(100) * 10 + m));
        }
        if with_racks && rng.chance(70) {
            sub.rack = Some(RACKS[rng.below(RACKS.len())].to_owned());
        }
        sub.generation = match rng.below(4) {
            0 => -1,
            1 => generation - 1,
            _ => generation,
        };
        members.push(sub);
    }
    // A previous assignment: each partition owned by a random member or by nobody, now
    // and then claimed by a second member too.
    for (t, parts) in &topics {
        for p in parts {
            if rng.chance(70) {
                let owner = rng.below(members.len());
                members[owner].owned_partitions.push(tp(t, p.partition));
                if rng.chance(5) {
                    let other = rng.below(members.len());
                    members[other].owned_partitions.push(tp(t, p.partition));
                }
            }
        }
    }
    (topics, members)
}

/// The same group in another order: members, their topics and owned partitions shuffled.
pub(super) fn shuffled(rng: &mut Rng, members: &[MemberSubscription]) -> Vec<MemberSubscription> {
    let mut v = members.to_vec();
    rng.shuffle(&mut v);
    shuffled_lists(rng, &v)
}

/// The same members in the same order, their topics and owned partitions shuffled.
pub(super) fn shuffled_lists(
    rng: &mut Rng,
    members: &[MemberSubscription],
) -> Vec<MemberSubscription> {
    let mut v = members.to_vec();
    for m in &mut v {
        rng.shuffle(&mut m.topics);
        rng.shuffle(&mut m.owned_partitions);
    }
    v
}

fn all_assignors() -> Vec<Box<dyn Assignor>> {
    vec![
        Box::new(Range),
        Box::new(RoundRobin),
        Box::new(CooperativeSticky),
    ]
}

#[test]
fn assignors_are_found_by_protocol_name_and_by_java_class_name() {
    for (name, class) in [
        ("range", "org.apache.kafka.clients.consumer.RangeAssignor"),
        (
            "roundrobin",
            "org.apache.kafka.clients.consumer.RoundRobinAssignor",
        ),
        (
            "cooperative-sticky",
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        ),
    ] {
        assert_eq!(assignor_by_name(name).unwrap().name(), name);
        assert_eq!(assignor_by_name(class).unwrap().name(), name);
        assert_eq!(assignor_by_name(&format!(" {name} ")).unwrap().name(), name);
    }
    for unknown in [
        "sticky",
        "Range",
        "",
        "org.apache.kafka.clients.consumer.StickyAssignor",
        "org.apache.kafka.clients.consumer.range",
    ] {
        assert!(assignor_by_name(unknown).is_none(), "{unknown}");
    }
}

#[test]
fn a_strategy_list_builds_its_assignors_in_order_or_names_what_is_wrong() {
    let names = |ns: &[&str]| -> Vec<String> { ns.iter().map(|n| n.to_string()).collect() };
    let built = by_names(&names(&["roundrobin", "range"])).unwrap();
    let built: Vec<&str> = built.iter().map(|a| a.name()).collect();
    assert_eq!(built, ["roundrobin", "range"]);
    let unknown = by_names(&names(&["range", "sticky-ish"])).err().unwrap();
    assert_eq!(
        unknown.to_string(),
        Error::config("partition.assignment.strategy: unknown assignor `sticky-ish` (known: range, roundrobin, cooperative-sticky)").to_string()
    );
    let empty = by_names(&[]).err().unwrap();
    assert!(
        empty
            .to_string()
            .contains("partition.assignment.strategy is empty"),
        "{empty}"
    );
}

#[test]
fn the_rebalance_protocol_is_the_highest_that_every_configured_assignor_supports() {
    let by_names = |names: &[&str]| -> Vec<Box<dyn Assignor>> {
        names.iter().map(|n| assignor_by_name(n).unwrap()).collect()
    };
    use RebalanceProtocol::*;
    assert_eq!(
        rebalance_protocol(&by_names(&["cooperative-sticky"])),
        Cooperative
    );
    assert_eq!(
        rebalance_protocol(&by_names(&["range", "cooperative-sticky"])),
        Eager
    );
    assert_eq!(
        rebalance_protocol(&by_names(&["cooperative-sticky", "roundrobin"])),
        Eager
    );
    assert_eq!(rebalance_protocol(&by_names(&["range"])), Eager);
    assert_eq!(rebalance_protocol(&[]), Eager);
    assert!(Cooperative > Eager);
}

#[test]
fn only_cooperative_sticky_writes_user_data_and_it_is_the_generation_as_a_big_endian_int32() {
    assert_eq!(Range.subscription_user_data(5), None);
    assert_eq!(RoundRobin.subscription_user_data(5), None);
    assert_eq!(
        CooperativeSticky.subscription_user_data(5),
        Some(vec![0, 0, 0, 5])
    );
    assert_eq!(
        CooperativeSticky.subscription_user_data(-1),
        Some(vec![0xff, 0xff, 0xff, 0xff])
    );
    assert_eq!(
        CooperativeSticky.subscription_user_data(0x0102_0304),
        Some(vec![1, 2, 3, 4])
    );
}

#[test]
fn strings_are_compared_as_java_compares_them_by_utf16_code_units() {
    use std::cmp::Ordering::*;
    assert_eq!(java_cmp("a", "b"), Less);
    assert_eq!(java_cmp("ab", "a"), Greater);
    assert_eq!(java_cmp("", ""), Equal);
    // U+1F600 is the surrogate pair D83D DE00, below U+FFFD in UTF-16 but above in UTF-8.
    assert_eq!(java_cmp("\u{1F600}", "\u{FFFD}"), Less);
    assert_eq!("\u{1F600}".cmp("\u{FFFD}"), Greater);
}

#[test]
fn no_members_give_an_empty_assignment_and_members_without_topics_get_nothing() {
    let t = topics(&[("t", 3)]);
    for a in all_assignors() {
        assert!(a.assign(&t, &[]).is_empty(), "{}", a.name());
        let result = a.assign(&BTreeMap::new(), &[member("m1", &["t"]), member("m2", &[])]);
        assert_eq!(result, expect(&[("m1", &[]), ("m2", &[])]), "{}", a.name());
    }
}

#[test]
fn a_member_id_given_twice_keeps_its_last_subscription() {
    let t = topics(&[("a", 2), ("b", 2)]);
    for a in all_assignors() {
        let result = a.assign(&t, &[member("m", &["a"]), member("m", &["b"])]);
        assert_eq!(
            result,
            expect(&[("m", &[("b", 0), ("b", 1)])]),
            "{}",
            a.name()
        );
    }
}

#[test]
fn randomized_groups_keep_the_invariants_and_do_not_depend_on_the_input_order() {
    let mut rng = Rng::new(0x5eed_a551);
    for case in 0..500 {
        let (topics, members) = random_case(&mut rng);
        let reordered = shuffled(&mut rng, &members);
        // Cooperative-sticky follows Java's HashMap order, where the order of `members`
        // can decide between ids of one bucket (the module doc, invariant 3).
        let same_order = shuffled_lists(&mut rng, &members);
        for a in all_assignors() {
            let eager = !a.protocols().contains(&RebalanceProtocol::Cooperative);
            let reordered = if eager { &reordered } else { &same_order };
            let result = a.assign(&topics, &members);
            check_invariants(&topics, &members, &result, eager);
            assert_eq!(
                a.assign(&topics, reordered),
                result,
                "case {case}, {}: the order of the input changed the result\n{topics:?}\n{members:?}",
                a.name()
            );
        }
    }
}
