//! Moving a group between the classic protocol and the KIP-848 consumer protocol
//! (`group.protocol=consumer`) on the real broker, with our members only (each in a
//! process of its own, `examples/group_member.rs`). Needs a Kafka 4.x broker (online
//! migration: `group.consumer.migration.policy=bidirectional`, the 4.x default).
//!
//! Online: while a producer writes, consumer-protocol members join a classic group one by
//! one as the classic members leave one by one (the broker converts the group when the
//! first one joins), and back (the group turns classic again when the last
//! consumer-protocol member leaves). Offline: every member of one protocol stops after
//! committing, then members of the other start on the same group id and resume from its
//! committed offsets. Either way no record is lost.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::java_member::{
    assert_all_consumed, assert_no_overlap, consumed, group_type, wait_consumed, wait_flowing,
    wait_stable, BackgroundProducer, Event, JavaMember, JavaMemberOptions, Partition,
};
use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// Our classic member: `assignor`, session 6 s, heartbeat 500 ms, commit on revoke.
fn classic(group: &str, topic: &str, assignor: &str) -> JavaMemberOptions {
    JavaMemberOptions {
        assignor: Some(assignor.into()),
        session_timeout_ms: Some(6_000),
        heartbeat_ms: Some(500),
        ..JavaMemberOptions::new(group, &[topic])
    }
}

/// Our consumer-protocol member: the broker's default assignor, commit on revoke.
fn consumer(group: &str, topic: &str) -> JavaMemberOptions {
    JavaMemberOptions {
        protocol: "consumer".into(),
        ..JavaMemberOptions::new(group, &[topic])
    }
}

fn describe_all(members: &[&JavaMember]) -> String {
    members.iter().map(|m| m.describe()).collect()
}

fn assert_group_type(group: &str, want: &str, when: &str, members: &[&JavaMember]) {
    let got = group_type(group);
    assert_eq!(
        got.as_deref(),
        Some(want),
        "{when}: the broker lists {group} as {got:?}\n{}",
        describe_all(members)
    );
}

fn online(assignor: &str) {
    const N: i32 = 6;
    let topic = unique_topic(&format!("migrate-online-{assignor}"));
    let group = unique_topic(&format!("g-migrate-online-{assignor}"));
    Produce::new(&topic, N, 60).run();
    let producer = BackgroundProducer::start(&topic, N, 60, 60, Duration::from_millis(200));
    let classic = classic(&group, &topic, assignor);
    let consumer = consumer(&group, &topic);
    // Every member that ever ran, in start order (for the final checks).
    let mut all: Vec<JavaMember> = Vec::new();
    // Indexes into `all` of the members in the group now.
    let mut live: Vec<usize> = Vec::new();

    let step = |all: &Vec<JavaMember>, live: &Vec<usize>, what: &str| {
        let refs: Vec<&JavaMember> = live.iter().map(|&i| &all[i]).collect();
        wait_stable(&refs, &topic, N, true, what, LIMIT);
        wait_flowing(what, &refs, &producer, N);
        let everyone: Vec<&JavaMember> = all.iter().collect();
        assert_no_overlap(&everyone);
    };

    // A classic group of two.
    for _ in 0..2 {
        all.push(JavaMember::start_ours(&classic));
        live.push(all.len() - 1);
    }
    step(&all, &live, "two classic members split 6");
    assert_group_type(
        &group,
        "Classic",
        "two classic members",
        &[&all[0], &all[1]],
    );

    // Upgrade: consumer-protocol members join one by one, the classic ones leave one by
    // one.
    for round in 0..2 {
        all.push(JavaMember::start_ours(&consumer));
        live.push(all.len() - 1);
        step(
            &all,
            &live,
            &format!("consumer-protocol member {round} joined the classic members"),
        );
        if round == 0 {
            let refs: Vec<&JavaMember> = all.iter().collect();
            assert_group_type(
                &group,
                "Consumer",
                "a consumer-protocol member joined",
                &refs,
            );
        }
        let leaving = live.remove(0);
        all[leaving].close();
        step(&all, &live, &format!("classic member {round} left"));
    }
    let refs: Vec<&JavaMember> = all.iter().collect();
    assert_group_type(&group, "Consumer", "only consumer-protocol members", &refs);

    // Downgrade: classic members join one by one, the consumer-protocol ones leave one by
    // one; when the last leaves the group is classic again.
    for round in 0..2 {
        all.push(JavaMember::start_ours(&classic));
        live.push(all.len() - 1);
        step(
            &all,
            &live,
            &format!("classic member {round} joined the consumer-protocol members"),
        );
        let leaving = live.remove(0);
        all[leaving].close();
        step(
            &all,
            &live,
            &format!("consumer-protocol member {round} left"),
        );
    }
    let refs: Vec<&JavaMember> = all.iter().collect();
    assert_group_type(&group, "Classic", "only classic members again", &refs);

    let total = producer.stop();
    let everyone: Vec<&JavaMember> = all.iter().collect();
    wait_consumed(&everyone, &topic, N, total, LIMIT);
    assert_all_consumed(&everyone, &topic, N, total, false);
    assert_no_overlap(&everyone);
    let twice = consumed(&everyone, &topic)
        .values()
        .filter(|n| **n > 1)
        .count();
    eprintln!("{total} records, {twice} consumed more than once");
    for &i in &live {
        all[i].close();
    }
}

