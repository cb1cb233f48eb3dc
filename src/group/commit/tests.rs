//! Deterministic tests of commits and committed-offset lookups (with coordinator
//! discovery) against the simulated brokers of `crate::sim`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::*;
use crate::backoff::XorShift;
use crate::cluster::Cluster;
use crate::link::{Lane, Versions};
use crate::protocol::api::offset_fetch::OffsetFetchResponse;
use crate::protocol::api::Api;
use crate::sim::{
    self, group_route, known_cluster, malformed, ms, request, response, tp, Net, SimBroker,
};
use crate::types::{ApiVersion, GenerationId, MemberEpoch, MemberId, RequestId};

/// Commit settings: `request.timeout.ms` 30 s, the tests' retry backoff, and no
/// `require_stable`.
fn commit_config() -> CommitConfig {
    CommitConfig {
        request_timeout: Duration::from_secs(30),
        retry_backoff: sim::retry_backoff(),
        require_stable: false,
    }
}

/// Commits, the coordinator, links, a cluster that knows brokers 1 to 3, and the brokers
/// (the coordinator of group `g` is broker 2).
struct Rig {
    net: Net,
    cluster: Cluster,
    coordinator: Coordinator,
    commits: Commits,
    broker: SimBroker,
    /// FindCoordinator requests are held here instead of answered at once.
    hold_find: bool,
    held_find: Vec<Transmit>,
    finds: usize,
}

impl Rig {
    fn new() -> Rig {
        Rig::with(commit_config())
    }

    fn with(cfg: CommitConfig) -> Rig {
        let mut net = Net::new();
        let mut broker = SimBroker::new(&[1, 2, 3]).topic("t", &[1, 2, 3], 100);
        broker.coordinator = 2;
        let cluster = known_cluster(&mut net, &broker, &["t"]);
        Rig {
            net,
            cluster,
            coordinator: Coordinator::new(
                "g",
                sim::retry_backoff(),
                Duration::from_secs(30),
                sim::jitter(3),
            ),
            commits: Commits::new(cfg, sim::jitter(4)),
            broker,
            hold_find: false,
            held_find: Vec::new(),
            finds: 0,
        }
    }

    fn now(&self) -> Instant {
        self.net.now()
    }

    fn commit(&mut self, id: u64, offsets: &[(TopicPartition, i64)], timeout: Duration) {
        let offsets = offsets
            .iter()
            .map(|(tp, o)| {
                (
                    tp.clone(),
                    Committed {
                        offset: *o,
                        leader_epoch: LeaderEpoch(5),
                        metadata: Some(format!("c{id}")),
                    },
                )
            })
            .collect();
        let deadline = self.now() + timeout;
        self.commits.commit(CallId(id), offsets, deadline);
    }

    /// One round of the loop: timers, then the commits' requests (FindCoordinator and
    /// Metadata are answered at once unless held).
    fn round(&mut self) -> Vec<Transmit> {
        self.timers();
        self.drive()
    }

    /// Deadlines.
    fn timers(&mut self) {
        let now = self.now();
        self.commits.handle_timeout(now, &self.coordinator);
    }

    /// What the components hand out now.
    fn drive(&mut self) -> Vec<Transmit> {
        let now = self.now();
        self.net.links.begin_round();
        self.coordinator.begin_round();
        let mut out = Vec::new();
        while let Some(t) =
            self.commits
                .poll_transmit(now, &mut self.net.links, &mut self.coordinator)
        {
            self.net.sent(&t);
            out.push(t);
            assert!(out.len() < 100, "requests without end in one round");
        }
        if let Some(t) = self
            .coordinator
            .poll_transmit(now, &mut self.net.links, &mut self.cluster)
        {
            self.net.sent(&t);
            self.finds += 1;
            if self.hold_find {
                self.held_find.push(t);
            } else {
                self.answer_find(&t);
            }
        }
        while let Some(t) = self.cluster.poll_transmit(now, &mut self.net.links) {
            self.net.sent(&t);
            let body = self.broker.answer(&t);
            self.net.answered(t.route);
            self.cluster
                .handle_response(t.tag.id, t.version, &body, now, &mut self.net.links);
        }
        for (route, why) in self.net.links.take_close_requests() {
            self.net.close(route, &why);
        }
        self.net.connect_wanted();
        out
    }

    fn answer_find(&mut self, t: &Transmit) {
        let body = self.broker.answer(t);
        let now = self.now();
        self.net.answered(t.route);
        self.coordinator.handle_response(
            t.tag.id,
            t.version,
            &body,
            now,
            &mut self.net.links,
            &mut self.cluster,
        );
    }

    /// Rounds until something goes out (discovery, links), at most six.
    fn sends(&mut self) -> Vec<Transmit> {
        for _ in 0..6 {
            let t = self.round();
            if !t.is_empty() {
                return t;
            }
        }
        Vec::new()
    }

    fn send(&mut self) -> Transmit {
        let mut ts = self.sends();
        assert_eq!(ts.len(), 1, "{ts:?}");
        ts.remove(0)
    }

    fn deliver(&mut self, t: &Transmit, body: &[u8]) {
        let now = self.now();
        self.net.answered(t.route);
        self.commits.handle_response(
            t.tag.id,
            t.version,
            body,
            now,
            &mut self.net.links,
            &mut self.coordinator,
        );
    }

    fn answer(&mut self, t: &Transmit) {
        let body = self.broker.answer(t);
        self.deliver(t, &body);
    }

    fn answer_error(&mut self, t: &Transmit, code: ErrorCode) {
        let body = self.broker.answer_error(t, code);
        self.deliver(t, &body);
    }

    /// Answers the OffsetFetch `t` with group-level error `top` and `code(tp)` per
    /// partition.
    fn answer_fetch(
        &mut self,
        t: &Transmit,
        top: ErrorCode,
        code: impl Fn(&TopicPartition) -> i16,
    ) {
        let resp = self.broker.offset_fetch(t, top.code(), code);
        self.deliver(t, &response::<OffsetFetchRequest>(t, &resp));
    }

    fn fail(&mut self, t: &Transmit, f: Failure) {
        let now = self.now();
        self.net.close(t.route, "lost");
        self.commits
            .handle_failure(t.tag.id, &f, now, &mut self.coordinator);
    }

    fn events(&mut self) -> Vec<CommitEvent> {
        std::iter::from_fn(|| self.commits.poll_event()).collect()
    }

