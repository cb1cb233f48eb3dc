//! The `cooperative-sticky` assignor: balance, stickiness over sequences of rebalances,
//! the two-phase cooperative hand-over, owned partitions and generations, racks.

use std::collections::{BTreeMap, BTreeSet};

use super::super::tests::*;
use super::*;

type Topics = BTreeMap<String, Vec<PartitionInfo>>;

fn assign(topics: &Topics, members: &[MemberSubscription]) -> Assignment {
    let result = CooperativeSticky.assign(topics, members);
    check_invariants(topics, members, &result, false);
    result
}

fn target(topics: &Topics, members: &[MemberSubscription]) -> Assignment {
    let result = CooperativeSticky.target_assignment(topics, members);
    check_invariants(topics, members, &result, true);
    result
}

fn spread(a: &Assignment) -> usize {
    let c: Vec<usize> = a.values().map(Vec::len).collect();
    c.iter().max().unwrap_or(&0) - c.iter().min().unwrap_or(&0)
}

/// Asserts that no partition is handed to a member that does not own it while another
/// member still owns it (it must be revoked first).
fn assert_hand_over_is_safe(members: &[MemberSubscription], result: &Assignment) {
    for m in members {
        for p in &result[&m.member_id] {
            if m.owned_partitions.contains(p) {
                continue;
            }
            for other in members.iter().filter(|o| o.member_id != m.member_id) {
                assert!(
                    !other.owned_partitions.contains(p),
                    "{p} went to {} while {} still owns it: {result:?}",
                    m.member_id,
                    other.member_id
                );
            }
        }
    }
}

/// Cooperative rebalances until nothing changes: each round every member revokes what
/// its assignment lacks, takes what it got (so it owns exactly its assignment) and moves to
/// the next generation. Checks each round's hand-over. Returns the members as they end up
/// and the number of rounds it took (the last one changes nothing).
fn settle(
    topics: &Topics,
    mut members: Vec<MemberSubscription>,
) -> (Vec<MemberSubscription>, usize) {
    let mut generation = members
        .iter()
        .map(|m| m.generation)
        .max()
        .unwrap_or(0)
        .max(0);
    for round in 1..=5 {
        let result = assign(topics, &members);
        assert_hand_over_is_safe(&members, &result);
        let mut stable = true;
        generation += 1;
        for m in &mut members {
            let mut owned = m.owned_partitions.clone();
            owned.sort();
            owned.dedup();
            let now = &result[&m.member_id];
            stable &= owned == *now;
            m.owned_partitions = now.clone();
            m.generation = generation;
        }
        if stable {
            return (members, round);
        }
    }
    panic!("the group did not settle in 5 rebalances: {members:?}");
}

fn owners(members: &[MemberSubscription]) -> BTreeMap<TopicPartition, String> {
    members
        .iter()
        .flat_map(|m| {
            m.owned_partitions
                .iter()
                .map(|p| (p.clone(), m.member_id.clone()))
        })
        .collect()
}

/// The fewest partitions that must leave their owners for a balanced assignment of
/// `total` partitions to members owning `owned[i]` each (all subscribed to everything).
fn min_moves(owned: &[usize], total: usize) -> usize {
    let n = owned.len();
    let (min_q, over) = (total / n, total % n);
    let mut sorted = owned.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let kept: usize = sorted
        .iter()
        .enumerate()
        .map(|(i, &o)| o.min(min_q + usize::from(i < over)))
        .sum();
    owned.iter().sum::<usize>() - kept
}

/// The valid previous owner of each partition: the only claimant of the highest claiming
/// generation (the generation when known, else the one in the user data).
fn valid_owners(
    topics: &Topics,
    members: &[MemberSubscription],
) -> BTreeMap<TopicPartition, String> {
    let mut claims: BTreeMap<TopicPartition, Vec<(i32, &str)>> = BTreeMap::new();
    for m in members {
        let generation = member_generation(m).unwrap_or(-1);
        let owned: BTreeSet<&TopicPartition> = m.owned_partitions.iter().collect();
        for p in owned {
            let exists = topics
                .get(p.topic())
                .is_some_and(|ps| ps.iter().any(|i| i.partition == p.partition()));
            let subscribed = members
                .iter()
                .any(|o| o.topics.iter().any(|t| t == p.topic()));
            if exists && subscribed {
                claims
                    .entry(p.clone())
                    .or_default()
                    .push((generation, &m.member_id));
            }
        }
    }
    claims
        .into_iter()
        .filter_map(|(p, c)| {
            let top = c.iter().map(|(g, _)| *g).max()?;
            let winners: Vec<&str> = c
                .iter()
                .filter(|(g, _)| *g == top)
                .map(|(_, m)| *m)
                .collect();
            (winners.len() == 1).then(|| (p, winners[0].to_owned()))
        })
        .collect()
}

