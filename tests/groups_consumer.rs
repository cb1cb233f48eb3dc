//! Consumer groups with the KIP-848 consumer protocol (`group.protocol=consumer`) on the
//! real broker: our members, each in a process of its own (`examples/group_member.rs`, so
//! that one can be stopped or killed), alone and beside Java `KafkaConsumer`s
//! (`scripts/java/GroupMember.java`) of either protocol. The broker assigns the partitions
//! (`group.remote.assignor`) and runs the heartbeats: session timeout 6 s, heartbeat
//! 500 ms (`scripts/broker.sh`). Needs a Kafka 4.x broker.
//!
//! What a user checks: every partition has exactly one owner once the group settles, and
//! no two members own a partition at the same time; a rebalance moves only the partitions
//! that change owner (a member keeping its partitions hears nothing and keeps getting
//! records); every record is consumed (exactly once where every owner commits before
//! giving a partition up, at least once when members crash).
//!
//! `GROUP_MEMBER=java` runs the tests written for our members with Java consumers instead
//! (to tell a wrong test from a wrong client).

mod common;

use std::time::{Duration, Instant};

use common::java_member::{
    all_of, assert_all_consumed, assert_no_overlap, consumed, group_type, wait_consumed,
    wait_flowing, wait_settled, wait_stable, BackgroundProducer, Event, JavaMember,
    JavaMemberOptions, Owned,
};
use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// Consumer protocol, the broker's default assignor unless `remote_assignor`, commit on
/// revoke, `earliest`.
fn options(group: &str, topic: &str, remote_assignor: Option<&str>) -> JavaMemberOptions {
    JavaMemberOptions {
        protocol: "consumer".into(),
        remote_assignor: remote_assignor.map(str::to_owned),
        ..JavaMemberOptions::new(group, &[topic])
    }
}

/// Our member (or, with `GROUP_MEMBER=java`, a Java one).
fn start(opts: &JavaMemberOptions) -> JavaMember {
    if std::env::var("GROUP_MEMBER").as_deref() == Ok("java") {
        JavaMember::start(opts)
    } else {
        JavaMember::start_ours(opts)
    }
}

/// What each member owned, and how many lines it had printed, at a moment.
struct Mark(Vec<(Owned, usize)>);

impl Mark {
    fn of(members: &[&JavaMember]) -> Mark {
        Mark(
            members
                .iter()
                .map(|m| (m.owned(), m.events().len()))
                .collect(),
        )
    }
}

fn describe_all(members: &[&JavaMember]) -> String {
    members.iter().map(|m| m.describe()).collect()
}

/// Checks that the step since `before` (members joined, appended to `members`, or left)
/// moved partitions incrementally: each member gave up (revoked) only partitions it owned
/// before and not now, and got (assigned) only partitions it owns now and did not before,
/// each once; none was lost; a member whose partitions did not change heard nothing.
fn assert_incremental(step: &str, members: &[&JavaMember], before: &Mark) {
    for (i, m) in members.iter().enumerate() {
        let (had, seen) = before.0.get(i).cloned().unwrap_or_default();
        let now = m.owned();
        let gone: Owned = had.difference(&now).cloned().collect();
        let new: Owned = now.difference(&had).cloned().collect();
        let (mut revoked, mut assigned) = (Vec::new(), Vec::new());
        for (_, e) in &m.events()[seen..] {
            match e {
                Event::Revoked { partitions, .. } => revoked.extend(partitions.iter().cloned()),
                Event::Assigned { partitions, .. } => assigned.extend(partitions.iter().cloned()),
                Event::Lost { partitions, .. } if !partitions.is_empty() => panic!(
                    "{step}: {} lost {partitions:?}\n{}",
                    m.name(),
                    describe_all(members)
                ),
                _ => {}
            }
        }
        let fail = |what: &str| -> ! {
            panic!(
                "{step}: {} {what} (owned {had:?} before, {now:?} after; revoked {revoked:?}, \
                 assigned {assigned:?})\n{}",
                m.name(),
                describe_all(members)
            )
        };
        let revoked_set: Owned = revoked.iter().cloned().collect();
        let assigned_set: Owned = assigned.iter().cloned().collect();
        if revoked_set.len() != revoked.len() || assigned_set.len() != assigned.len() {
            fail("had a partition revoked or assigned twice");
        }
        if !revoked_set.is_subset(&gone) {
            fail("had a partition revoked that it kept or never owned");
        }
        if revoked_set != gone {
            fail("gave up a partition without on_partitions_revoked");
        }
        if assigned_set != new {
            fail("got partitions other than the new ones");
        }
    }
}