    fn timer(&self) -> Option<Instant> {
        let now = self.now();
        [
            self.commits.poll_timeout(now),
            self.coordinator.poll_timeout(now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn at(&mut self, t: Instant) {
        self.net.clock.advance_to(t);
    }
}

fn committed_ids(ev: &[CommitEvent]) -> Vec<(u64, std::result::Result<(), ErrorKind>)> {
    ev.iter()
        .filter_map(|e| match e {
            CommitEvent::Committed { id, result } => {
                Some((id.0, result.as_ref().map(|_| ()).map_err(|e| e.kind())))
            }
            _ => None,
        })
        .collect()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The commit id a request carries (in its metadata, `c<id>`).
fn commit_id(t: &Transmit) -> u64 {
    let offsets = SimBroker::commit_request(t);
    let m = offsets[0].2.clone().expect("metadata");
    m[1..].parse().unwrap()
}

// ----- commits ------------------------------------------------------------------------------

#[test]
fn a_commit_finds_the_coordinator_then_goes_out_on_its_group_link() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 42), (tp("t", 1), 7)], secs(30));
    let t = r.send();
    assert_eq!(r.finds, 1);
    assert_eq!(t.route, group_route(2));
    assert_eq!(t.route.lane, Lane::Group);
    let req = request::<OffsetCommitRequest>(&t);
    assert_eq!(req.group_id, "g");
    assert_eq!(
        req.generation_id_or_member_epoch, -1,
        "from outside the group"
    );
    assert_eq!(req.member_id, "");
    assert_eq!(
        SimBroker::commit_request(&t),
        vec![
            (tp("t", 0), 42, Some("c1".to_owned())),
            (tp("t", 1), 7, Some("c1".to_owned()))
        ]
    );
    assert_eq!(req.topics[0].partitions[0].committed_leader_epoch, 5);
    r.answer(&t);
    assert_eq!(committed_ids(&r.events()), vec![(1, Ok(()))]);
    assert_eq!(r.broker.committed[&tp("t", 0)], 42);
    assert!(r.round().is_empty());
    assert_eq!(r.timer(), None, "nothing left to wake for");
}

#[test]
fn an_empty_commit_succeeds_at_once() {
    let mut r = Rig::new();
    r.commit(1, &[], secs(1));
    assert_eq!(committed_ids(&r.events()), vec![(1, Ok(()))]);
    assert!(r.sends().is_empty());
    assert_eq!(r.finds, 0);
}

#[test]
fn commits_go_out_one_at_a_time_in_the_order_they_were_made() {
    let mut r = Rig::new();
    for id in 1..=3 {
        r.commit(id, &[(tp("t", 0), 10 * id as i64)], secs(30));
    }
    let mut order = Vec::new();
    for _ in 0..3 {
        let ts = r.sends();
        assert_eq!(ts.len(), 1, "one commit at a time: {ts:?}");
        order.push(commit_id(&ts[0]));
        assert!(r.round().is_empty(), "nothing more while it is in flight");
        r.answer(&ts[0]);
    }
    assert_eq!(order, vec![1, 2, 3]);
    assert_eq!(
        committed_ids(&r.events()),
        vec![(1, Ok(())), (2, Ok(())), (3, Ok(()))]
    );
    assert_eq!(
        r.broker.committed[&tp("t", 0)],
        30,
        "the newest commit last"
    );
}

#[test]
fn a_later_commit_waits_while_an_earlier_one_backs_off() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10)], secs(30));
    r.commit(2, &[(tp("t", 0), 20)], secs(30));
    let t = r.send();
    assert_eq!(commit_id(&t), 1);
    let failed_at = r.now();
    r.answer_error(&t, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
    assert!(r.events().is_empty(), "retriable: retried, not reported");
    let again = r.timer().expect("a backoff");
    assert!(again >= failed_at + ms(80) && again <= failed_at + ms(120));
    r.at(again - ms(1));
    assert!(r.round().is_empty(), "commit 2 must not overtake commit 1");
    r.at(again);
    let t = r.send();
    assert_eq!(commit_id(&t), 1, "the failed commit is retried first");
    r.answer(&t);
    let t = r.send();
    assert_eq!(commit_id(&t), 2);
    r.answer(&t);
    assert_eq!(committed_ids(&r.events()), vec![(1, Ok(())), (2, Ok(()))]);
    assert_eq!(r.broker.committed[&tp("t", 0)], 20);
}

#[test]
fn retriable_errors_are_retried_growing_until_the_deadline_then_time_out_saying_why() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10)], secs(3));
    let deadline = r.now() + secs(3);
    let mut delays = Vec::new();
    loop {
        let ts = r.sends();
        if ts.is_empty() {
            break;
        }
        let failed_at = r.now();
        r.answer_error(&ts[0], ErrorCode::REQUEST_TIMED_OUT);
        assert!(r.events().is_empty(), "retriable");
        let next = r.timer().expect("a timer");
        assert!(next <= deadline, "the deadline is a timer");
        if next < deadline {
            delays.push(next - failed_at);
        }
        r.at(next);
    }
    assert!(delays.len() >= 3, "{delays:?}");
    assert!(delays.windows(2).all(|w| w[1] > w[0]), "{delays:?}");
    let ev = r.events();
    let [CommitEvent::Committed {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(e.to_string().contains("REQUEST_TIMED_OUT"), "says why: {e}");
    assert_eq!(r.timer(), None);
}

#[test]
fn a_commit_on_the_wire_at_its_deadline_times_out_for_its_caller_and_still_goes_first() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10)], secs(2));
    let t = r.send();
    r.commit(2, &[(tp("t", 0), 20)], secs(30));
    r.at(r.now() + secs(5));
    assert!(
        r.round().is_empty(),
        "the later commit waits behind the one still on the wire"
    );
    let ev = r.events();
    let [CommitEvent::Committed {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        e.kind(),
        ErrorKind::Timeout,
        "the caller hears at its deadline"
    );
    r.answer(&t);
    assert!(
        r.events().is_empty(),
        "the first commit's caller was already told"
    );
    let t2 = r.send();
    r.answer(&t2);
    assert_eq!(committed_ids(&r.events()), vec![(2, Ok(()))]);
}

#[test]
fn a_member_s_commit_refused_by_a_rebalance_or_a_lost_membership_says_what_happened() {
    for (code, says) in [
        (ErrorCode::REBALANCE_IN_PROGRESS, "is rebalancing"),
        // A newer generation: the member is still in the group, which rebalanced since.
        (
            ErrorCode::ILLEGAL_GENERATION,
            "begun another rebalance, since generation 4",
        ),
        (ErrorCode::UNKNOWN_MEMBER_ID, "no longer a member"),
    ] {
        let mut r = Rig::new();
        r.commits.set_identity(Identity::classic(
            GenerationId(4),
            MemberId::new("m-1"),
            None,
        ));
        r.commit(1, &[(tp("t", 0), 10)], secs(30));
        let t = r.send();
        let req = request::<OffsetCommitRequest>(&t);
        assert_eq!(
            (req.generation_id_or_member_epoch, req.member_id.as_str()),
            (4, "m-1"),
            "the commit speaks for the member"
        );
        r.answer_error(&t, code);
        let ev = r.events();
        let [CommitEvent::Committed {
            id: CallId(1),
            result: Err(e),
        }] = &ev[..]
        else {
            panic!("{ev:?}")
        };
        assert_eq!(e.kind(), ErrorKind::CommitFailed, "{code}");
        let msg = e.to_string();
        assert!(
            msg.contains(says) && msg.contains("group g"),
            "{code}: {msg}"
        );
        assert!(!msg.contains("manually assigned"), "{msg}");
        if code == ErrorCode::ILLEGAL_GENERATION {
            assert!(
                msg.contains("still a member") && !msg.contains("no longer a member"),
                "{msg}"
            );
        }
    }
}