#[test]
fn a_first_assignment_is_complete_and_balanced() {
    for (n_members, sizes) in [
        (3, vec![4, 4, 1]),
        (5, vec![7, 0, 2, 9]),
        (4, vec![1]),
        (2, vec![6]),
    ] {
        let spec: Vec<(String, i32)> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (format!("t{i}"), n))
            .collect();
        let spec: Vec<(&str, i32)> = spec.iter().map(|(t, n)| (t.as_str(), *n)).collect();
        let t = topics(&spec);
        let names: Vec<&str> = spec.iter().map(|(t, _)| *t).collect();
        let members: Vec<_> = (0..n_members)
            .map(|i| member(&format!("m{i}"), &names))
            .collect();
        let result = assign(&t, &members);
        check_invariants(&t, &members, &result, true);
        assert!(spread(&result) <= 1, "{result:?}");
    }
}

#[test]
fn owned_partitions_stay_with_their_owners_when_balanced() {
    let t = topics(&[("a", 3), ("b", 3)]);
    let members = [
        member("m1", &["a", "b"])
            .owns(&[("a", 2), ("b", 0), ("b", 2)])
            .generation(4),
        member("m2", &["a", "b"])
            .owns(&[("a", 0), ("a", 1), ("b", 1)])
            .generation(4),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("m1", &[("a", 2), ("b", 0), ("b", 2)]),
            ("m2", &[("a", 0), ("a", 1), ("b", 1)]),
        ])
    );
}

#[test]
fn a_new_member_gets_moved_partitions_only_after_their_owner_revoked_them() {
    let t = topics(&[("t", 6)]);
    let all: Vec<(&str, i32)> = (0..6).map(|p| ("t", p)).collect();
    let members = vec![
        member("m1", &["t"]).owns(&all).generation(3),
        member("m2", &["t"]),
    ];
    // Phase 1: m1 keeps half, the other half is left out (m1 revokes it).
    let first = assign(&t, &members);
    assert_eq!(first["m1"].len(), 3);
    assert!(first["m2"].is_empty(), "{first:?}");
    let goal = target(&t, &members);
    assert_eq!(goal["m1"], first["m1"]);
    assert_eq!(goal["m2"].len(), 3);
    // Phase 2: with m1 owning only its half, m2 gets the rest: the target.
    let (settled, rounds) = settle(&t, members);
    assert_eq!(rounds, 3, "assign, hand over, then stable");
    assert_eq!(owners(&settled), {
        let mut o = BTreeMap::new();
        for (m, parts) in &goal {
            for p in parts {
                o.insert(p.clone(), m.clone());
            }
        }
        o
    });
}

#[test]
fn members_joining_and_leaving_one_by_one_move_only_what_balance_requires() {
    let t = topics(&[("a", 7), ("b", 5), ("c", 1)]);
    let total = 13;
    let names = ["a", "b", "c"];
    // Five members join one by one, then members leave and join in turn.
    let mut steps: Vec<Option<String>> = (1..6).map(|i| Some(format!("m{i}"))).collect();
    steps.extend([
        None,
        None,
        Some("x1".to_owned()),
        None,
        Some("x2".to_owned()),
        None,
        None,
    ]);
    let (mut group, _) = settle(&t, vec![member("m0", &names)]);
    for (i, step) in steps.into_iter().enumerate() {
        match step {
            Some(id) => group.push(member(&id, &names)),
            None => {
                let leaving = (2 * i) % group.len();
                group.remove(leaving);
            }
        }
        let before = owners(&group);
        let owned: Vec<usize> = group.iter().map(|m| m.owned_partitions.len()).collect();
        let need = min_moves(&owned, total);
        let (after, _) = settle(&t, group);
        let now = owners(&after);
        let moved = before
            .iter()
            .filter(|(p, m)| now.get(*p) != Some(*m))
            .count();
        assert_eq!(
            moved, need,
            "step {i}, owned {owned:?}: {before:?} -> {now:?}"
        );
        assert_eq!(now.len(), total, "all partitions are owned once settled");
        let counts: Vec<usize> = after.iter().map(|m| m.owned_partitions.len()).collect();
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(max - min <= 1, "step {i}: {counts:?}");
        group = after;
    }
}

