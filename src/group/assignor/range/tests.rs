//! The `range` assignor: Java's documented examples, member order, partial subscriptions,
//! racks. (`tests/assignors.rs` compares it with kafka-clients on many more inputs.)

use std::collections::BTreeMap;

use super::super::tests::*;
use super::*;

fn assign(
    topics: &BTreeMap<String, Vec<PartitionInfo>>,
    members: &[MemberSubscription],
) -> BTreeMap<String, Vec<TopicPartition>> {
    let result = Range.assign(topics, members);
    check_invariants(topics, members, &result, true);
    result
}

#[test]
fn two_members_and_two_topics_of_three_partitions_give_the_first_member_two_of_each() {
    // The example of RangeAssignor's Javadoc.
    let t = topics(&[("t0", 3), ("t1", 3)]);
    let result = assign(
        &t,
        &[member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])],
    );
    assert_eq!(
        result,
        expect(&[
            ("C0", &[("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)]),
            ("C1", &[("t0", 2), ("t1", 2)]),
        ])
    );
}

#[test]
fn each_topic_is_split_into_consecutive_ranges_differing_by_at_most_one() {
    let t = topics(&[("a", 10), ("b", 7), ("c", 1)]);
    let ids = ["m1", "m2", "m3", "m4"];
    let members: Vec<_> = ids.iter().map(|m| member(m, &["a", "b", "c"])).collect();
    let result = assign(&t, &members);
    for (topic, infos) in &t {
        let per_member: Vec<Vec<i32>> = ids
            .iter()
            .map(|m| {
                result[*m]
                    .iter()
                    .filter(|p| p.topic() == topic)
                    .map(|p| p.partition())
                    .collect()
            })
            .collect();
        let n = infos.len();
        for (i, parts) in per_member.iter().enumerate() {
            // Members in id order: the first n % 4 get one more.
            let want = n / 4 + usize::from(i < n % 4);
            assert_eq!(parts.len(), want, "{topic}: {per_member:?}");
            assert!(parts.windows(2).all(|w| w[1] == w[0] + 1), "{per_member:?}");
        }
        let flat: Vec<i32> = per_member.concat();
        assert_eq!(
            flat,
            (0..n as i32).collect::<Vec<_>>(),
            "ranges in member order"
        );
    }
}

#[test]
fn static_members_come_first_by_instance_id_then_dynamic_members_by_member_id() {
    let t = topics(&[("t", 4)]);
    let members = [
        member("a-dynamic", &["t"]),
        member("z-static", &["t"]).instance("i1"),
        member("b-static", &["t"]).instance("i2"),
        member("c-dynamic", &["t"]),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("z-static", &[("t", 0)]),
            ("b-static", &[("t", 1)]),
            ("a-dynamic", &[("t", 2)]),
            ("c-dynamic", &[("t", 3)]),
        ])
    );
}

#[test]
fn member_ids_are_ordered_as_java_orders_strings() {
    // Java puts U+1F600 (a surrogate pair) before U+FFFD; a byte-wise order would not.
    let t = topics(&[("t", 2)]);
    let members = [member("\u{FFFD}", &["t"]), member("\u{1F600}", &["t"])];
    assert_eq!(
        assign(&t, &members),
        expect(&[("\u{1F600}", &[("t", 0)]), ("\u{FFFD}", &[("t", 1)])])
    );
}

#[test]
fn a_topic_is_split_only_among_the_members_subscribed_to_it() {
    let t = topics(&[("a", 3), ("b", 2)]);
    let members = [
        member("m1", &["a"]),
        member("m2", &["a", "b"]),
        member("m3", &["b"]),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("m1", &[("a", 0), ("a", 1)]),
            ("m2", &[("a", 2), ("b", 0)]),
            ("m3", &[("b", 1)]),
        ])
    );
}

#[test]
fn with_more_members_than_partitions_the_last_members_get_nothing() {
    let t = topics(&[("t", 2)]);
    let members: Vec<_> = (1..=4).map(|i| member(&format!("m{i}"), &["t"])).collect();
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("m1", &[("t", 0)]),
            ("m2", &[("t", 1)]),
            ("m3", &[]),
            ("m4", &[]),
        ])
    );
}

#[test]
fn topics_without_partitions_or_missing_from_metadata_are_skipped() {
    let t = topics(&[("empty", 0), ("t", 2), ("unsubscribed", 5)]);
    let members = [
        member("m1", &["empty", "missing", "t"]),
        member("m2", &["missing"]),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[("m1", &[("t", 0), ("t", 1)]), ("m2", &[])])
    );
}