#[test]
fn a_commit_refused_because_the_group_has_members_fails_with_commit_failed() {
    for code in [
        ErrorCode::UNKNOWN_MEMBER_ID,
        ErrorCode::ILLEGAL_GENERATION,
        ErrorCode::REBALANCE_IN_PROGRESS,
    ] {
        let mut r = Rig::new();
        r.commit(1, &[(tp("t", 0), 10)], secs(30));
        r.commit(2, &[(tp("t", 1), 10)], secs(30));
        let t = r.send();
        r.answer_error(&t, code);
        let ev = r.events();
        let [CommitEvent::Committed {
            id: CallId(1),
            result: Err(e),
        }] = &ev[..]
        else {
            panic!("{ev:?}")
        };
        assert_eq!(e.kind(), ErrorKind::CommitFailed, "{code}");
        assert_eq!(e.kafka_code(), Some(code.code()));
        assert!(e.to_string().contains("group g"), "{e}");
        assert!(!r.broker.committed.contains_key(&tp("t", 0)));
        // The next commit is not held up.
        let t = r.send();
        assert_eq!(commit_id(&t), 2);
    }
}

#[test]
fn other_fatal_commit_errors_name_the_partition() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10), (tp("t", 1), 11)], secs(30));
    let t = r.send();
    let resp = r
        .broker
        .offset_commit(&t, |tp| if tp.partition() == 1 { 12 } else { 0 });
    r.deliver(&t, &response::<OffsetCommitRequest>(&t, &resp));
    let ev = r.events();
    let [CommitEvent::Committed {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Broker);
    assert_eq!(e.partition(), Some(&tp("t", 1)));
    assert!(e.to_string().contains("offset.metadata.max.bytes"), "{e}");
}

#[test]
fn a_partition_missing_from_the_commit_answer_fails_the_commit() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10), (tp("t", 1), 11)], secs(30));
    let t = r.send();
    let mut resp = r.broker.offset_commit(&t, |_| 0);
    resp.topics[0].partitions.pop();
    r.deliver(&t, &response::<OffsetCommitRequest>(&t, &resp));
    let ev = r.events();
    let [CommitEvent::Committed {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.partition(), Some(&tp("t", 1)));
}

#[test]
fn not_coordinator_finds_the_coordinator_again_and_the_commit_follows_it() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10)], secs(30));
    let t = r.send();
    r.broker.coordinator = 3;
    r.answer_error(&t, ErrorCode::NOT_COORDINATOR);
    assert!(r.events().is_empty());
    assert_eq!(r.coordinator.node(), None, "marked unknown");
    let again = r.timer().unwrap();
    r.at(again + secs(1));
    let t = r.send();
    assert_eq!(r.finds, 2, "found again");
    assert_eq!(t.route, group_route(3));
    r.answer(&t);
    assert_eq!(committed_ids(&r.events()), vec![(1, Ok(()))]);
}

#[test]
fn a_lost_link_retries_the_commit_and_finds_the_coordinator_again() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10)], secs(30));
    let t = r.send();
    r.fail(&t, Failure::Disconnected("reset".into()));
    assert!(r.events().is_empty());
    assert_eq!(r.coordinator.node(), None);
    r.at(r.timer().unwrap() + secs(1));
    let t = r.send();
    assert_eq!(commit_id(&t), 1);
    r.answer(&t);
    assert_eq!(committed_ids(&r.events()), vec![(1, Ok(()))]);
}

#[test]
fn a_malformed_commit_answer_closes_the_link_and_retries() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10)], secs(30));
    let t = r.send();
    r.deliver(&t, &malformed());
    assert!(r.events().is_empty());
    assert_eq!(r.net.links.take_close_requests().len(), 1);
    r.net.close(t.route, "malformed");
    r.at(r.timer().unwrap() + secs(1));
    let t = r.send();
    r.answer(&t);
    assert_eq!(committed_ids(&r.events()), vec![(1, Ok(()))]);
}

#[test]
fn a_commit_waiting_for_an_unfindable_coordinator_times_out_with_the_reason() {
    let mut r = Rig::new();
    r.hold_find = true;
    r.commit(1, &[(tp("t", 0), 10)], secs(2));
    let deadline = r.now() + secs(2);
    while r.now() < deadline {
        assert!(r.round().is_empty());
        for t in std::mem::take(&mut r.held_find) {
            let body = r
                .broker
                .answer_error(&t, ErrorCode::GROUP_AUTHORIZATION_FAILED);
            r.net.answered(t.route);
            let now = r.now();
            r.coordinator.handle_response(
                t.tag.id,
                t.version,
                &body,
                now,
                &mut r.net.links,
                &mut r.cluster,
            );
        }
        let next = r.timer().expect("a timer");
        r.at(next.min(deadline));
    }
    r.round();
    let ev = r.events();
    let [CommitEvent::Committed {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(e.to_string().contains("GROUP_AUTHORIZATION_FAILED"), "{e}");
}

#[test]
fn a_broker_without_offset_commit_fails_the_commit() {
    let mut r = Rig::new();
    r.net
        .links
        .on_ready(group_route(2), Versions::new([(9, 1, 9), (10, 0, 6)]));
    r.commit(1, &[(tp("t", 0), 10)], secs(30));
    for _ in 0..4 {
        assert!(r.round().is_empty());
    }
    let ev = r.events();
    let [CommitEvent::Committed {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Unsupported);
}

#[test]
fn a_throttled_commit_answer_throttles_the_group_link() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10)], secs(30));
    let t = r.send();
    let mut resp = r.broker.offset_commit(&t, |_| 0);
    resp.throttle_time_ms = 300;
    r.deliver(&t, &response::<OffsetCommitRequest>(&t, &resp));
    r.commit(2, &[(tp("t", 0), 20)], secs(30));
    assert!(r.round().is_empty(), "throttled");
    r.at(r.now() + ms(300));
    assert_eq!(r.round().len(), 1);
}

// ----- committed offsets ------------------------------------------------------------------------

/// A committed-offsets answer as the tests compare it: offsets by partition, or the kind
/// of error.
type OffsetsSeen = std::result::Result<BTreeMap<TopicPartition, Option<i64>>, ErrorKind>;