#[test]
fn a_partition_claimed_in_two_generations_stays_with_the_newer_claimant() {
    let t = topics(&[("t", 2)]);
    let members = [
        member("m1", &["t"]).owns(&[("t", 0)]).generation(2),
        member("m2", &["t"]).owns(&[("t", 0)]).generation(3),
    ];
    let result = assign(&t, &members);
    assert_eq!(result, expect(&[("m1", &[("t", 1)]), ("m2", &[("t", 0)])]));
    // Also when the newer claimant comes first in the input.
    let reversed = [members[1].clone(), members[0].clone()];
    assert_eq!(assign(&t, &reversed), result);
}

#[test]
fn a_stale_claimant_gets_its_partition_back_only_after_the_newer_owner_revoked_it() {
    // m2 owns b-1 in generation 5 and m1 still claims it from generation 4. Balance takes
    // b-1 from m2 (it keeps a-0 and b-0) and gives it to m1, but not while m2 owns it.
    let t = topics(&[("a", 1), ("b", 3)]);
    let members = vec![
        member("m1", &["a", "b"]).owns(&[("b", 1)]).generation(4),
        member("m2", &["a", "b"])
            .owns(&[("a", 0), ("b", 0), ("b", 1)])
            .generation(5),
        member("m3", &["a", "b"]).owns(&[("b", 2)]).generation(5),
    ];
    let goal = target(&t, &members);
    assert_eq!(goal["m1"], vec![tp("b", 1)]);
    let first = assign(&t, &members);
    assert!(first["m1"].is_empty(), "m2 still owns b-1: {first:?}");
    assert_eq!(first["m2"], vec![tp("a", 0), tp("b", 0)]);
    let (settled, _) = settle(&t, members);
    assert_eq!(owners(&settled)[&tp("b", 1)], "m1");
}

#[test]
fn a_partition_claimed_by_two_members_of_the_same_generation_waits_until_both_revoked_it() {
    let t = topics(&[("t", 2)]);
    let members = vec![
        member("m1", &["t"]).owns(&[("t", 0)]).generation(3),
        member("m2", &["t"])
            .owns(&[("t", 0), ("t", 1)])
            .generation(3),
    ];
    let first = assign(&t, &members);
    assert!(
        first.values().all(|parts| !parts.contains(&tp("t", 0))),
        "nobody may take t-0 while both claim it: {first:?}"
    );
    assert_eq!(first["m2"], vec![tp("t", 1)]);
    let (settled, _) = settle(&t, members);
    assert_eq!(
        owners(&settled).len(),
        2,
        "t-0 is assigned once both revoked it"
    );
}

#[test]
fn an_older_generation_member_keeps_its_partitions_when_nobody_else_claims_them() {
    // Since KAFKA-14639 (Kafka 3.5): a member that missed a rebalance is not penalised.
    let t = topics(&[("t", 4)]);
    let members = [
        member("m1", &["t"])
            .owns(&[("t", 0), ("t", 1)])
            .generation(5),
        member("m2", &["t"])
            .owns(&[("t", 2), ("t", 3)])
            .generation(3),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[("m1", &[("t", 0), ("t", 1)]), ("m2", &[("t", 2), ("t", 3)])])
    );
}

