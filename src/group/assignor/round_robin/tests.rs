//! The `roundrobin` assignor: Java's documented examples, member order, partial
//! subscriptions. (`tests/assignors.rs` compares it with kafka-clients on many more inputs.)

use std::collections::BTreeMap;

use super::super::tests::*;
use super::*;

fn assign(
    topics: &BTreeMap<String, Vec<PartitionInfo>>,
    members: &[MemberSubscription],
) -> BTreeMap<String, Vec<TopicPartition>> {
    let result = RoundRobin.assign(topics, members);
    check_invariants(topics, members, &result, true);
    result
}

#[test]
fn partitions_are_dealt_in_turn_across_topics() {
    // The first example of RoundRobinAssignor's Javadoc.
    let t = topics(&[("t0", 3), ("t1", 3)]);
    let result = assign(
        &t,
        &[member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])],
    );
    assert_eq!(
        result,
        expect(&[
            ("C0", &[("t0", 0), ("t0", 2), ("t1", 1)]),
            ("C1", &[("t0", 1), ("t1", 0), ("t1", 2)]),
        ])
    );
}

#[test]
fn a_member_is_skipped_for_the_topics_it_does_not_subscribe_to() {
    // The second example of RoundRobinAssignor's Javadoc.
    let t = topics(&[("t0", 1), ("t1", 2), ("t2", 3)]);
    let members = [
        member("C0", &["t0"]),
        member("C1", &["t0", "t1"]),
        member("C2", &["t0", "t1", "t2"]),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("C0", &[("t0", 0)]),
            ("C1", &[("t1", 0)]),
            ("C2", &[("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]),
        ])
    );
}

#[test]
fn with_equal_subscriptions_member_counts_differ_by_at_most_one() {
    for (n_members, sizes) in [(3, vec![4, 4, 1]), (5, vec![7, 0, 2, 9]), (4, vec![1])] {
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
        let c: Vec<usize> = counts(&result).into_values().collect();
        let (min, max) = (c.iter().min().unwrap(), c.iter().max().unwrap());
        assert!(max - min <= 1, "{result:?}");
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
fn with_more_members_than_partitions_the_last_members_get_nothing() {
    let t = topics(&[("a", 1), ("b", 1)]);
    let members: Vec<_> = (1..=3)
        .map(|i| member(&format!("m{i}"), &["a", "b"]))
        .collect();
    assert_eq!(
        assign(&t, &members),
        expect(&[("m1", &[("a", 0)]), ("m2", &[("b", 0)]), ("m3", &[])])
    );
}

#[test]
fn topics_without_partitions_or_missing_from_metadata_are_skipped() {
    let t = topics(&[("empty", 0), ("t", 3)]);
    let members = [
        member("m1", &["empty", "missing", "t"]),
        member("m2", &["t", "missing"]),
        member("m3", &["missing"]),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[
            ("m1", &[("t", 0), ("t", 2)]),
            ("m2", &[("t", 1)]),
            ("m3", &[]),
        ])
    );
}

#[test]
fn owned_partitions_generations_and_racks_do_not_matter_to_the_eager_roundrobin_assignor() {
    let t = rack_topics(&[("t", &[&["r0"], &["r1"], &["r0"]])]);
    let plain = [member("m1", &["t"]), member("m2", &["t"])];
    let decorated = [
        member("m1", &["t"])
            .owns(&[("t", 1)])
            .generation(2)
            .rack("r1"),
        member("m2", &["t"])
            .owns(&[("t", 0)])
            .generation(4)
            .rack("r0"),
    ];
    assert_eq!(assign(&t, &decorated), assign(&t, &plain));
}

#[test]
fn the_result_does_not_depend_on_the_order_of_members_or_topics() {
    let mut rng = Rng::new(11);
    let t = topics(&[("a", 5), ("b", 3), ("c", 8)]);
    let members = [
        member("m1", &["a", "b", "c"]),
        member("m2", &["c", "a"]).instance("s1"),
        member("m3", &["b"]),
        member("m4", &["a", "c"]).instance("s0"),
    ];
    let result = assign(&t, &members);
    for _ in 0..20 {
        assert_eq!(assign(&t, &shuffled(&mut rng, &members)), result);
    }
}

#[test]
fn roundrobin_ignores_racks_as_javas_does() {
    let t = rack_topics(&[("t", &[&["r1"], &["r2"], &["r1"], &["r2"]])]);
    let members = [
        member("m1", &["t"]).rack("r2"),
        member("m2", &["t"]).rack("r1"),
    ];
    assert_eq!(
        assign(&t, &members),
        expect(&[("m1", &[("t", 0), ("t", 2)]), ("m2", &[("t", 1), ("t", 3)])])
    );
}
