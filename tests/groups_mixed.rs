//! Our classic members in a group that the broker runs with the KIP-848 protocol (a Java
//! consumer with `group.protocol=consumer` created it): the broker computes the classic
//! members' assignments too, so their JoinGroup answers name no leader and carry no
//! members, and every member gets its partitions from SyncGroup. Needs a Kafka 4.x broker
//! (3.x does not enable the consumer protocol by default).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::java_member::{assert_no_overlap, wait_until, JavaMember, JavaMemberOptions, Owned};
use common::*;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn our_classic_members_share_a_kip848_group_with_java_consumer_protocol_members() {
    const N: i32 = 6;
    let topic = unique_topic("mixed");
    let group = unique_topic("g-mixed");
    Produce::new(&topic, N, 600).run();
    let java_opts = JavaMemberOptions {
        protocol: "consumer".into(),
        ..JavaMemberOptions::new(&group, &[&topic])
    };
    let ours_opts = JavaMemberOptions {
        session_timeout_ms: Some(6_000),
        heartbeat_ms: Some(500),
        ..JavaMemberOptions::new(&group, &[&topic])
    };
    let mut java = JavaMember::start(&java_opts);
    java.wait_owned("the Java member owns all", LIMIT, |o| o.len() == N as usize);
    let mut a = JavaMember::start_ours(&ours_opts);
    let mut b = JavaMember::start_ours(&ours_opts);
    let all: Owned = (0..N).map(|p| (topic.clone(), p)).collect();
    wait_until(&[&java, &a, &b], "three members split 6", LIMIT, || {
        let (j, x, y) = (java.owned(), a.owned(), b.owned());
        !j.is_empty()
            && !x.is_empty()
            && !y.is_empty()
            && j.len() + x.len() + y.len() == N as usize
            && &(&j | &x) | &y == all
    });
    Produce {
        start: 600,
        ..Produce::new(&topic, N, 600)
    }
    .run();
    let seen = |members: &[&JavaMember]| {
        let mut seen = BTreeMap::new();
        for m in members {
            for ((_, p), o, _) in m.records() {
                *seen.entry((p, o)).or_insert(0) += 1;
            }
        }
        seen
    };
    wait_until(&[&java, &a, &b], "1200 records", LIMIT, || {
        seen(&[&java, &a, &b]).len() >= 1200
    });
    // Our members leave; the Java member gets everything back.
    a.close();
    b.close();
    java.wait_owned("the Java member owns all again", LIMIT, |o| {
        o.len() == N as usize
    });
    Produce {
        start: 1200,
        ..Produce::new(&topic, N, 60)
    }
    .run();
    wait_until(&[&java, &a, &b], "1260 records", LIMIT, || {
        seen(&[&java, &a, &b]).len() >= 1260
    });
    let counts = seen(&[&java, &a, &b]);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "records consumed twice: {twice:?}");
    assert_no_overlap(&[&java, &a, &b]);
    java.close();
}