#[test]
fn owned_partitions_and_generations_do_not_matter_to_the_eager_range_assignor() {
    let t = topics(&[("t", 4)]);
    let plain = [member("m1", &["t"]), member("m2", &["t"])];
    let owning = [
        member("m1", &["t"]).owns(&[("t", 3)]).generation(7),
        member("m2", &["t"])
            .owns(&[("t", 0), ("t", 1)])
            .generation(3),
    ];
    assert_eq!(assign(&t, &owning), assign(&t, &plain));
}

#[test]
fn the_result_does_not_depend_on_the_order_of_members_or_topics() {
    let mut rng = Rng::new(7);
    let t = topics(&[("a", 5), ("b", 3), ("c", 8)]);
    let members = [
        member("m1", &["a", "b", "c"]),
        member("m2", &["c", "a"]).instance("s1"),
        member("m3", &["b"]),
        member("m4", &["a", "c"]),
    ];
    let result = assign(&t, &members);
    for _ in 0..20 {
        assert_eq!(assign(&t, &shuffled(&mut rng, &members)), result);
    }
}

#[test]
fn with_racks_each_member_gets_the_partitions_on_its_rack_within_its_quota() {
    // Partition p has its only replica on rack r{p}; member order is m1, m2, m3.
    let t = rack_topics(&[("t", &[&["r0"], &["r1"], &["r2"]])]);
    let members = [
        member("m1", &["t"]).rack("r2"),
        member("m2", &["t"]).rack("r0"),
        member("m3", &["t"]).rack("r1"),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("m1", &[("t", 2)]),
            ("m2", &[("t", 0)]),
            ("m3", &[("t", 1)]),
        ])
    );
}

#[test]
fn racks_are_ignored_when_every_partition_has_replicas_on_every_rack() {
    let t = rack_topics(&[("t", &[&["r0", "r1"], &["r0", "r1"]])]);
    let members = [
        member("m1", &["t"]).rack("r1"),
        member("m2", &["t"]).rack("r0"),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[("m1", &[("t", 0)]), ("m2", &[("t", 1)])])
    );
}

#[test]
fn with_racks_balance_comes_before_rack_alignment() {
    // Three partitions live on r0, where only m2 is; it still gets only its share.
    let t = rack_topics(&[("t", &[&["r0"], &["r0"], &["r0"], &["r1"]])]);
    let members = [
        member("m1", &["t"]).rack("r1"),
        member("m2", &["t"]).rack("r0"),
    ];
    let result = assign(&t, &members);
    assert_eq!(counts(&result), BTreeMap::from([("m1", 2), ("m2", 2)]));
    assert_eq!(result["m1"], vec![tp("t", 2), tp("t", 3)]);
}

#[test]
fn with_racks_co_partitioned_topics_keep_partition_p_of_each_topic_together() {
    // Two topics with the same members and partition count: partition p of both goes to
    // the same member, on the rack of its replicas.
    let parts: &[&[&str]] = &[&["r1"], &["r0"], &["r1"], &["r0"]];
    let t = rack_topics(&[("a", parts), ("b", parts)]);
    let members = [
        member("m1", &["a", "b"]).rack("r0"),
        member("m2", &["a", "b"]).rack("r1"),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("m1", &[("a", 1), ("a", 3), ("b", 1), ("b", 3)]),
            ("m2", &[("a", 0), ("a", 2), ("b", 0), ("b", 2)]),
        ])
    );
}

#[test]
fn in_rack_aware_mode_a_member_without_a_rack_matches_every_partition() {
    let t = rack_topics(&[("t", &[&["r1"], &["r1"], &["r0"]])]);
    let members = [
        member("m1", &["t"]),
        member("m2", &["t"]).rack("r0"),
        member("m3", &["t"]).rack("r1"),
    ];
    // m1 (first, no rack) takes its share first; m2 and m3 then find theirs on their racks.
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("m1", &[("t", 0)]),
            ("m2", &[("t", 2)]),
            ("m3", &[("t", 1)]),
        ])
    );
}

/// Topic `t` of 6 partitions, partition `p` on rack `r{p % 3 + 1}` alone.
fn six_on_three_racks() -> BTreeMap<String, Vec<PartitionInfo>> {
    rack_topics(&[("t", &[&["r1"], &["r2"], &["r3"], &["r1"], &["r2"], &["r3"]])])
}