/// The generation (member epoch) of a member's last non-empty `assigned` line.
fn last_assigned_epoch(m: &JavaMember) -> Option<i32> {
    m.events().iter().rev().find_map(|(_, e)| match e {
        Event::Assigned {
            generation,
            partitions,
        } if !partitions.is_empty() => Some(*generation),
        _ => None,
    })
}

/// The group's assignor as the broker reports it (`kafka-consumer-groups.sh --describe
/// --state`, ASSIGNMENT-STRATEGY).
fn group_assignor(group: &str) -> String {
    let mut cmd = java("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand");
    cmd.args([
        "--bootstrap-server",
        bootstrap(),
        "--describe",
        "--state",
        "--group",
        group,
    ]);
    let out = cmd
        .output()
        .expect("running kafka-consumer-groups --describe");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "kafka-consumer-groups: {stdout}");
    stdout
        .lines()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&group)).then(|| w.get(3).map(|s| s.to_string()))?
        })
        .unwrap_or_else(|| panic!("no line for {group} in:\n{stdout}"))
}

// ----- scaling --------------------------------------------------------------------------

fn scale_1_3_1(assignor: &str) {
    const N: i32 = 12;
    let topic = unique_topic(&format!("kip848-scale-{assignor}"));
    let group = unique_topic(&format!("g-kip848-scale-{assignor}"));
    Produce::new(&topic, N, 120).run();
    let producer = BackgroundProducer::start(&topic, N, 120, 120, Duration::from_millis(200));
    let opts = options(&group, &topic, Some(assignor));

    let mut a = start(&opts);
    wait_stable(&[&a], &topic, N, true, "a owns all 12", LIMIT);
    wait_flowing("a alone", &[&a], &producer, N);

    let mark = Mark::of(&[&a]);
    let mut b = start(&opts);
    wait_stable(&[&a, &b], &topic, N, true, "a and b split 12", LIMIT);
    assert_incremental("b joins", &[&a, &b], &mark);
    wait_flowing("b joined", &[&a, &b], &producer, N);

    let mark = Mark::of(&[&a, &b]);
    let mut c = start(&opts);
    wait_stable(&[&a, &b, &c], &topic, N, true, "a, b and c split 12", LIMIT);
    assert_incremental("c joins", &[&a, &b, &c], &mark);
    for m in [&a, &b, &c] {
        assert_eq!(
            m.owned().len(),
            4,
            "{assignor} over 3 members: 4 each\n{}",
            describe_all(&[&a, &b, &c])
        );
    }
    wait_flowing("c joined", &[&a, &b, &c], &producer, N);
    assert_eq!(
        group_assignor(&group),
        assignor,
        "the broker runs the group with the assignor we asked for"
    );

    let mark = Mark::of(&[&a, &b, &c]);
    c.close();
    wait_stable(
        &[&a, &b],
        &topic,
        N,
        true,
        "a and b take c's partitions",
        LIMIT,
    );
    assert_incremental("c leaves", &[&a, &b, &c], &mark);
    wait_flowing("c left", &[&a, &b], &producer, N);

    let mark = Mark::of(&[&a, &b, &c]);
    b.close();
    wait_stable(&[&a], &topic, N, true, "a takes b's partitions", LIMIT);
    assert_incremental("b leaves", &[&a, &b, &c], &mark);
    wait_flowing("b left", &[&a], &producer, N);

    let total = producer.stop();
    let everyone = [&a, &b, &c];
    wait_consumed(&everyone, &topic, N, total, LIMIT);
    // Every owner committed in on_partitions_revoked before the partition moved, and
    // closed cleanly: nothing was read twice.
    assert_all_consumed(&everyone, &topic, N, total, true);
    assert_no_overlap(&everyone);
    a.close();
}