#[test]
fn without_a_subscription_generation_the_generation_comes_from_the_user_data() {
    let t = topics(&[("t", 2)]);
    let old_peer = |id: &str, user_data: Vec<u8>| {
        let mut m = member(id, &["t"]).owns(&[("t", 0)]);
        m.user_data = Some(user_data);
        m
    };
    let newer = |id: &str| member(id, &["t"]).owns(&[("t", 0)]).generation(3);
    // Java reads the claims in its HashMap's order, here m1 then m2. A claim read after
    // another is weighed by its own generation, generation 5 from the user data beats 3...
    let result = assign(
        &t,
        &[old_peer("m2", 5i32.to_be_bytes().to_vec()), newer("m1")],
    );
    assert_eq!(result["m2"], vec![tp("t", 0)]);
    // ...and is compared with the earlier claimant's subscription generation, which a
    // member sending its generation in the user data lacks (-1): 3 beats it (as in Java).
    let result = assign(
        &t,
        &[old_peer("m1", 5i32.to_be_bytes().to_vec()), newer("m2")],
    );
    assert_eq!(result["m2"], vec![tp("t", 0)]);
    // Unreadable user data counts as generation -1, which loses.
    let result = assign(&t, &[old_peer("m2", vec![0, 5]), newer("m1")]);
    assert_eq!(result["m1"], vec![tp("t", 0)]);
    // What the assignor writes is what it reads.
    let old_peer = |user_data: Vec<u8>| old_peer("m1", user_data);
    let written = CooperativeSticky.subscription_user_data(4).unwrap();
    assert_eq!(member_generation(&old_peer(written)), Some(4));
    // A subscription generation wins over the user data.
    assert_eq!(
        member_generation(&old_peer(vec![0, 0, 0, 9]).generation(2)),
        Some(2)
    );
    assert_eq!(member_generation(&member("m", &["t"])), None);
}

/// Whether no partition could move to another member subscribed to its topic that has at
/// least two fewer partitions (the balance of Java's general case).
fn locally_balanced(members: &[MemberSubscription], result: &Assignment) -> bool {
    members.iter().all(|m| {
        result[&m.member_id].iter().all(|p| {
            members.iter().all(|o| {
                !o.topics.iter().any(|t| t == p.topic())
                    || result[&o.member_id].len() + 1 >= result[&m.member_id].len()
            })
        })
    })
}

#[test]
fn members_with_different_subscriptions_are_balanced_as_far_as_their_topics_allow() {
    let t = topics(&[("a", 4), ("b", 4), ("c", 3)]);
    let members = [
        member("m1", &["a"]),
        member("m2", &["a", "b"]),
        member("m3", &["b", "c"]),
        member("m4", &["c"]),
    ];
    let result = assign(&t, &members);
    check_invariants(&t, &members, &result, true);
    assert!(locally_balanced(&members, &result), "{result:?}");
    assert!(spread(&result) <= 1, "{result:?}");
}

#[test]
fn with_different_subscriptions_a_balanced_ownership_does_not_move() {
    let t = topics(&[("a", 4), ("b", 4)]);
    let members = [
        member("m1", &["a"])
            .owns(&[("a", 0), ("a", 1), ("a", 2)])
            .generation(2),
        member("m2", &["a", "b"])
            .owns(&[("a", 3), ("b", 0), ("b", 1)])
            .generation(2),
        member("m3", &["b"])
            .owns(&[("b", 2), ("b", 3)])
            .generation(2),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("m1", &[("a", 0), ("a", 1), ("a", 2)]),
            ("m2", &[("a", 3), ("b", 0), ("b", 1)]),
            ("m3", &[("b", 2), ("b", 3)]),
        ])
    );
}

#[test]
fn a_partition_never_goes_back_to_an_older_owner_that_no_longer_subscribes_to_its_topic() {
    // kafka-clients 4.4 hands b-0 back to x here (its owner in an older generation, to
    // improve balance), although x no longer subscribes to b.
    let t = topics(&[("a", 4), ("b", 4)]);
    let members = [
        member("x", &["a"]).owns(&[("b", 0)]).generation(1),
        member("y", &["a", "b"])
            .owns(&[
                ("a", 0),
                ("a", 1),
                ("a", 2),
                ("a", 3),
                ("b", 1),
                ("b", 2),
                ("b", 3),
            ])
            .generation(2),
        member("z", &["a", "b"]).generation(2),
    ];
    let goal = target(&t, &members);
    assert!(!goal["x"].contains(&tp("b", 0)), "{goal:?}");
    assert!(locally_balanced(&members, &goal), "{goal:?}");
    assert!(spread(&goal) <= 1, "{goal:?}");
}