#[test]
fn online_migration_of_a_cooperative_sticky_group_to_the_consumer_protocol_and_back_loses_nothing()
{
    online("cooperative-sticky");
}

#[test]
fn online_migration_of_a_range_group_to_the_consumer_protocol_and_back_loses_nothing() {
    online("range");
}

/// The last offset each member committed per partition (`committed` lines).
fn last_committed(members: &[&JavaMember]) -> BTreeMap<Partition, i64> {
    let mut last = BTreeMap::new();
    for m in members {
        for (_, e) in m.events() {
            if let Event::Committed { offsets } = e {
                for (t, p, o) in offsets {
                    last.insert((t, p), o);
                }
            }
        }
    }
    last
}

/// Commits what each member consumed and closes it.
fn commit_and_close(members: &mut [JavaMember]) {
    for m in members.iter_mut() {
        let seen = m.events().len();
        m.send("commit");
        m.wait_for("its commit", LIMIT, |e| {
            e[seen..]
                .iter()
                .any(|(_, e)| matches!(e, Event::Committed { .. }))
        });
    }
    for m in members.iter_mut() {
        m.close();
    }
}

/// Asserts that each member's first record on each partition is where the group's
/// commits left it.
fn assert_resumed_at(members: &[&JavaMember], committed: &BTreeMap<Partition, i64>, what: &str) {
    for m in members {
        let mut first: BTreeMap<Partition, i64> = BTreeMap::new();
        for (p, o, _) in m.records() {
            first.entry(p).or_insert(o);
        }
        for (p, o) in &first {
            assert_eq!(
                Some(o),
                committed.get(p),
                "{what}: {} started {}-{} at offset {o}, not at the committed offset {:?}\n{}",
                m.name(),
                p.0,
                p.1,
                committed.get(p),
                describe_all(members)
            );
        }
    }
}

#[test]
fn offline_migration_resumes_from_the_committed_offsets_both_ways() {
    const N: i32 = 6;
    let topic = unique_topic("migrate-offline");
    let group = unique_topic("g-migrate-offline");
    Produce::new(&topic, N, 600).run();
    // No reset: a member that found no committed offset would fail.
    let none = |o: JavaMemberOptions| JavaMemberOptions {
        auto_offset_reset: Some("none".into()),
        ..o
    };

    // Classic members consume the first 600 records (from the earliest: the group has no
    // offsets yet), commit and stop.
    let mut classics = vec![
        JavaMember::start_ours(&classic(&group, &topic, "range")),
        JavaMember::start_ours(&classic(&group, &topic, "range")),
    ];
    let refs: Vec<&JavaMember> = classics.iter().collect();
    wait_stable(&refs, &topic, N, true, "two classic members split 6", LIMIT);
    wait_consumed(&refs, &topic, N, 600, LIMIT);
    commit_and_close(&mut classics);
    let refs: Vec<&JavaMember> = classics.iter().collect();
    let committed = last_committed(&refs);
    assert_eq!(
        committed.values().collect::<Vec<_>>(),
        vec![&100; N as usize],
        "the classic members committed all they read\n{}",
        describe_all(&refs)
    );

    // More records while the group is empty; consumer-protocol members take over.
    Produce {
        start: 600,
        ..Produce::new(&topic, N, 600)
    }
    .run();
    let mut consumers = vec![
        JavaMember::start_ours(&none(consumer(&group, &topic))),
        JavaMember::start_ours(&none(consumer(&group, &topic))),
    ];
    let refs: Vec<&JavaMember> = consumers.iter().collect();
    wait_stable(
        &refs,
        &topic,
        N,
        true,
        "two consumer-protocol members split 6",
        LIMIT,
    );
    assert_group_type(
        &group,
        "Consumer",
        "consumer-protocol members took over",
        &refs,
    );
    wait_consumed(
        &[&classics[0], &classics[1], &consumers[0], &consumers[1]],
        &topic,
        N,
        1200,
        LIMIT,
    );
    assert_resumed_at(&refs, &committed, "classic to consumer");
    commit_and_close(&mut consumers);
    let refs: Vec<&JavaMember> = consumers.iter().collect();
    let committed = last_committed(&refs);
    assert_eq!(
        committed.values().collect::<Vec<_>>(),
        vec![&200; N as usize],
        "the consumer-protocol members committed all they read\n{}",
        describe_all(&refs)
    );

    // And back: classic members resume where the consumer-protocol members stopped.
    Produce {
        start: 1200,
        ..Produce::new(&topic, N, 600)
    }
    .run();
    let mut again = vec![
        JavaMember::start_ours(&none(classic(&group, &topic, "cooperative-sticky"))),
        JavaMember::start_ours(&none(classic(&group, &topic, "cooperative-sticky"))),
    ];
    let refs: Vec<&JavaMember> = again.iter().collect();
    wait_stable(
        &refs,
        &topic,
        N,
        true,
        "two classic members split 6 again",
        LIMIT,
    );
    assert_group_type(&group, "Classic", "classic members took over", &refs);
    let everyone: Vec<&JavaMember> = classics.iter().chain(&consumers).chain(&again).collect();
    wait_consumed(&everyone, &topic, N, 1800, LIMIT);
    assert_resumed_at(&refs, &committed, "consumer to classic");
    // Every handover went through a commit: nothing was read twice.
    assert_all_consumed(&everyone, &topic, N, 1800, true);
    for m in &mut again {
        m.close();
    }
}