#[test]
fn range_gives_each_member_the_partitions_with_a_replica_in_its_rack_when_that_keeps_the_balance() {
    let members = [
        member("m1", &["t"]).rack("r3"),
        member("m2", &["t"]).rack("r1"),
        member("m3", &["t"]).rack("r2"),
    ];
    assert_eq!(
        assign(&six_on_three_racks(), &members),
        expect(&[
            ("m1", &[("t", 2), ("t", 5)]),
            ("m2", &[("t", 0), ("t", 3)]),
            ("m3", &[("t", 1), ("t", 4)]),
        ])
    );
}

#[test]
fn range_ignores_racks_when_no_member_sends_one() {
    let members = [member("m1", &["t"]), member("m2", &["t"])];
    assert_eq!(
        assign(&six_on_three_racks(), &members),
        expect(&[
            ("m1", &[("t", 0), ("t", 1), ("t", 2)]),
            ("m2", &[("t", 3), ("t", 4), ("t", 5)]),
        ])
    );
}

#[test]
fn range_ignores_racks_when_no_replica_is_on_a_members_rack() {
    let members = [
        member("m1", &["t"]).rack("r8"),
        member("m2", &["t"]).rack("r9"),
    ];
    assert_eq!(
        assign(&six_on_three_racks(), &members),
        expect(&[
            ("m1", &[("t", 0), ("t", 1), ("t", 2)]),
            ("m2", &[("t", 3), ("t", 4), ("t", 5)]),
        ])
    );
}

#[test]
fn range_ignores_racks_when_the_metadata_names_none_for_the_replicas() {
    let t = topics(&[("t", 4)]);
    let members = [
        member("m1", &["t"]).rack("r2"),
        member("m2", &["t"]).rack("r1"),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[("m1", &[("t", 0), ("t", 1)]), ("m2", &[("t", 2), ("t", 3)])])
    );
}

#[test]
fn range_hands_out_what_no_member_can_read_on_its_rack_in_plain_ranges_afterwards() {
    // Partitions 0, 1 and 2 are on r1 only; nobody is on r3, where 3, 4 and 5 are.
    let t = rack_topics(&[("t", &[&["r1"], &["r1"], &["r1"], &["r3"], &["r3"], &["r3"]])]);
    let members = [
        member("m1", &["t"]).rack("r2"),
        member("m2", &["t"]).rack("r1"),
    ];
    // m2 takes its three on r1 first; m1 gets the rest.
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("m1", &[("t", 3), ("t", 4), ("t", 5)]),
            ("m2", &[("t", 0), ("t", 1), ("t", 2)]),
        ])
    );
}

#[test]
fn range_keeps_partition_p_of_co_partitioned_topics_together_even_when_their_racks_differ() {
    // Partition p of a and of b are on different racks: no member can read both on its
    // rack, and co-partitioning wins (as in Java).
    let t = rack_topics(&[("a", &[&["r1"], &["r2"]]), ("b", &[&["r2"], &["r1"]])]);
    let members = [
        member("m1", &["a", "b"]).rack("r1"),
        member("m2", &["a", "b"]).rack("r2"),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[("m1", &[("a", 0), ("b", 0)]), ("m2", &[("a", 1), ("b", 1)])])
    );
    // Each topic alone (different members) is assigned on racks.
    let members = [
        member("m1", &["a", "b"]).rack("r1"),
        member("m2", &["a", "b"]).rack("r2"),
        member("m3", &["b"]),
    ];
    let result = assign(&t, &members);
    assert_eq!(result["m1"][0], tp("a", 0));
    assert_eq!(result["m2"][0], tp("a", 1));
}

#[test]
fn range_with_racks_still_gives_every_member_its_share_of_each_topic() {
    let mut rng = Rng::new(11);
    for _ in 0..200 {
        let (t, members) = random_case(&mut rng);
        let with = assign(&t, &members);
        let plain: Vec<MemberSubscription> = members
            .iter()
            .map(|m| MemberSubscription {
                rack: None,
                ..m.clone()
            })
            .collect();
        let without = assign(&t, &plain);
        // Per topic, the same shares (which members get one more may differ).
        for topic in t.keys() {
            let shares = |a: &BTreeMap<String, Vec<TopicPartition>>| {
                let mut v: Vec<usize> = a
                    .values()
                    .map(|ps| ps.iter().filter(|p| p.topic() == topic).count())
                    .collect();
                v.sort_unstable();
                v
            };
            assert_eq!(shares(&with), shares(&without), "{topic}: {with:?}");
        }
    }
}