fn offsets_of(ev: &[CommitEvent]) -> Vec<(u64, OffsetsSeen)> {
    ev.iter()
        .filter_map(|e| match e {
            CommitEvent::Offsets { id, result } => Some((
                id.0,
                result
                    .as_ref()
                    .map(|m| {
                        m.iter()
                            .map(|(tp, c)| (tp.clone(), c.as_ref().map(|c| c.offset)))
                            .collect()
                    })
                    .map_err(|e| e.kind()),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn committed_offsets_are_read_from_the_coordinator() {
    for v in [1, 5, 7, 8, 9] {
        let mut r = Rig::with(CommitConfig {
            require_stable: true,
            ..commit_config()
        });
        r.net
            .links
            .on_ready(group_route(2), Versions::new([(9, 1, v), (8, 2, 9)]));
        r.broker.committed.insert(tp("t", 0), 42);
        r.commits
            .fetch(CallId(7), vec![tp("t", 0), tp("t", 1)], r.now() + secs(30));
        let t = r.send();
        assert_eq!((t.route, t.version), (group_route(2), ApiVersion(v)));
        let mut asked = r.broker.offset_fetch_request(&t);
        asked.sort();
        assert_eq!(asked, vec![tp("t", 0), tp("t", 1)]);
        let req = request::<OffsetFetchRequest>(&t);
        assert_eq!(
            req.require_stable,
            v >= 7,
            "v{v}: read_committed asks for stable offsets"
        );
        r.answer(&t);
        let want: BTreeMap<TopicPartition, Option<i64>> =
            [(tp("t", 0), Some(42)), (tp("t", 1), None)]
                .into_iter()
                .collect();
        assert_eq!(offsets_of(&r.events()), vec![(7, Ok(want))], "v{v}");
    }
}

#[test]
fn an_empty_committed_lookup_answers_at_once() {
    let mut r = Rig::new();
    r.commits.fetch(CallId(1), vec![], r.now() + secs(1));
    assert_eq!(offsets_of(&r.events()), vec![(1, Ok(BTreeMap::new()))]);
}

#[test]
fn committed_lookup_retries_retriable_and_unstable_answers_and_fails_on_fatal_ones() {
    let mut r = Rig::new();
    r.broker.committed.insert(tp("t", 0), 42);
    r.commits
        .fetch(CallId(1), vec![tp("t", 0)], r.now() + secs(30));
    let t = r.send();
    r.answer_fetch(&t, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, |_| 0);
    assert!(r.events().is_empty());
    r.at(r.timer().unwrap());
    let t = r.send();
    r.answer_fetch(&t, ErrorCode::None, |_| {
        ErrorCode::UNSTABLE_OFFSET_COMMIT.code()
    });
    assert!(
        r.events().is_empty(),
        "a pending transactional commit: ask again"
    );
    r.at(r.timer().unwrap());
    let t = r.send();
    r.answer_fetch(&t, ErrorCode::NOT_COORDINATOR, |_| 0);
    assert!(r.events().is_empty());
    assert_eq!(r.coordinator.node(), None, "marked unknown");
    r.at(r.timer().unwrap() + secs(1));
    let t = r.send();
    r.answer_fetch(&t, ErrorCode::GROUP_AUTHORIZATION_FAILED, |_| 0);
    let ev = offsets_of(&r.events());
    assert_eq!(ev, vec![(1, Err(ErrorKind::Broker))]);
}

#[test]
fn a_partition_missing_from_the_committed_answer_is_asked_again() {
    let mut r = Rig::new();
    r.commits
        .fetch(CallId(1), vec![tp("t", 0), tp("t", 1)], r.now() + secs(30));
    let t = r.send();
    let mut resp = r.broker.offset_fetch(&t, 0, |_| 0);
    resp.groups[0].topics[0].partitions.pop();
    r.deliver(&t, &response::<OffsetFetchRequest>(&t, &resp));
    assert!(r.events().is_empty());
    r.at(r.timer().unwrap());
    let t = r.send();
    r.answer(&t);
    assert_eq!(offsets_of(&r.events()).len(), 1);
}

#[test]
fn a_committed_lookup_times_out_at_its_deadline() {
    let mut r = Rig::new();
    r.commits
        .fetch(CallId(1), vec![tp("t", 0)], r.now() + secs(2));
    let t = r.send();
    r.fail(&t, Failure::TimedOut);
    r.at(r.now() + secs(2));
    r.round();
    let ev = r.events();
    let [CommitEvent::Offsets {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(
        e.to_string().contains("request.timeout.ms"),
        "says why: {e}"
    );
}

#[test]
fn a_group_without_an_offset_answer_is_asked_again() {
    let mut r = Rig::new();
    r.commits
        .fetch(CallId(1), vec![tp("t", 0)], r.now() + secs(30));
    let t = r.send();
    let resp = OffsetFetchResponse::default();
    r.deliver(&t, &response::<OffsetFetchRequest>(&t, &resp));
    assert!(r.events().is_empty());
    assert!(r.timer().is_some());
}

// ----- committed offsets for the fetcher ----------------------------------------------------------

/// Positions for the fetcher as the tests compare them: found offsets, failed partitions.
type PositionsSeen = (Vec<(TopicPartition, Option<i64>)>, Vec<TopicPartition>);

fn positions(ev: &[CommitEvent]) -> Vec<PositionsSeen> {
    ev.iter()
        .filter_map(|e| match e {
            CommitEvent::Positions { found, failed } => {
                let mut f: Vec<_> = found
                    .iter()
                    .map(|(tp, _, c)| (tp.clone(), c.map(|c| c.0)))
                    .collect();
                f.sort();
                let mut x: Vec<_> = failed.iter().map(|(tp, _)| tp.clone()).collect();
                x.sort();
                Some((f, x))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn positions_come_from_the_committed_offsets_with_their_epochs() {
    let mut r = Rig::new();
    r.broker.committed.insert(tp("t", 0), 42);
    r.commits.fetch_positions(vec![
        (tp("t", 0), PositionEpoch(3)),
        (tp("t", 1), PositionEpoch(4)),
    ]);
    let t = r.send();
    r.answer(&t);
    let ev = r.events();
    let [CommitEvent::Positions { found, failed }] = &ev[..] else {
        panic!("{ev:?}")
    };
    let mut found = found.clone();
    found.sort_by_key(|f| f.0.clone());
    assert_eq!(
        found,
        vec![
            (
                tp("t", 0),
                PositionEpoch(3),
                Some((42, LeaderEpoch::UNKNOWN))
            ),
            (tp("t", 1), PositionEpoch(4), None)
        ]
    );
    assert!(failed.is_empty());
}

#[test]
fn a_failed_positions_lookup_is_never_nothing_committed() {
    // A fatal group error: the partitions are reported failed (asked again by the fetcher),
    // and the error is said.
    let mut r = Rig::new();
    r.broker.committed.insert(tp("t", 0), 42);
    r.commits
        .fetch_positions(vec![(tp("t", 0), PositionEpoch(3))]);
    let t = r.send();
    r.answer_fetch(&t, ErrorCode::GROUP_AUTHORIZATION_FAILED, |_| 0);
    let ev = r.events();
    assert!(matches!(ev[0], CommitEvent::Error(_)), "{ev:?}");
    assert_eq!(positions(&ev), vec![(vec![], vec![tp("t", 0)])]);

    // A partition-level fatal error: the same.
    r.commits
        .fetch_positions(vec![(tp("t", 0), PositionEpoch(5))]);
    let t = r.send();
    r.answer_fetch(&t, ErrorCode::None, |_| {
        ErrorCode::TOPIC_AUTHORIZATION_FAILED.code()
    });
    assert_eq!(positions(&r.events()), vec![(vec![], vec![tp("t", 0)])]);

    // Retriable trouble and lost links: asked again, never answered "nothing".
    r.commits
        .fetch_positions(vec![(tp("t", 0), PositionEpoch(6))]);
    let t = r.send();
    r.fail(&t, Failure::TimedOut);
    assert!(r.events().is_empty());
    r.at(r.timer().unwrap() + secs(1));
    let t = r.send();
    r.answer_fetch(&t, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, |_| 0);
    assert!(r.events().is_empty());
    r.at(r.timer().unwrap());
    let t = r.send();
    r.answer(&t);
    assert_eq!(
        positions(&r.events()),
        vec![(vec![(tp("t", 0), Some(42))], vec![])]
    );
}

#[test]
fn positions_waiting_for_an_unfindable_coordinator_are_failed_not_left_waiting() {
    let mut r = Rig::new();
    r.hold_find = true;
    r.commits
        .fetch_positions(vec![(tp("t", 0), PositionEpoch(3))]);
    for _ in 0..3 {
        r.round();
    }
    let t = r.held_find.pop().expect("discovery");
    let body = r
        .broker
        .answer_error(&t, ErrorCode::GROUP_AUTHORIZATION_FAILED);
    r.net.answered(t.route);
    let now = r.now();
    r.coordinator.handle_response(
        t.tag.id,
        t.version,
        &body,
        now,
        &mut r.net.links,
        &mut r.cluster,
    );
    r.round();
    let ev = r.events();
    assert!(
        ev.iter()
            .any(|e| matches!(e, CommitEvent::Error(e) if e.kafka_code() == Some(30))),
        "{ev:?}"
    );
    assert_eq!(positions(&ev), vec![(vec![], vec![tp("t", 0)])]);
}

#[test]
fn poll_timeout_only_returns_future_instants() {
    let mut r = Rig::new();
    r.commit(1, &[(tp("t", 0), 10)], secs(5));
    let t = r.send();
    r.answer_error(&t, ErrorCode::REQUEST_TIMED_OUT);
    let next = r.commits.poll_timeout(r.now()).unwrap();
    assert!(next > r.now());
    assert!(r.commits.poll_timeout(next).is_none_or(|t| t > next));
}

// ----- the consumer protocol (KIP-848) -------------------------------------------------------

/// A consumer-protocol member at member epoch `epoch`.
fn member_at(epoch: i32) -> Identity {
    Identity::Kip848 {
        epoch: MemberEpoch(epoch),
        member_id: MemberId::new("m-1"),
        instance_id: None,
    }
}

/// The member id and epoch an OffsetFetch request names its asker with (null and -1 when
/// the version has no such fields).
fn fetch_asker(t: &Transmit) -> (Option<String>, i32) {
    let req = request::<OffsetFetchRequest>(t);
    match req.groups.first() {
        Some(g) => (g.member_id.clone(), g.member_epoch),
        None => (None, -1),
    }
}

#[test]
fn a_consumer_protocol_member_names_itself_in_offset_fetch_v9_and_no_one_else_does() {
    let classic = Identity::classic(GenerationId(4), MemberId::new("m-1"), None);
    let joining = Identity::Kip848 {
        epoch: MemberEpoch(0),
        member_id: MemberId::none(),
        instance_id: None,
    };
    let left = member_at(-1);
    for (who, v, want) in [
        (member_at(7), 9, (Some("m-1".to_owned()), 7)),
        (member_at(7), 8, (None, -1)),
        (member_at(7), 7, (None, -1)),
        (classic, 9, (None, -1)),
        (Identity::Outsider, 9, (None, -1)),
        (joining, 9, (None, -1)),
        (left, 9, (None, -1)),
    ] {
        let mut r = Rig::new();
        r.net
            .links
            .on_ready(group_route(2), Versions::new([(9, 1, v), (8, 2, 9)]));
        r.commits.set_identity(who.clone());
        r.commits
            .fetch(CallId(1), vec![tp("t", 0)], r.now() + secs(30));
        let t = r.send();
        assert_eq!(t.version, ApiVersion(v));
        assert_eq!(fetch_asker(&t), want, "{who:?} at v{v}");
        // The position lookups for the fetcher name it the same way.
        r.answer(&t);
        r.events();
        r.commits
            .fetch_positions(vec![(tp("t", 0), PositionEpoch(1))]);
        let t = r.send();
        assert_eq!(fetch_asker(&t), want, "{who:?} at v{v}, positions");
    }
}

#[test]
fn a_member_epoch_refusal_on_a_positions_lookup_reports_the_partitions_failed_never_nothing_committed(
) {
    for (top, part) in [
        (ErrorCode::STALE_MEMBER_EPOCH, ErrorCode::None),
        (ErrorCode::UNKNOWN_MEMBER_ID, ErrorCode::None),
        (ErrorCode::None, ErrorCode::STALE_MEMBER_EPOCH),
        (ErrorCode::None, ErrorCode::UNKNOWN_MEMBER_ID),
    ] {
        let mut r = Rig::new();
        r.broker.committed.insert(tp("t", 0), 42);
        r.commits.set_identity(member_at(3));
        r.commits.fetch_positions(vec![
            (tp("t", 0), PositionEpoch(3)),
            (tp("t", 1), PositionEpoch(3)),
        ]);
        let t = r.send();
        r.answer_fetch(
            &t,
            top,
            |p| {
                if p.partition() == 0 {
                    part.code()
                } else {
                    0
                }
            },
        );
        let ev = r.events();
        assert_eq!(
            positions(&ev),
            vec![(vec![], vec![tp("t", 0), tp("t", 1)])],
            "{top} / {part}: failed, to be asked again"
        );
        assert!(
            !ev.iter().any(|e| matches!(e, CommitEvent::Error(_))),
            "{top} / {part}: the epoch moving on is no error for the application: {ev:?}"
        );
        // The fetcher asks again once the epoch is current.
        r.commits.set_identity(member_at(4));
        r.commits
            .fetch_positions(vec![(tp("t", 0), PositionEpoch(4))]);
        let t = r.send();
        assert_eq!(fetch_asker(&t), (Some("m-1".to_owned()), 4));
        r.answer(&t);
        assert_eq!(
            positions(&r.events()),
            vec![(vec![(tp("t", 0), Some(42))], vec![])]
        );
    }
}

#[test]
fn a_member_epoch_refusal_on_a_committed_lookup_is_retried_with_the_current_epoch() {
    let mut r = Rig::new();
    r.broker.committed.insert(tp("t", 0), 42);
    r.commits.set_identity(member_at(3));
    r.commits
        .fetch(CallId(1), vec![tp("t", 0)], r.now() + secs(30));
    let t = r.send();
    r.answer_fetch(&t, ErrorCode::STALE_MEMBER_EPOCH, |_| 0);
    assert!(r.events().is_empty(), "retried, not reported");
    r.commits.set_identity(member_at(4));
    r.at(r.timer().expect("a backoff"));
    let t = r.send();
    assert_eq!(
        fetch_asker(&t),
        (Some("m-1".to_owned()), 4),
        "the new epoch"
    );
    r.answer_fetch(&t, ErrorCode::None, |_| ErrorCode::UNKNOWN_MEMBER_ID.code());
    assert!(r.events().is_empty(), "retried, not reported");
    r.at(r.timer().expect("a backoff"));
    let t = r.send();
    r.answer(&t);
    let want: BTreeMap<TopicPartition, Option<i64>> = [(tp("t", 0), Some(42))].into();
    assert_eq!(offsets_of(&r.events()), vec![(1, Ok(want))]);

    // An epoch that never becomes current: a timeout at the deadline that says why.
    r.commits
        .fetch(CallId(2), vec![tp("t", 0)], r.now() + secs(2));
    let deadline = r.now() + secs(2);
    while r.now() < deadline {
        for t in r.sends() {
            r.answer_fetch(&t, ErrorCode::STALE_MEMBER_EPOCH, |_| 0);
        }
        assert!(r.events().is_empty());
        let next = r.timer().expect("a timer");
        r.at(next.min(deadline));
    }
    r.round();
    let ev = r.events();
    let [CommitEvent::Offsets {
        id: CallId(2),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(e.to_string().contains("STALE_MEMBER_EPOCH"), "{e}");
}

#[test]
fn a_member_epoch_refusal_of_a_lookup_not_naming_a_member_fails_it() {
    // The broker checks membership only when the request names a member: from anyone
    // else these codes are not about an epoch moving on.
    let mut r = Rig::new();
    r.commits
        .fetch(CallId(1), vec![tp("t", 0)], r.now() + secs(30));
    let t = r.send();
    r.answer_fetch(&t, ErrorCode::UNKNOWN_MEMBER_ID, |_| 0);
    assert_eq!(offsets_of(&r.events()), vec![(1, Err(ErrorKind::Broker))]);
}

#[test]
fn a_stale_commit_is_retried_with_the_new_epoch_for_the_partitions_still_owned() {
    let mut r = Rig::new();
    r.commits.set_identity(member_at(5));
    r.commit(1, &[(tp("t", 0), 10), (tp("t", 1), 11)], secs(30));
    let t = r.send();
    let req = request::<OffsetCommitRequest>(&t);
    assert_eq!(
        (req.generation_id_or_member_epoch, req.member_id.as_str()),
        (5, "m-1"),
        "the member epoch in the generation field"
    );
    r.answer_error(&t, ErrorCode::STALE_MEMBER_EPOCH);
    assert!(r.events().is_empty(), "retried, not reported");

    // Before the first assignment is known every partition counts as owned.
    r.commits.set_identity(member_at(6));
    r.at(r.timer().expect("a backoff"));
    let t = r.send();
    assert_eq!(commit_id(&t), 1);
    let req = request::<OffsetCommitRequest>(&t);
    assert_eq!(
        req.generation_id_or_member_epoch, 6,
        "the epoch current now"
    );
    assert_eq!(SimBroker::commit_request(&t).len(), 2);
    r.answer_error(&t, ErrorCode::STALE_MEMBER_EPOCH);
    assert!(r.events().is_empty());

    // The epoch moved on because partition 1 was revoked: only partition 0 is resent.
    r.commits.set_identity(member_at(7));
    r.commits.set_assignment(&[tp("t", 0), tp("t", 2)]);
    assert!(r.events().is_empty(), "something is left to commit");
    r.at(r.timer().expect("a backoff"));
    let t = r.send();
    let req = request::<OffsetCommitRequest>(&t);
    assert_eq!(req.generation_id_or_member_epoch, 7);
    assert_eq!(
        SimBroker::commit_request(&t),
        vec![(tp("t", 0), 10, Some("c1".to_owned()))],
        "only the partition still owned"
    );
    r.answer(&t);
    assert_eq!(committed_ids(&r.events()), vec![(1, Ok(()))]);
    assert_eq!(r.broker.committed.get(&tp("t", 0)), Some(&10));
    assert_eq!(
        r.broker.committed.get(&tp("t", 1)),
        None,
        "never committed over its new owner"
    );
}

#[test]
fn a_stale_commit_whose_partitions_were_all_revoked_fails_with_commit_failed() {
    // Revoked while the commit was on the wire.
    let mut r = Rig::new();
    r.commits.set_identity(member_at(5));
    r.commits.set_assignment(&[tp("t", 0), tp("t", 1)]);
    r.commit(1, &[(tp("t", 0), 10), (tp("t", 1), 11)], secs(30));
    r.commit(2, &[(tp("t", 2), 12)], secs(30));
    let t = r.send();
    r.commits.set_assignment(&[tp("t", 2)]);
    r.answer_error(&t, ErrorCode::STALE_MEMBER_EPOCH);
    let ev = r.events();
    let [CommitEvent::Committed {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::CommitFailed);
    let msg = e.to_string();
    assert!(msg.contains("revoked or reassigned meanwhile"), "{msg}");
    assert!(msg.contains("t-0, t-1"), "names the partitions: {msg}");
    // The next commit is not held up.
    let t = r.send();
    assert_eq!(commit_id(&t), 2);
    r.answer(&t);
    assert_eq!(committed_ids(&r.events()), vec![(2, Ok(()))]);

    // Revoked while it waited to be resent: it fails at once.
    let mut r = Rig::new();
    r.commits.set_identity(member_at(5));
    r.commit(1, &[(tp("t", 0), 10)], secs(30));
    let t = r.send();
    r.answer_error(&t, ErrorCode::STALE_MEMBER_EPOCH);
    assert!(r.events().is_empty());
    r.commits.set_identity(member_at(6));
    r.commits.set_assignment(&[]);
    assert_eq!(
        committed_ids(&r.events()),
        vec![(1, Err(ErrorKind::CommitFailed))]
    );
    r.at(r.now() + secs(5));
    assert!(r.round().is_empty(), "nothing resent");
    assert_eq!(r.timer(), None);
}

#[test]
fn an_assignment_change_leaves_commits_that_were_not_refused_alone() {
    // Only the retry after STALE_MEMBER_EPOCH is limited to owned partitions: a commit
    // the application makes goes out as made.
    let mut r = Rig::new();
    r.commits.set_identity(member_at(5));
    r.commits.set_assignment(&[tp("t", 0)]);
    r.commit(1, &[(tp("t", 0), 10), (tp("t", 1), 11)], secs(30));
    let t = r.send();
    assert_eq!(SimBroker::commit_request(&t).len(), 2);
    r.answer_error(&t, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
    r.commits.set_assignment(&[]);
    assert!(r.events().is_empty());
    r.at(r.timer().expect("a backoff"));
    let t = r.send();
    assert_eq!(SimBroker::commit_request(&t).len(), 2);
    r.answer(&t);
    assert_eq!(committed_ids(&r.events()), vec![(1, Ok(()))]);
}

#[test]
fn a_stale_commit_that_stays_stale_times_out_at_its_deadline_saying_why() {
    let mut r = Rig::new();
    r.commits.set_identity(member_at(5));
    r.commit(1, &[(tp("t", 0), 10)], secs(2));
    let deadline = r.now() + secs(2);
    while r.now() < deadline {
        for t in r.sends() {
            r.answer_error(&t, ErrorCode::STALE_MEMBER_EPOCH);
        }
        assert!(r.events().is_empty());
        let next = r.timer().expect("a timer");
        r.at(next.min(deadline));
    }
    r.round();
    let ev = r.events();
    let [CommitEvent::Committed {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(e.to_string().contains("STALE_MEMBER_EPOCH"), "{e}");
}

#[test]
fn stale_member_epoch_fails_a_commit_that_does_not_speak_the_consumer_protocol() {
    let classic = Identity::classic(GenerationId(4), MemberId::new("m-1"), None);
    for who in [classic, Identity::Outsider] {
        let mut r = Rig::new();
        r.commits.set_identity(who.clone());
        r.commit(1, &[(tp("t", 0), 10)], secs(30));
        let t = r.send();
        r.answer_error(&t, ErrorCode::STALE_MEMBER_EPOCH);
        let ev = r.events();
        let [CommitEvent::Committed {
            id: CallId(1),
            result: Err(e),
        }] = &ev[..]
        else {
            panic!("{who:?}: {ev:?}")
        };
        assert_eq!(e.kind(), ErrorKind::CommitFailed, "{who:?}");
        assert_eq!(e.kafka_code(), Some(ErrorCode::STALE_MEMBER_EPOCH.code()));
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("generation {}", who.generation_or_epoch()))
                && msg.contains("group g"),
            "{msg}"
        );
        assert!(r.round().is_empty(), "not retried");
    }
}

#[test]
fn a_consumer_protocol_member_s_refused_commit_speaks_of_its_member_epoch() {
    for (code, says) in [
        (ErrorCode::UNKNOWN_MEMBER_ID, "no longer a member"),
        (ErrorCode::GROUP_ID_NOT_FOUND, "no longer exists"),
        (ErrorCode::FENCED_INSTANCE_ID, "group.instance.id (i-1)"),
    ] {
        let mut r = Rig::new();
        r.commits.set_identity(Identity::Kip848 {
            epoch: MemberEpoch(7),
            member_id: MemberId::new("m-1"),
            instance_id: Some("i-1".into()),
        });
        r.commit(1, &[(tp("t", 0), 10)], secs(30));
        let t = r.send();
        r.answer_error(&t, code);
        let ev = r.events();
        let [CommitEvent::Committed {
            id: CallId(1),
            result: Err(e),
        }] = &ev[..]
        else {
            panic!("{code}: {ev:?}")
        };
        assert_eq!(e.kind(), ErrorKind::CommitFailed, "{code}");
        assert_eq!(e.kafka_code(), Some(code.code()));
        let msg = e.to_string();
        assert!(
            msg.contains(says) && msg.contains("group g"),
            "{code}: {msg}"
        );
        assert!(!msg.contains("generation"), "{code}: {msg}");
        if code != ErrorCode::FENCED_INSTANCE_ID {
            assert!(msg.contains("member epoch 7"), "{code}: {msg}");
        }
    }
}

// ----- randomized ---------------------------------------------------------------------------------

/// Random commits, committed-offset lookups for the application and for the fetcher,
/// answers (good, retriable, fatal, NOT_COORDINATOR, malformed, partial), failed requests,
/// coordinator moves and failed discoveries, and time. After every step: one OffsetCommit
/// at a time and always the oldest commit not yet ended, commits applied at the broker in
/// order, at most one FindCoordinator, every commit and lookup ended exactly once, and
/// never later than its deadline unless its request was on the wire, fetcher lookups never
/// "nothing committed" unless the broker said so, timers in the future. Then quiet.
#[test]
fn randomized_interleavings_keep_the_invariants_and_end_quiet() {
    for seed in 1..=5u32 {
        run_random(seed, 2_000);
    }
}

fn run_random(seed: u32, steps: usize) {
    let mut rng = XorShift::new(seed.wrapping_mul(69_069).wrapping_add(1));
    let mut pick = move |n: u32| crate::backoff::Jitter::next_u32(&mut rng) % n.max(1);
    let mut r = Rig::new();
    r.hold_find = true;
    let all = [tp("t", 0), tp("t", 1), tp("t", 2)];
    let mut pending: Vec<Transmit> = Vec::new();
    let mut old: Vec<(RequestId, ApiVersion, Vec<u8>)> = Vec::new();
    // Commits not ended, oldest first, with their deadlines; lookups not ended.
    let mut open_commits: Vec<(CallId, Instant)> = Vec::new();
    let mut open_fetches: BTreeMap<CallId, Instant> = BTreeMap::new();
    let mut ended: BTreeSet<CallId> = BTreeSet::new();
    let mut applied: Vec<CallId> = Vec::new();
    let mut next_id = 1u64;
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for step in 0..steps {
        let ctx = format!("seed {seed} step {step}");
        let now = r.now();
        match pick(20) {
            0 | 1 => {
                let offsets: Vec<(TopicPartition, i64)> = all
                    .iter()
                    .filter(|tp| tp.partition() == 0 || next_id % 2 == 0)
                    .map(|tp| (tp.clone(), next_id as i64))
                    .collect();
                let timeout = ms(200 + pick(8_000) as u64);
                r.commit(next_id, &offsets, timeout);
                open_commits.push((CallId(next_id), now + timeout));
                next_id += 1;
            }
            2 => {
                let timeout = ms(200 + pick(8_000) as u64);
                r.commits
                    .fetch(CallId(next_id), all.to_vec(), now + timeout);
                open_fetches.insert(CallId(next_id), now + timeout);
                next_id += 1;
            }
            3 => {
                let e = PositionEpoch(next_id);
                next_id += 1;
                r.commits
                    .fetch_positions(vec![(all[pick(3) as usize].clone(), e)]);
            }
            4..=9 => {
                if !pending.is_empty() {
                    let t = pending.remove(0);
                    let node = sim::node_of(t.route);
                    let body = if node != r.broker.coordinator {
                        r.broker.answer_error(&t, ErrorCode::NOT_COORDINATOR)
                    } else {
                        match pick(16) {
                            0 => malformed(),
                            1 => r
                                .broker
                                .answer_error(&t, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
                            2 => r.broker.answer_error(&t, ErrorCode::REQUEST_TIMED_OUT),
                            3 => r.broker.answer_error(&t, ErrorCode::UNKNOWN_MEMBER_ID),
                            4 if t.api_key == OffsetFetchRequest::KEY => {
                                let resp = r.broker.offset_fetch(
                                    &t,
                                    ErrorCode::NOT_COORDINATOR.code(),
                                    |_| 0,
                                );
                                response::<OffsetFetchRequest>(&t, &resp)
                            }
                            5 if t.api_key == OffsetFetchRequest::KEY => {
                                let resp = r.broker.offset_fetch(&t, 0, |_| {
                                    ErrorCode::UNSTABLE_OFFSET_COMMIT.code()
                                });
                                response::<OffsetFetchRequest>(&t, &resp)
                            }
                            _ => {
                                if t.api_key == OffsetCommitRequest::KEY {
                                    applied.push(CallId(commit_id(&t)));
                                }
                                r.broker.answer(&t)
                            }
                        }
                    };
                    r.deliver(&t, &body);
                    old.push((t.tag.id, t.version, body));
                }
            }
            10 => {
                if !pending.is_empty() {
                    let t = pending.remove(0);
                    let f = if pick(2) == 0 {
                        Failure::TimedOut
                    } else {
                        Failure::Disconnected("reset".into())
                    };
                    r.fail(&t, f);
                    // Everything behind it on that link fails too.
                    let mut i = 0;
                    while i < pending.len() {
                        if pending[i].route == t.route {
                            let u = pending.remove(i);
                            let now = r.now();
                            r.commits.handle_failure(
                                u.tag.id,
                                &Failure::Disconnected("reset".into()),
                                now,
                                &mut r.coordinator,
                            );
                        } else {
                            i += 1;
                        }
                    }
                }
            }
            11 => {
                if !old.is_empty() {
                    let (id, v, body) = old[pick(old.len() as u32) as usize].clone();
                    let now = r.now();
                    r.commits.handle_response(
                        id,
                        v,
                        &body,
                        now,
                        &mut r.net.links,
                        &mut r.coordinator,
                    );
                    assert!(
                        r.commits.poll_event().is_none(),
                        "{ctx}: a stale answer counted"
                    );
                }
            }
            12 => r.broker.coordinator = 1 + pick(3) as i32,
            13 | 14 => {
                if let Some(t) = r.held_find.pop() {
                    let now = r.now();
                    let body = match pick(6) {
                        0 => r
                            .broker
                            .answer_error(&t, ErrorCode::COORDINATOR_NOT_AVAILABLE),
                        1 => r
                            .broker
                            .answer_error(&t, ErrorCode::GROUP_AUTHORIZATION_FAILED),
                        2 => malformed(),
                        _ => r.broker.answer(&t),
                    };
                    r.net.answered(t.route);
                    if pick(8) == 0 {
                        r.net.close(t.route, "lost");
                        r.coordinator
                            .handle_failure(t.tag.id, &Failure::TimedOut, now);
                    } else {
                        r.coordinator.handle_response(
                            t.tag.id,
                            t.version,
                            &body,
                            now,
                            &mut r.net.links,
                            &mut r.cluster,
                        );
                    }
                }
            }
            _ => {
                let by = now + ms(1 + pick(400) as u64);
                let next = [
                    r.timer(),
                    r.net.links.poll_timeout(now),
                    r.cluster.poll_timeout(now),
                ]
                .into_iter()
                .flatten()
                .min();
                r.at(next.map_or(by, |n| n.min(by)));
            }
        }
        step_checks(
            &mut r,
            &ctx,
            &mut pending,
            &mut open_commits,
            &mut open_fetches,
            &mut ended,
            &applied,
            &mut outcomes,
        );
    }
    // The faults stop: every request is answered well, discovery succeeds.
    let end = r.now() + secs(60);
    let mut step = steps;
    while r.now() < end
        && !(open_commits.is_empty() && open_fetches.is_empty() && r.commits.fetches.is_empty())
    {
        step += 1;
        let ctx = format!("seed {seed} step {step} (quiet)");
        if let Some(t) = r.held_find.pop() {
            r.broker.coordinator = 2;
            r.answer_find(&t);
        } else if !pending.is_empty() {
            let t = pending.remove(0);
            if t.api_key == OffsetCommitRequest::KEY
                && sim::node_of(t.route) == r.broker.coordinator
            {
                applied.push(CallId(commit_id(&t)));
            }
            let body = if sim::node_of(t.route) == r.broker.coordinator {
                r.broker.answer(&t)
            } else {
                r.broker.answer_error(&t, ErrorCode::NOT_COORDINATOR)
            };
            r.deliver(&t, &body);
        } else if let Some(next) = [r.timer(), r.net.links.poll_timeout(r.now())]
            .into_iter()
            .flatten()
            .min()
        {
            r.at(next);
        }
        step_checks(
            &mut r,
            &ctx,
            &mut pending,
            &mut open_commits,
            &mut open_fetches,
            &mut ended,
            &applied,
            &mut outcomes,
        );
    }
    assert!(
        open_commits.is_empty() && open_fetches.is_empty() && r.commits.fetches.is_empty(),
        "seed {seed}: still open after the faults stopped: {open_commits:?} {open_fetches:?}"
    );
    log::info!(
        "seed {seed}: {outcomes:?}, {} commits applied",
        applied.len()
    );
    assert!(
        outcomes.get("commit ok").is_some_and(|n| *n > 20),
        "seed {seed}: {outcomes:?}"
    );
    r.at(r.now() + secs(3600));
    assert!(r.round().is_empty(), "seed {seed}: requests while idle");
    assert!(r.held_find.is_empty(), "seed {seed}: discovery while idle");
    assert_eq!(r.timer(), None, "seed {seed}: timers while idle");
}

#[allow(clippy::too_many_arguments)]
fn step_checks(
    r: &mut Rig,
    ctx: &str,
    pending: &mut Vec<Transmit>,
    open_commits: &mut Vec<(CallId, Instant)>,
    open_fetches: &mut BTreeMap<CallId, Instant>,
    ended: &mut BTreeSet<CallId>,
    applied: &[CallId],
    outcomes: &mut BTreeMap<String, usize>,
) {
    // The loop: timers, then the events so far, then what the components hand out.
    r.timers();
    drain_events(r, ctx, open_commits, open_fetches, ended, applied, outcomes);
    assert!(
        r.held_find.len() <= 1,
        "{ctx}: two FindCoordinator in flight"
    );
    let ts = r.drive();
    assert!(
        r.held_find.len() <= 1,
        "{ctx}: two FindCoordinator in flight"
    );
    for t in ts {
        if t.api_key == OffsetCommitRequest::KEY {
            assert!(
                !pending
                    .iter()
                    .any(|p| p.api_key == OffsetCommitRequest::KEY),
                "{ctx}: two commits in flight"
            );
            let id = commit_id(&t);
            assert_eq!(
                open_commits.first().map(|c| c.0),
                Some(CallId(id)),
                "{ctx}: commit {id} sent before older ones ended: {open_commits:?}; queue {:?}",
                r.commits
                    .commits
                    .iter()
                    .map(|j| (j.id, j.in_flight, j.not_before))
                    .collect::<Vec<_>>()
            );
        }
        pending.push(t);
    }
    assert!(
        applied.windows(2).all(|w| w[0] < w[1]),
        "{ctx}: commits applied out of order: {applied:?}"
    );
    drain_events(r, ctx, open_commits, open_fetches, ended, applied, outcomes);
    let now = r.now();
    // Nothing open past its deadline unless its request is on the wire.
    let commit_on_wire = pending
        .iter()
        .any(|p| p.api_key == OffsetCommitRequest::KEY);
    for (i, (id, d)) in open_commits.iter().enumerate() {
        if *d <= now {
            assert!(
                i == 0 && commit_on_wire,
                "{ctx}: commit {id} open past its deadline"
            );
        }
    }
    let fetches_on_wire = pending
        .iter()
        .filter(|p| p.api_key == OffsetFetchRequest::KEY)
        .count();
    let late = open_fetches.values().filter(|d| **d <= now).count();
    assert!(
        late <= fetches_on_wire,
        "{ctx}: {late} lookups open past their deadlines"
    );
    for t in [r.commits.poll_timeout(now), r.coordinator.poll_timeout(now)]
        .into_iter()
        .flatten()
    {
        assert!(t > now, "{ctx}: a timer in the past");
    }
}

fn drain_events(
    r: &mut Rig,
    ctx: &str,
    open_commits: &mut Vec<(CallId, Instant)>,
    open_fetches: &mut BTreeMap<CallId, Instant>,
    ended: &mut BTreeSet<CallId>,
    applied: &[CallId],
    outcomes: &mut BTreeMap<String, usize>,
) {
    let events = r.events();
    for e in events {
        match e {
            CommitEvent::Committed { id, result } => {
                assert!(ended.insert(id), "{ctx}: commit {id} ended twice");
                let i = open_commits
                    .iter()
                    .position(|c| c.0 == id)
                    .unwrap_or_else(|| panic!("{ctx}: unknown commit {id}"));
                open_commits.remove(i);
                let key = match &result {
                    Ok(()) => "commit ok".to_owned(),
                    Err(e) => format!("commit {:?}", e.kind()),
                };
                *outcomes.entry(key).or_insert(0) += 1;
                if result.is_ok() {
                    assert!(
                        applied.contains(&id),
                        "{ctx}: commit {id} succeeded but was never applied"
                    );
                }
            }
            CommitEvent::Offsets { id, result } => {
                assert!(ended.insert(id), "{ctx}: lookup {id} ended twice");
                assert!(
                    open_fetches.remove(&id).is_some(),
                    "{ctx}: unknown lookup {id}"
                );
                if let Ok(found) = &result {
                    for (tp, c) in found {
                        assert_eq!(
                            c.as_ref().map(|c| c.offset),
                            r.broker.committed.get(tp).copied(),
                            "{ctx}: lookup {id} {tp}"
                        );
                    }
                }
                *outcomes
                    .entry(format!(
                        "lookup {}",
                        if result.is_ok() { "ok" } else { "err" }
                    ))
                    .or_insert(0) += 1;
            }
            CommitEvent::Positions { found, .. } => {
                for (tp, _, c) in found {
                    assert_eq!(
                        c.map(|c| c.0),
                        r.broker.committed.get(&tp).copied(),
                        "{ctx}: positions lookup for {tp} is not what the broker said"
                    );
                }
                *outcomes.entry("positions".to_owned()).or_insert(0) += 1;
            }
            CommitEvent::Error(_) => {}
        }
    }
}