#[test]
fn an_older_owner_that_cannot_take_part_in_balancing_does_not_stop_it() {
    // f owned b-0 in an older generation and now subscribes only to s, which nobody else
    // reads: it is set aside while the others are balanced. kafka-clients 4.4 throws a
    // NullPointerException here.
    let t = topics(&[("s", 1), ("b", 4)]);
    let members = [
        member("f", &["s"])
            .owns(&[("s", 0), ("b", 0)])
            .generation(1),
        member("y", &["b"])
            .owns(&[("b", 1), ("b", 2), ("b", 3)])
            .generation(2),
        member("z", &["b"]).generation(2),
    ];
    assert_eq!(
        target(&t, &members),
        expect(&[
            ("f", &[("s", 0)]),
            ("y", &[("b", 2), ("b", 3)]),
            ("z", &[("b", 0), ("b", 1)]),
        ])
    );
}

#[test]
fn a_member_that_unsubscribes_from_a_topic_gives_its_partitions_up_before_others_get_them() {
    let t = topics(&[("a", 2), ("b", 2)]);
    let members = vec![
        member("m1", &["a"])
            .owns(&[("a", 0), ("b", 0)])
            .generation(2),
        member("m2", &["a", "b"])
            .owns(&[("a", 1), ("b", 1)])
            .generation(2),
    ];
    let first = assign(&t, &members);
    assert!(!first["m1"].contains(&tp("b", 0)));
    assert!(
        !first["m2"].contains(&tp("b", 0)),
        "m1 must revoke b-0 first: {first:?}"
    );
    let (settled, _) = settle(&t, members);
    let o = owners(&settled);
    assert_eq!(o[&tp("b", 0)], "m2");
    assert_eq!(o.len(), 4);
}

#[test]
fn with_more_members_than_partitions_each_member_gets_at_most_one() {
    let t = topics(&[("a", 2), ("b", 1)]);
    let members: Vec<_> = (0..5)
        .map(|i| member(&format!("m{i}"), &["a", "b"]))
        .collect();
    let result = assign(&t, &members);
    check_invariants(&t, &members, &result, true);
    assert!(result.values().all(|p| p.len() <= 1), "{result:?}");
    // And owners keep theirs when members join.
    let mut next = members.clone();
    for m in &mut next {
        m.owned_partitions = result[&m.member_id].clone();
        m.generation = 1;
    }
    next.push(member("m9", &["a", "b"]));
    let again = assign(&t, &next);
    for m in &members {
        assert_eq!(again[&m.member_id], result[&m.member_id]);
    }
    assert!(again["m9"].is_empty());
}

#[test]
fn missing_and_empty_topics_and_owned_partitions_that_no_longer_exist_are_ignored() {
    let t = topics(&[("t", 2), ("empty", 0)]);
    let members = [
        member("m1", &["t", "empty", "missing"])
            .owns(&[("t", 7), ("missing", 0), ("gone", 1)])
            .generation(2),
        member("m2", &["t", "empty", "missing"])
            .owns(&[("t", 1)])
            .generation(2),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[("m1", &[("t", 0)]), ("m2", &[("t", 1)])])
    );
}

#[test]
fn a_static_member_rejoining_under_a_new_member_id_keeps_its_partitions() {
    let t = topics(&[("t", 4)]);
    let members = [
        member("new-id", &["t"])
            .instance("i1")
            .owns(&[("t", 1), ("t", 3)])
            .generation(6),
        member("m2", &["t"])
            .instance("i2")
            .owns(&[("t", 0), ("t", 2)])
            .generation(6),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("new-id", &[("t", 1), ("t", 3)]),
            ("m2", &[("t", 0), ("t", 2)])
        ])
    );
}

#[test]
fn with_racks_new_partitions_go_to_members_on_their_racks() {
    let t = rack_topics(&[("t", &[&["r0"], &["r1"], &["r0"], &["r1"]])]);
    let members = [
        member("m1", &["t"]).rack("r1"),
        member("m2", &["t"]).rack("r0"),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[("m1", &[("t", 1), ("t", 3)]), ("m2", &[("t", 0), ("t", 2)])])
    );
}