#[test]
fn scaling_1_3_1_with_uniform_moves_only_the_partitions_that_change_owner() {
    scale_1_3_1("uniform");
}

#[test]
fn scaling_1_3_1_with_range_moves_only_the_partitions_that_change_owner() {
    scale_1_3_1("range");
}

// ----- fencing ----------------------------------------------------------------------------

#[test]
fn a_member_stopped_past_the_session_timeout_is_fenced_loses_its_partitions_and_rejoins() {
    const N: i32 = 6;
    let topic = unique_topic("kip848-fenced");
    let group = unique_topic("g-kip848-fenced");
    Produce::new(&topic, N, 60).run();
    let producer = BackgroundProducer::start(&topic, N, 60, 60, Duration::from_millis(300));
    let opts = options(&group, &topic, None);
    let mut a = start(&opts);
    let mut b = start(&opts);
    wait_stable(&[&a, &b], &topic, N, true, "a and b split 6", LIMIT);
    let a_had = a.owned();
    let a_epoch = last_assigned_epoch(&a).expect("a was assigned partitions");
    let a_seen = a.events().len();

    // The whole process stops, its I/O thread too: no heartbeat for 10 s, past the 6 s
    // session. The broker fences a and gives b everything.
    a.freeze();
    let frozen = Instant::now();
    let mut b_took = None;
    while frozen.elapsed() < Duration::from_secs(10) {
        if b_took.is_none() && b.owned() == all_of(&topic, N) {
            b_took = Some(frozen.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    a.resume();
    let took = b_took.unwrap_or_else(|| {
        panic!(
            "b did not get a's partitions while a was stopped (10 s, session 6 s)\n{}{}",
            a.describe(),
            b.describe()
        )
    });
    assert!(
        took >= Duration::from_secs(4),
        "b got a's partitions {took:?} after a stopped, before a's session could expire\n{}",
        b.describe()
    );

    // a hears it was fenced: its partitions are lost (not revoked: it cannot commit),
    // then it rejoins (epoch 0) and gets partitions again, at a new epoch.
    a.wait_for(
        "a's partitions lost after it resumed",
        Duration::from_secs(30),
        |e| {
            e[a_seen..]
                .iter()
                .any(|(_, e)| matches!(e, Event::Lost { partitions, .. } if !partitions.is_empty()))
        },
    );
    let events = a.events();
    let lost: Owned = events[a_seen..]
        .iter()
        .find_map(|(_, e)| match e {
            Event::Lost { partitions, .. } if !partitions.is_empty() => {
                Some(partitions.iter().cloned().collect())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(lost, a_had, "a lost what it owned\n{}", a.describe());
    let revoked = events[a_seen..]
        .iter()
        .any(|(_, e)| matches!(e, Event::Revoked { partitions, .. } if !partitions.is_empty()));
    assert!(
        !revoked,
        "a fenced member's partitions are lost, not revoked\n{}",
        a.describe()
    );
    // (a believed it owned its partitions until it heard they were lost: no overlap check.)
    wait_settled(
        &[&a, &b],
        &topic,
        N,
        true,
        "a rejoined: a and b split 6",
        LIMIT,
    );
    let epoch = last_assigned_epoch(&a).unwrap();
    assert!(
        epoch > a_epoch,
        "a rejoined at a new epoch ({epoch}, was {a_epoch})\n{}",
        a.describe()
    );
    wait_flowing("a rejoined", &[&a, &b], &producer, N);
    let total = producer.stop();
    wait_consumed(&[&a, &b], &topic, N, total, LIMIT);
    // What a consumed before it stopped and did not commit comes again from b: at least
    // once.
    assert_all_consumed(&[&a, &b], &topic, N, total, false);
    a.close();
    b.close();
}

// ----- delivery under churn ---------------------------------------------------------------

#[test]
fn with_commits_in_on_partitions_revoked_every_record_is_consumed_while_members_come_go_and_crash()
{
    const N: i32 = 6;
    let topic = unique_topic("kip848-churn");
    let group = unique_topic("g-kip848-churn");
    Produce::new(&topic, N, 150).run();
    let producer = BackgroundProducer::start(&topic, N, 150, 150, Duration::from_millis(200));
    let opts = options(&group, &topic, None);
    let mut live = vec![start(&opts)];
    let mut closed = Vec::new();
    let mut killed = Vec::new();
    // Joins, clean leaves and crashes while the producer writes.
    for round in 0..5 {
        live.push(start(&opts));
        std::thread::sleep(Duration::from_secs(2));
        match round {
            1 | 4 => {
                let mut m = live.remove(0);
                m.close();
                closed.push(m);
            }
            2 => {
                let mut m = live.remove(1);
                m.kill();
                killed.push(m);
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let total = producer.stop();
    let live_refs: Vec<&JavaMember> = live.iter().collect();
    wait_stable(&live_refs, &topic, N, false, "the group settles", LIMIT);
    let everyone: Vec<&JavaMember> = live.iter().chain(&closed).chain(&killed).collect();
    wait_consumed(&everyone, &topic, N, total, LIMIT);
    assert_all_consumed(&everyone, &topic, N, total, false);
    assert_no_overlap(&everyone);
    // A record consumed twice was read by a member that crashed before committing it;
    // every other handover started at the offset its previous owner committed.
    let seen = consumed(&everyone, &topic);
    let crashed = consumed(&killed.iter().collect::<Vec<_>>(), &topic);
    let twice: Vec<(i32, i64)> = seen
        .iter()
        .filter(|(k, n)| **n > 1 && !crashed.contains_key(k))
        .map(|(k, _)| *k)
        .collect();
    assert!(
        twice.is_empty(),
        "{} records consumed twice though no crashed member read them: {:?}\n{}",
        twice.len(),
        &twice[..twice.len().min(20)],
        describe_all(&everyone)
    );
    for mut m in live {
        m.close();
    }
}

#[test]
fn a_member_that_does_not_poll_keeps_its_partitions_past_the_session_timeout_but_not_past_max_poll_interval(
) {
    const N: i32 = 4;
    let topic = unique_topic("kip848-sleep");
    let group = unique_topic("g-kip848-sleep");
    Produce::new(&topic, N, 40).run();
    let producer = BackgroundProducer::start(&topic, N, 40, 40, Duration::from_millis(300));
    let opts = JavaMemberOptions {
        max_poll_interval_ms: Some(9_000),
        ..options(&group, &topic, None)
    };
    let mut a = start(&opts);
    let mut b = start(&opts);
    wait_stable(&[&a, &b], &topic, N, true, "a and b split 4", LIMIT);
    let before = a.owned();
    let mark = Mark::of(&[&a, &b]);

    // 7 s without polling: past the 6 s session, but the I/O thread heartbeats.
    a.send("pause-poll 7000");
    std::thread::sleep(Duration::from_millis(7500));
    assert_incremental("a does not poll for 7 s", &[&a, &b], &mark);
    assert_eq!(a.owned(), before, "a kept its partitions\n{}", a.describe());
    wait_flowing("a polls again", &[&a, &b], &producer, N);

    // 11 s without polling: past max.poll.interval.ms (9 s). a leaves the group, b takes
    // everything; a's next poll reports its partitions lost, then a rejoins.
    let seen = a.events().len();
    a.send("pause-poll 11000");
    b.wait_owned("b takes a's partitions", Duration::from_secs(30), |o| {
        *o == all_of(&topic, N)
    });
    a.wait_for(
        "a loses its partitions on its next poll",
        Duration::from_secs(30),
        |e| {
            e[seen..]
                .iter()
                .any(|(_, e)| matches!(e, Event::Lost { partitions, .. } if !partitions.is_empty()))
        },
    );
    // (a believed it owned its partitions until its next poll: no overlap check.)
    wait_settled(
        &[&a, &b],
        &topic,
        N,
        true,
        "a rejoined: a and b split 4",
        LIMIT,
    );
    wait_flowing("a rejoined", &[&a, &b], &producer, N);
    let total = producer.stop();
    wait_consumed(&[&a, &b], &topic, N, total, LIMIT);
    assert_all_consumed(&[&a, &b], &topic, N, total, false);
    b.close();
    a.close();
}

// ----- subscription and membership -------------------------------------------------------

#[test]
fn a_regex_subscription_picks_up_a_topic_created_after_subscribing() {
    let prefix = unique_topic("kip848-regex");
    let group = unique_topic("g-kip848-regex");
    let t1 = format!("{prefix}-a");
    Produce::new(&t1, 2, 10).run();
    // RE2J, matched by the broker against whole names.
    let opts = JavaMemberOptions {
        topics: Vec::new(),
        pattern: Some(format!("{prefix}-.*")),
        ..options(&group, &t1, None)
    };
    let mut m = start(&opts);
    m.wait_owned("the member gets the first topic", LIMIT, |o| {
        *o == all_of(&t1, 2)
    });
    wait_consumed(&[&m], &t1, 2, 10, LIMIT);
    // A topic whose name only contains a match is not subscribed (full match); the broker
    // re-resolves the regex when topics appear, at most every few seconds per group.
    let other = format!("x{prefix}-c");
    Produce::new(&other, 1, 5).run();
    let t2 = format!("{prefix}-b");
    Produce::new(&t2, 3, 30).run();
    let created = Instant::now();
    let want: Owned = &all_of(&t1, 2) | &all_of(&t2, 3);
    m.wait_owned(
        "the member gets the new topic",
        Duration::from_secs(60),
        |o| *o == want,
    );
    let took = created.elapsed();
    wait_consumed(&[&m], &t2, 3, 30, LIMIT);
    assert!(
        m.records().iter().all(|((t, _), _, _)| *t != other),
        "records of {other} arrived, which the pattern does not match\n{}",
        m.describe()
    );
    assert!(
        !m.events().iter().any(|(_, e)| matches!(
            e,
            Event::Assigned { partitions, .. } if partitions.iter().any(|(t, _)| *t == other)
        )),
        "{other} was assigned, which the pattern does not match\n{}",
        m.describe()
    );
    eprintln!("the new topic was assigned {took:?} after it was created");
    m.close();
}

#[test]
fn a_static_member_restarted_within_the_session_timeout_gets_its_partitions_back_without_a_reshuffle(
) {
    const N: i32 = 6;
    let topic = unique_topic("kip848-static");
    let group = unique_topic("g-kip848-static");
    Produce::new(&topic, N, 600).run();
    let with_id = |id: &str| JavaMemberOptions {
        instance_id: Some(id.into()),
        ..options(&group, &topic, None)
    };
    let mut a = start(&with_id("a"));
    let mut b = start(&with_id("b"));
    let mut c = start(&with_id("c"));
    wait_stable(&[&a, &b, &c], &topic, N, true, "a, b and c split 6", LIMIT);
    wait_consumed(&[&a, &b, &c], &topic, N, 600, LIMIT);
    let a_had = a.owned();
    let others = Mark::of(&[&b, &c]);

    // A static member leaves with epoch -2 on close: the broker keeps its partitions for
    // it for the session timeout (6 s).
    let closing = Instant::now();
    a.close();
    let mut a2 = start(&with_id("a"));
    let got = a2.wait_owned("the restarted a gets its partitions", LIMIT, |o| {
        !o.is_empty()
    });
    let back = closing.elapsed();
    assert!(
        back < Duration::from_secs(6),
        "the restart took {back:?}, longer than the session timeout: the test proves nothing"
    );
    assert_eq!(
        got,
        a_had,
        "the same partitions come back\n{}",
        a2.describe()
    );
    // The others heard nothing, then or later.
    std::thread::sleep(Duration::from_secs(2));
    for (i, m) in [&b, &c].iter().enumerate() {
        let heard: Vec<String> = m.events()[others.0[i].1..]
            .iter()
            .filter(|(_, e)| {
                matches!(
                    e,
                    Event::Assigned { .. } | Event::Revoked { .. } | Event::Lost { .. }
                )
            })
            .map(|(_, e)| e.to_string())
            .collect();
        assert!(
            heard.is_empty(),
            "{} saw {heard:?} while a restarted\n{}",
            m.name(),
            describe_all(&[&a, &a2, &b, &c])
        );
        assert_eq!(m.owned(), others.0[i].0);
    }
    // a committed in on_partitions_revoked as it closed; a2 starts exactly there.
    Produce {
        start: 600,
        ..Produce::new(&topic, N, 60)
    }
    .run();
    wait_consumed(&[&a, &a2, &b, &c], &topic, N, 660, LIMIT);
    assert_all_consumed(&[&a, &a2, &b, &c], &topic, N, 660, true);
    a2.close();
    b.close();
    c.close();
}

// ----- with the Java client ---------------------------------------------------------------

/// Joins the members one by one (waiting for the group to settle and checking each step
/// was incremental and records flow), then closes the first `leave` of them one by one;
/// finally checks every record was consumed exactly once. Returns the members (those
/// still in the group, still running).
fn join_then_leave(
    topic: &str,
    n: i32,
    producer: BackgroundProducer,
    starts: Vec<Box<dyn Fn() -> JavaMember>>,
    leave: usize,
) -> Vec<JavaMember> {
    let mut members: Vec<JavaMember> = Vec::new();
    for (i, s) in starts.iter().enumerate() {
        let before = Mark::of(&members.iter().collect::<Vec<_>>());
        let t = Instant::now();
        members.push(s());
        eprintln!("member {i} started after {:?}", t.elapsed());
        let refs: Vec<&JavaMember> = members.iter().collect();
        wait_stable(
            &refs,
            topic,
            n,
            true,
            &format!("{} members split", i + 1),
            LIMIT,
        );
        eprintln!("member {i} joined after {:?}", t.elapsed());
        assert_incremental(&format!("member {i} joins"), &refs, &before);
        wait_flowing(&format!("member {i} joined"), &refs, &producer, n);
        eprintln!("member {i}: records flow after {:?}", t.elapsed());
    }
    for i in 0..leave {
        let before = Mark::of(&members.iter().collect::<Vec<_>>());
        let t = Instant::now();
        members[i].close();
        eprintln!("member {i} closed after {:?}", t.elapsed());
        let refs: Vec<&JavaMember> = members.iter().collect();
        wait_stable(
            &refs[i + 1..],
            topic,
            n,
            true,
            &format!("member {i} left"),
            LIMIT,
        );
        assert_incremental(&format!("member {i} leaves"), &refs, &before);
        eprintln!("member {i}'s partitions moved after {:?}", t.elapsed());
        wait_flowing(&format!("member {i} left"), &refs[i + 1..], &producer, n);
    }
    let total = producer.stop();
    let refs: Vec<&JavaMember> = members.iter().collect();
    wait_consumed(&refs, topic, n, total, LIMIT);
    assert_all_consumed(&refs, topic, n, total, true);
    assert_no_overlap(&refs);
    members
}

#[test]
fn our_members_and_java_consumer_protocol_members_share_a_group() {
    const N: i32 = 6;
    let topic = unique_topic("kip848-interop");
    let group = unique_topic("g-kip848-interop");
    Produce::new(&topic, N, 60).run();
    let producer = BackgroundProducer::start(&topic, N, 60, 60, Duration::from_millis(200));
    let opts = options(&group, &topic, None);
    let (o1, j1, o2) = (opts.clone(), opts.clone(), opts.clone());
    // Java first, ours, Java, ours; then the first two leave.
    let mut members = join_then_leave(
        &topic,
        N,
        producer,
        vec![
            Box::new(move || JavaMember::start(&j1)),
            Box::new(move || JavaMember::start_ours(&o1)),
            Box::new(move || JavaMember::start(&opts)),
            Box::new(move || JavaMember::start_ours(&o2)),
        ],
        2,
    );
    for m in &mut members[2..] {
        m.close();
    }
}

#[test]
fn our_consumer_protocol_members_and_java_classic_members_share_a_group() {
    // Ours create the group (a consumer group); the Java classic members join it with
    // JoinGroup/SyncGroup and the broker computes their assignment too.
    const N: i32 = 6;
    let topic = unique_topic("kip848-mixed");
    let group = unique_topic("g-kip848-mixed");
    Produce::new(&topic, N, 60).run();
    let producer = BackgroundProducer::start(&topic, N, 60, 60, Duration::from_millis(200));
    let ours = options(&group, &topic, None);
    let classic = JavaMemberOptions {
        assignor: Some("cooperative-sticky".into()),
        session_timeout_ms: Some(6_000),
        heartbeat_ms: Some(500),
        ..JavaMemberOptions::new(&group, &[&topic])
    };
    let (o1, o2, j1) = (ours.clone(), ours, classic.clone());
    let mut members = join_then_leave(
        &topic,
        N,
        producer,
        vec![
            Box::new(move || JavaMember::start_ours(&o1)),
            Box::new(move || JavaMember::start(&j1)),
            Box::new(move || JavaMember::start_ours(&o2)),
            Box::new(move || JavaMember::start(&classic)),
        ],
        2,
    );
    assert_eq!(
        group_type(&group).as_deref(),
        Some("Consumer"),
        "a consumer group while one of our members is in it"
    );
    for m in &mut members[2..] {
        m.close();
    }
}

// ----- errors ----------------------------------------------------------------------------

#[test]
fn an_assignor_the_broker_does_not_have_is_an_error_naming_it() {
    let topic = unique_topic("kip848-badassignor");
    let group = unique_topic("g-kip848-badassignor");
    Produce::new(&topic, 1, 1).run();
    let mut m = JavaMember::launch_ours(&options(&group, &topic, Some("nonesuch")));
    let status = m.wait_exit(LIMIT);
    let errors: Vec<String> = m
        .events()
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Error(msg) => Some(msg.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(status.code(), Some(1), "exit 1\n{}", m.describe());
    assert!(
        errors.len() == 1 && errors[0].contains("nonesuch"),
        "one error line naming the assignor\n{}",
        m.describe()
    );
    assert!(
        !m.events()
            .iter()
            .any(|(_, e)| matches!(e, Event::Assigned { .. })),
        "no partitions assigned\n{}",
        m.describe()
    );
}

#[test]
fn classic_only_settings_are_config_errors_under_the_consumer_protocol() {
    for (key, value) in [
        ("session.timeout.ms", "6000"),
        ("heartbeat.interval.ms", "500"),
        ("partition.assignment.strategy", "range"),
    ] {
        let result = (|| -> kafka_consumer::Result<()> {
            let cfg = kafka_consumer::ConsumerConfig::new(bootstrap())
                .set("group.id", "g")?
                .set("group.protocol", "consumer")?
                .set(key, value)?;
            kafka_consumer::Consumer::new(cfg).map(|_| ())
        })();
        let e = result.expect_err(key);
        assert_eq!(e.kind(), kafka_consumer::ErrorKind::Config, "{key}: {e}");
        assert!(e.to_string().contains(key), "{key}: {e}");
    }
    // Without them it is fine, and the broker's settings apply.
    let cfg = (|| {
        kafka_consumer::ConsumerConfig::new(bootstrap())
            .set("group.id", "g")?
            .set("group.protocol", "consumer")?
            .set("group.remote.assignor", "range")
    })()
    .unwrap();
    kafka_consumer::Consumer::new(cfg).expect("a consumer-protocol consumer");
}
