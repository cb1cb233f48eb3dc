//! The Java group member of the group tests (`scripts/java/GroupMember.java` and
//! `tests/common/java_member.rs`) against the real broker, with Java members only: two
//! members split a topic's partitions, consume every record once, and when one leaves the
//! other takes over everything.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::java_member::{assert_no_overlap, wait_until, JavaMember, JavaMemberOptions, Owned};
use common::*;

const PARTITIONS: i32 = 6;
const LIMIT: Duration = Duration::from_secs(60);

/// The records both members polled, checked against what TestProducer wrote (record i is
/// at offset i / 6 of partition i % 6, so offset k of partition p holds record p + 6k):
/// no record twice, every value right. Returns how many there are.
fn check_records(members: &[&JavaMember], topic: &str) -> usize {
    let mut seen = BTreeMap::new();
    for m in members {
        for ((t, p), offset, value) in m.records() {
            assert_eq!(t, topic);
            let i = p as u64 + PARTITIONS as u64 * offset as u64;
            assert_eq!(value, expected(i, PARTITIONS, 0).value, "{t}-{p}@{offset}");
            if let Some(first) = seen.insert((p, offset), m.name().to_owned()) {
                panic!(
                    "{t}-{p}@{offset} consumed twice: by {first} and {}",
                    m.name()
                );
            }
        }
    }
    seen.len()
}

fn all(topic: &str) -> Owned {
    (0..PARTITIONS).map(|p| (topic.to_owned(), p)).collect()
}

fn split_then_hand_over(protocol: &str, assignor: Option<&str>, remote_assignor: Option<&str>) {
    let topic = unique_topic("java-member");
    let group = unique_topic("java-member-group");
    Produce::new(&topic, PARTITIONS, 600).run();
    let opts = JavaMemberOptions {
        protocol: protocol.into(),
        assignor: assignor.map(Into::into),
        remote_assignor: remote_assignor.map(Into::into),
        ..JavaMemberOptions::new(&group, &[&topic])
    };
    let mut a = JavaMember::start(&opts);
    let mut b = JavaMember::start(&opts);
    let both = [&a, &b];

    wait_until(&both, "the partitions split between a and b", LIMIT, || {
        let (oa, ob) = (a.owned(), b.owned());
        !oa.is_empty() && !ob.is_empty() && oa.is_disjoint(&ob) && &oa | &ob == all(&topic)
    });
    assert_eq!((a.owned().len(), b.owned().len()), (3, 3), "balanced");
    wait_until(&both, "600 records", LIMIT, || {
        a.record_count() + b.record_count() >= 600
    });
    assert_eq!(check_records(&both, &topic), 600);

    // Both consume while the partitions are split.
    Produce {
        start: 600,
        ..Produce::new(&topic, PARTITIONS, 600)
    }
    .run();
    wait_until(&both, "1200 records", LIMIT, || {
        a.record_count() + b.record_count() >= 1200
    });
    assert!(a.record_count() >= 300 && b.record_count() >= 300);

    // a leaves (committing in onPartitionsRevoked): b takes over and resumes from a's
    // commits.
    a.close();
    let owned = b.wait_owned("b owns all partitions", LIMIT, |o| *o == all(&topic));
    assert_eq!(owned.len(), 6);
    Produce {
        start: 1200,
        ..Produce::new(&topic, PARTITIONS, 60)
    }
    .run();
    wait_until(&[&b], "1260 records", LIMIT, || {
        a.record_count() + b.record_count() >= 1260
    });
    assert_eq!(check_records(&[&a, &b], &topic), 1260);
    assert_no_overlap(&[&a, &b]);
    assert!(a.owned().is_empty(), "{}", a.describe());
    b.close();
    assert!(b.owned().is_empty(), "{}", b.describe());
}

#[test]
fn classic_cooperative_sticky_members_split_and_hand_over() {
    split_then_hand_over("classic", Some("cooperative-sticky"), None);
}

#[test]
fn consumer_protocol_members_split_and_hand_over() {
    split_then_hand_over("consumer", None, Some("uniform"));
}