#[test]
fn with_racks_an_owned_partition_off_the_members_rack_moves_to_a_member_on_it() {
    let t = rack_topics(&[("t", &[&["r0"], &["r1"], &["r0"], &["r1"]])]);
    let members = vec![
        member("m1", &["t"])
            .rack("r1")
            .owns(&[("t", 0), ("t", 1)])
            .generation(2),
        member("m2", &["t"])
            .rack("r0")
            .owns(&[("t", 2), ("t", 3)])
            .generation(2),
    ];
    let goal = target(&t, &members);
    assert_eq!(
        goal,
        expect(&[("m1", &[("t", 1), ("t", 3)]), ("m2", &[("t", 0), ("t", 2)])])
    );
    let (settled, rounds) = settle(&t, members);
    assert_eq!(rounds, 3);
    let o = owners(&settled);
    assert_eq!(o[&tp("t", 0)], "m2");
    assert_eq!(o[&tp("t", 3)], "m1");
}

#[test]
fn with_racks_balance_comes_before_rack_alignment() {
    let t = rack_topics(&[("t", &[&["r0"], &["r0"], &["r0"], &["r0"], &["r1"]])]);
    let members = [
        member("m1", &["t"]).rack("r1"),
        member("m2", &["t"]).rack("r0"),
    ];
    let result = assign(&t, &members);
    assert!(spread(&result) <= 1, "{result:?}");
    assert!(result["m1"].contains(&tp("t", 4)));
}

#[test]
fn the_result_does_not_depend_on_the_order_of_members_topics_or_owned_partitions() {
    let mut rng = Rng::new(3);
    let t = topics(&[("a", 5), ("b", 3), ("c", 8)]);
    let members = [
        member("m1", &["a", "b", "c"])
            .owns(&[("a", 0), ("c", 1), ("c", 2)])
            .generation(3),
        member("m2", &["c", "a"])
            .owns(&[("a", 1), ("c", 1)])
            .generation(3),
        member("m3", &["b"])
            .owns(&[("b", 0), ("b", 1), ("b", 2)])
            .generation(2),
        member("m4", &["a", "c"]).owns(&[("a", 0)]).generation(2),
    ];
    let result = assign(&t, &members);
    let goal = target(&t, &members);
    for _ in 0..20 {
        let again = shuffled(&mut rng, &members);
        assert_eq!(assign(&t, &again), result);
        assert_eq!(target(&t, &again), goal);
    }
}

#[test]
fn randomized_groups_hand_over_safely_settle_and_equal_subscriptions_move_the_minimum() {
    let mut rng = Rng::new(0xc0_0b);
    for case in 0..500 {
        let (t, members) = random_case(&mut rng);
        let goal = target(&t, &members);
        let all_equal = members
            .windows(2)
            .all(|w| w[0].topics.iter().collect::<BTreeSet<_>>() == w[1].topics.iter().collect());
        let racks = t.values().flatten().any(|p| !p.replica_racks.is_empty())
            && members.iter().any(|m| m.rack.is_some());
        if all_equal {
            assert!(spread(&goal) <= 1, "case {case}: {goal:?}");
            if !racks {
                // Only the minimum leaves its valid owner.
                let valid = valid_owners(&t, &members);
                let owned: Vec<usize> = members
                    .iter()
                    .map(|m| valid.values().filter(|o| **o == m.member_id).count())
                    .collect();
                let total = all_partitions(&t, &members).len();
                let moved = valid.iter().filter(|(p, m)| !goal[*m].contains(p)).count();
                assert_eq!(
                    moved,
                    min_moves(&owned, total),
                    "case {case}: {members:?} -> {goal:?}"
                );
            }
        }
        let (settled, _) = settle(&t, members.clone());
        let final_owners = owners(&settled);
        assert_eq!(
            final_owners.keys().cloned().collect::<BTreeSet<_>>(),
            all_partitions(&t, &members),
            "case {case}: every partition is owned once settled"
        );
    }
}
