//! Deterministic tests of the classic group member on the shared rig (`crate::group::sim`):
//! simulated clock, links and brokers, the simulated classic group coordinator that runs
//! the real group protocol for several members (`group::sim::classic`), and a simulated
//! user thread per member that answers its callbacks (at once, after a delay, or when the
//! test says). This file adds the classic hooks (`RigMember for ClassicMember`: error
//! injection, the single-owner check) and helpers (requests by api key).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::join::{from_wire, some_of, to_wire, undecodable_subscription, MAX_LOGGED_TOPICS};
use super::*;
use crate::backoff::XorShift;
use crate::group::assignor::{CooperativeSticky, Range, RoundRobin};
use crate::group::member::MemberEvent;
use crate::group::sim::classic::{reply, GroupState, Held, SimGroup};
use crate::group::sim::{self as sim_rig, Answer, RigMember, COORD};
use crate::link::{Lane, Versions};
use crate::metrics::stats::IoStats;
use crate::metrics::Metrics;
use crate::protocol::api::heartbeat::HeartbeatResponse;
use crate::protocol::api::join_group::JoinGroupResponse;
use crate::protocol::api::leave_group::LeaveGroupResponse;
use crate::protocol::api::sync_group::SyncGroupResponse;
use crate::protocol::api::Api;
use crate::protocol::consumer_protocol::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription,
};
use crate::protocol::message::Bytes;
use crate::sim::{self, ms, request, tp, Clock};
use crate::types::NodeId;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn range() -> Vec<Box<dyn Assignor>> {
    vec![Box::new(Range)]
}

fn roundrobin() -> Vec<Box<dyn Assignor>> {
    vec![Box::new(RoundRobin)]
}

fn cooperative() -> Vec<Box<dyn Assignor>> {
    vec![Box::new(CooperativeSticky)]
}

/// The defaults of the Java client, with `assignors`.
fn config(assignors: Vec<Box<dyn Assignor>>) -> ClassicConfig {
    ClassicConfig {
        instance_id: None,
        session_timeout: secs(45),
        rebalance_timeout: secs(300),
        heartbeat_interval: secs(3),
        max_poll_interval: secs(300),
        assignors,
        client_rack: None,
        retry_backoff: sim::retry_backoff(),
        request_timeout: secs(30),
    }
}

fn static_config(assignors: Vec<Box<dyn Assignor>>, instance: &str) -> ClassicConfig {
    ClassicConfig {
        instance_id: Some(instance.to_owned()),
        ..config(assignors)
    }
}

fn tps(topic: &str, parts: &[i32]) -> Vec<TopicPartition> {
    parts.iter().map(|p| tp(topic, *p)).collect()
}

type Rig = sim_rig::Rig<ClassicMember, SimGroup>;
type Client = sim_rig::Client<ClassicMember, SimGroup>;

/// The classic member on the rig: every request is logged by api key, and errors may be
/// injected instead of the group's answers.
impl RigMember<SimGroup> for ClassicMember {
    type Config = ClassicConfig;
    type Kind = Kind;
    /// Api key, when, where.
    type Sent = (i16, Instant, Route);
    type Ext = Injections;

    fn create(cfg: ClassicConfig, i: usize) -> ClassicMember {
        ClassicMember::new(cfg, sim::jitter(200 + i as u32))
    }

    fn versions() -> Versions {
        sim::all_versions()
    }

    fn state_kind(&self) -> Kind {
        self.state.kind()
    }

    fn record(t: &Transmit, now: Instant) -> (i16, Instant, Route) {
        (t.api_key, now, t.route)
    }

    fn on_send(r: &mut Rig, i: usize, t: &Transmit) -> Option<Answer> {
        let inject = &mut r.clients[i].ext.inject;
        let k = inject
            .iter()
            .position(|(api, _, n)| *api == t.api_key && n.is_none_or(|n| n > 0))?;
        let code = inject[k].1;
        if let Some(n) = &mut inject[k].2 {
            *n -= 1;
        }
        Some(error_reply(i, t, code))
    }

    /// No partition has two owners.
    fn check(r: &Rig) {
        r.assert_single_owners();
    }
}

/// Errors answered instead of the group: api key, code, answers left (`None`: all).
#[derive(Default)]
pub(crate) struct Injections {
    inject: Vec<(i16, ErrorCode, Option<usize>)>,
}

impl Client {
    /// The partitions the user thread holds: the member's, those of a revocation it has
    /// not finished, and those of an assignment it has started on.
    fn holds(&self) -> BTreeSet<TopicPartition> {
        let mut h: BTreeSet<TopicPartition> = self.member.owned().into_iter().collect();
        if let Some(p) = &self.pending {
            match p.kind {
                CallbackKind::Revoked => h.extend(p.partitions.iter().cloned()),
                CallbackKind::Assigned => h.extend(p.owned.iter().cloned()),
                // Lost: someone else may own them already; that is what lost means.
                CallbackKind::Lost => {}
            }
        }
        h
    }

    fn kind(&self) -> Kind {
        self.member.state.kind()
    }

    fn sent_of(&self, api: i16) -> Vec<Instant> {
        self.sent
            .iter()
            .filter(|(k, _, _)| *k == api)
            .map(|(_, t, _)| *t)
            .collect()
    }
}

impl Rig {
    /// Whether every live subscribed client is stable with no callback outstanding.
    fn all_stable(&self) -> bool {
        self.clients
            .iter()
            .filter(|c| c.alive && c.member.subscription.is_some())
            .all(|c| c.kind() == Kind::Stable && c.pending.is_none())
            && self.group.state == GroupState::Stable
    }

    /// The next request of api `api` client `i` sent (intercepted), within `limit`.
    fn next_request(&mut self, i: usize, api: i16, limit: Duration) -> Transmit {
        self.next_request_where(i, limit, |t| t.api_key == api)
    }

    /// Answers intercepted request `t` of client `i` with `body`.
    fn answer(&mut self, i: usize, t: &Transmit, body: Vec<u8>) {
        self.answer_body(i, t, body);
    }

    /// Answers intercepted request `t` of client `i` with error `code`.
    fn answer_error(&mut self, i: usize, t: &Transmit, code: ErrorCode) {
        self.push_answer(error_reply(i, t, code));
        self.settle();
    }

    fn assert_single_owners(&self) {
        let mut owner: BTreeMap<TopicPartition, usize> = BTreeMap::new();
        for (i, c) in self.clients.iter().enumerate().filter(|(_, c)| c.alive) {
            for p in c.holds() {
                if let Some(j) = owner.insert(p.clone(), i) {
                    panic!(
                        "{p} held by clients {j} and {i} at once: {:?} / {:?}",
                        self.clients[j].callbacks, c.callbacks
                    );
                }
            }
        }
    }
}

/// The answer to `t` with error `code` (MEMBER_ID_REQUIRED carries the member id
/// `injected`).
fn error_reply(i: usize, t: &Transmit, code: ErrorCode) -> Answer {
    let h = Held::of(i, t);
    let c = code.code();
    match t.api_key {
        JoinGroupRequest::KEY => {
            let req = request::<JoinGroupRequest>(t);
            let member_id = if code == ErrorCode::MEMBER_ID_REQUIRED {
                "injected".to_owned()
            } else {
                req.member_id
            };
            let resp = JoinGroupResponse {
                error_code: c,
                generation_id: -1,
                member_id,
                ..Default::default()
            };
            reply::<JoinGroupRequest>(h, &resp)
        }
        SyncGroupRequest::KEY => {
            let resp = SyncGroupResponse {
                error_code: c,
                ..Default::default()
            };
            reply::<SyncGroupRequest>(h, &resp)
        }
        HeartbeatRequest::KEY => {
            let resp = HeartbeatResponse {
                throttle_time_ms: 0,
                error_code: c,
            };
            reply::<HeartbeatRequest>(h, &resp)
        }
        LeaveGroupRequest::KEY => {
            let resp = LeaveGroupResponse {
                error_code: c,
                ..Default::default()
            };
            reply::<LeaveGroupRequest>(h, &resp)
        }
        k => panic!("no error answer for api {k}"),
    }
}

/// The subscription the JoinGroup `t` offers for its first protocol.
fn subscription_of(t: &Transmit) -> (JoinGroupRequest, ConsumerProtocolSubscription) {
    let req = request::<JoinGroupRequest>(t);
    let sub = ConsumerProtocolSubscription::decode(&req.protocols[0].metadata.0).unwrap();
    (req, sub)
}

/// The partitions an encoded assignment names.
fn assigned(bytes: &[u8]) -> Vec<TopicPartition> {
    let a = ConsumerProtocolAssignment::decode(bytes).unwrap();
    from_wire(&a.assigned_partitions).into_iter().collect()
}

fn assignment_bytes(parts: &[TopicPartition]) -> Vec<u8> {
    let set: BTreeSet<TopicPartition> = parts.iter().cloned().collect();
    ConsumerProtocolAssignment {
        assigned_partitions: to_wire(&set),
        user_data: None,
    }
    .encode()
}

/// A single member on `t` (3 partitions) that has joined and is stable; from now on its
/// requests to the coordinator wait for the test.
fn stable_member(assignors: Vec<Box<dyn Assignor>>) -> Rig {
    stable_member_with(config(assignors))
}

fn stable_member_with(cfg: ClassicConfig) -> Rig {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(cfg);
    r.subscribe(0, &["t"]);
    r.settle();
    assert_eq!(r.clients[0].kind(), Kind::Stable);
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1, 2]));
    r.clients[0].intercept = true;
    r
}

/// The stable member's next heartbeat, answered REBALANCE_IN_PROGRESS: returns the JoinGroup
/// that follows (after the eager Revoked callback, which the user thread answers).
fn rebalance(r: &mut Rig) -> Transmit {
    let hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
    r.answer_error(0, &hb, ErrorCode::REBALANCE_IN_PROGRESS);
    r.next_request(0, JoinGroupRequest::KEY, secs(1))
}

// ----- joining ------------------------------------------------------------------------

#[test]
fn unsubscribed_to_stable_a_single_member_joins_leads_with_range_and_heartbeats_at_the_interval() {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(config(range()));
    r.c(0).intercept = true;
    r.subscribe(0, &["t"]);
    let start = r.now();

    let j1 = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    assert_eq!(j1.route, Route::node(NodeId(COORD), Lane::Join));
    assert_eq!(j1.version, ApiVersion(9));
    assert_eq!(j1.timeout, secs(305), "rebalance timeout + 5 s");
    let (req, sub) = subscription_of(&j1);
    assert_eq!(req.group_id, "g");
    assert_eq!(req.member_id, "");
    assert_eq!(req.group_instance_id, None);
    assert_eq!(req.protocol_type, "consumer");
    assert_eq!(
        (req.session_timeout_ms, req.rebalance_timeout_ms),
        (45_000, 300_000)
    );
    assert_eq!(req.protocols.len(), 1);
    assert_eq!(req.protocols[0].name, "range");
    assert_eq!(sub.topics, vec!["t".to_owned()]);
    assert!(sub.owned_partitions.is_empty());
    assert_eq!((sub.generation_id, sub.rack_id), (-1, None));
    r.pass(0, &j1);

    // MEMBER_ID_REQUIRED: again at once, with the id the coordinator gave.
    let j2 = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    assert_eq!(request::<JoinGroupRequest>(&j2).member_id, "c0-001");
    assert_eq!(r.now(), start, "no backoff after MEMBER_ID_REQUIRED");
    r.pass(0, &j2);

    // The leader assigns every partition to itself with range.
    let s = r.next_request(0, SyncGroupRequest::KEY, Duration::ZERO);
    assert_eq!(s.route.lane, Lane::Join);
    assert_eq!(s.timeout, secs(305));
    let req = request::<SyncGroupRequest>(&s);
    assert_eq!((req.generation_id, req.member_id.as_str()), (1, "c0-001"));
    assert_eq!(req.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(req.protocol_name.as_deref(), Some("range"));
    assert_eq!(req.assignments.len(), 1);
    assert_eq!(req.assignments[0].member_id, "c0-001");
    assert_eq!(
        assigned(&req.assignments[0].assignment.0),
        tps("t", &[0, 1, 2])
    );
    r.pass(0, &s);

    let c = &r.clients[0];
    assert_eq!(
        c.callbacks,
        vec![(
            CallbackKind::Assigned,
            tps("t", &[0, 1, 2]),
            tps("t", &[0, 1, 2])
        )]
    );
    let ids: Vec<(i32, &str)> = c
        .identities
        .iter()
        .map(|i| (i.generation_or_epoch(), i.member_id()))
        .collect();
    assert_eq!(ids, vec![(-1, "c0-001"), (1, "c0-001")]);
    assert_eq!(c.kind(), Kind::Stable);
    assert_eq!(c.member.identity().generation_or_epoch(), 1);
    assert!(c.errors.is_empty(), "{:?}", c.errors);
    assert_eq!(
        c.member.poll_timeout(r.now()),
        Some(start + secs(3)),
        "idle until the first heartbeat"
    );

    // A minute: a heartbeat every 3 s on the group link, one at a time, nothing else.
    r.c(0).intercept = false;
    let before = r.clients[0].sent.len();
    r.run_for(secs(60));
    let c = &r.clients[0];
    let later: Vec<&(i16, Instant, Route)> = c.sent[before..].iter().collect();
    assert_eq!(later.len(), 20, "{later:?}");
    for (k, (api, at, route)) in later.iter().enumerate() {
        assert_eq!(*api, HeartbeatRequest::KEY);
        assert_eq!(*route, Route::node(NodeId(COORD), Lane::Group));
        assert_eq!(*at, start + secs(3 * (k as u64 + 1)));
    }
    assert_eq!(c.callbacks.len(), 1);
    assert_eq!(c.kind(), Kind::Stable);
}

#[test]
fn three_members_with_range_revoke_everything_before_each_rebalance_and_share_the_partitions() {
    let mut r = Rig::new(&[("t", 6)]);
    for _ in 0..3 {
        r.add(config(range()));
    }
    r.subscribe(0, &["t"]);
    r.settle();
    r.subscribe(1, &["t"]);
    r.run_until(secs(30), Rig::all_stable);
    r.subscribe(2, &["t"]);
    r.run_until(secs(30), Rig::all_stable);

    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1]));
    assert_eq!(r.clients[1].member.owned(), tps("t", &[2, 3]));
    assert_eq!(r.clients[2].member.owned(), tps("t", &[4, 5]));
    use CallbackKind::*;
    assert_eq!(
        r.clients[0].callbacks,
        vec![
            (
                Assigned,
                tps("t", &[0, 1, 2, 3, 4, 5]),
                tps("t", &[0, 1, 2, 3, 4, 5])
            ),
            (Revoked, tps("t", &[0, 1, 2, 3, 4, 5]), vec![]),
            (Assigned, tps("t", &[0, 1, 2]), tps("t", &[0, 1, 2])),
            (Revoked, tps("t", &[0, 1, 2]), vec![]),
            (Assigned, tps("t", &[0, 1]), tps("t", &[0, 1])),
        ]
    );
    assert_eq!(
        r.clients[2].callbacks,
        vec![(Assigned, tps("t", &[4, 5]), tps("t", &[4, 5]))]
    );
    let gens: Vec<(i32, usize)> = r
        .group
        .completed
        .iter()
        .map(|c| (c.generation, c.members.len()))
        .collect();
    assert_eq!(gens, vec![(1, 1), (2, 2), (3, 3)]);
    assert!(r.group.completed.iter().all(|c| c.leader == "c0-001"));
    for c in &r.clients {
        assert_eq!(c.member.identity().generation_or_epoch(), 3);
    }
}

/// Brokers 1 to 3 on racks r1 to r3; topic `t` of 6 partitions, partition `p` on broker
/// `p % 3 + 1` alone; members 0, 1, 2 on racks r3, r1, r2, all subscribed to `t`, settled.
fn three_members_on_three_racks(assignors: fn() -> Vec<Box<dyn Assignor>>) -> Rig {
    let mut r = Rig::new(&[("t", 6)]);
    for n in 1..=3 {
        r.broker.racks.insert(n, format!("r{n}"));
    }
    for p in 0..6 {
        r.broker.part(&tp("t", p)).replicas = vec![p % 3 + 1];
    }
    for rack in ["r3", "r1", "r2"] {
        r.add(ClassicConfig {
            client_rack: Some(rack.to_owned()),
            ..config(assignors())
        });
    }
    for i in 0..3 {
        r.subscribe(i, &["t"]);
    }
    r.run_until(secs(60), Rig::all_stable);
    r
}

#[test]
fn the_leader_gives_each_member_the_partitions_with_a_replica_in_its_rack() {
    for (name, assignors) in [
        ("range", range as fn() -> Vec<Box<dyn Assignor>>),
        ("cooperative-sticky", cooperative),
    ] {
        let r = three_members_on_three_racks(assignors);
        // Racks r1, r2, r3 hold partitions {0, 3}, {1, 4}, {2, 5}.
        assert_eq!(r.clients[0].member.owned(), tps("t", &[2, 5]), "{name}");
        assert_eq!(r.clients[1].member.owned(), tps("t", &[0, 3]), "{name}");
        assert_eq!(r.clients[2].member.owned(), tps("t", &[1, 4]), "{name}");
    }
}

#[test]
fn three_members_joining_together_with_roundrobin_form_one_generation() {
    let mut r = Rig::new(&[("t", 6)]);
    for i in 0..3 {
        r.add(config(roundrobin()));
        r.subscribe(i, &["t"]);
    }
    r.run_until(secs(30), Rig::all_stable);
    assert_eq!(
        r.group.completed.len(),
        1,
        "the rebalance waited for every member"
    );
    assert_eq!(r.group.completed[0].protocol, "roundrobin");
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 3]));
    assert_eq!(r.clients[1].member.owned(), tps("t", &[1, 4]));
    assert_eq!(r.clients[2].member.owned(), tps("t", &[2, 5]));
    for c in &r.clients {
        assert_eq!(c.callbacks.len(), 1, "one Assigned each");
        assert_eq!(c.sent_of(JoinGroupRequest::KEY).len(), 2);
    }
}

#[test]
fn the_group_uses_the_assignor_every_member_offers() {
    let mut r = Rig::new(&[("t", 4)]);
    r.add(config(vec![Box::new(RoundRobin), Box::new(Range)]));
    r.add(config(range()));
    r.c(0).intercept = true;
    r.subscribe(0, &["t"]);
    r.subscribe(1, &["t"]);
    let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    let names: Vec<String> = request::<JoinGroupRequest>(&j)
        .protocols
        .iter()
        .map(|p| p.name.clone())
        .collect();
    assert_eq!(names, ["roundrobin", "range"], "in preference order");
    r.pass(0, &j);
    let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    r.pass(0, &j);
    r.c(0).intercept = false;
    r.run_until(secs(10), Rig::all_stable);
    assert_eq!(r.group.completed.last().unwrap().protocol, "range");
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1]));
    assert_eq!(r.clients[1].member.owned(), tps("t", &[2, 3]));
}

#[test]
fn cooperative_members_hand_over_partitions_in_two_rebalances_and_keep_the_rest() {
    let mut r = Rig::new(&[("t", 6)]);
    for _ in 0..3 {
        r.add(config(cooperative()));
    }
    r.subscribe(0, &["t"]);
    r.settle();
    let all = tps("t", &[0, 1, 2, 3, 4, 5]);
    assert_eq!(r.clients[0].member.owned(), all);

    r.subscribe(1, &["t"]);
    r.run_until(secs(30), Rig::all_stable);
    let gens = r.group.completed.len();
    assert_eq!(gens, 3, "one rebalance to revoke, one to hand over");
    let c0: BTreeSet<TopicPartition> = r.clients[0].member.owned().into_iter().collect();
    let c1: BTreeSet<TopicPartition> = r.clients[1].member.owned().into_iter().collect();
    assert_eq!((c0.len(), c1.len()), (3, 3));
    assert!(c0.is_disjoint(&c1));
    use CallbackKind::*;
    let moved: Vec<TopicPartition> = c1.iter().cloned().collect();
    let kept: Vec<TopicPartition> = c0.iter().cloned().collect();
    assert_eq!(
        r.clients[0].callbacks,
        vec![
            (Assigned, all.clone(), all.clone()),
            (Revoked, moved.clone(), kept.clone()),
            (Assigned, vec![], kept.clone()),
            (Assigned, vec![], kept.clone()),
        ],
        "only the partitions that move are revoked"
    );
    assert_eq!(
        r.clients[1].callbacks,
        vec![(Assigned, vec![], vec![]), (Assigned, moved.clone(), moved)]
    );

    r.subscribe(2, &["t"]);
    r.run_until(secs(30), Rig::all_stable);
    let mut union = BTreeSet::new();
    for (i, c) in r.clients.iter().enumerate() {
        let owned = c.member.owned();
        assert_eq!(owned.len(), 2, "client {i}: {owned:?}");
        union.extend(owned);
        // A partition a member keeps never appears in its Revoked callbacks.
        for (kind, parts, after) in &c.callbacks {
            if *kind == Revoked {
                assert!(parts.iter().all(|p| !after.contains(p)));
                assert!(parts.iter().all(|p| !c.member.owned().contains(p)));
            }
        }
    }
    assert_eq!(union.into_iter().collect::<Vec<_>>(), all);
    assert!(r.clients[0].callbacks.iter().all(|(k, _, _)| *k != Lost));
}

#[test]
fn the_leader_waits_for_the_partition_counts_of_topics_only_others_subscribe_to() {
    let mut r = Rig::new(&[("a", 2), ("b", 2)]);
    r.add(config(range()));
    r.add(config(range()));
    r.subscribe(0, &["a"]);
    r.settle();
    assert_eq!(r.clients[0].cluster.partition_count("b"), None);
    r.subscribe(1, &["a", "b", "missing"]);
    r.run_until(secs(30), Rig::all_stable);
    assert_eq!(r.clients[0].member.owned(), tps("a", &[0]));
    let mut want = tps("a", &[1]);
    want.extend(tps("b", &[0, 1]));
    assert_eq!(r.clients[1].member.owned(), want);
    assert_eq!(r.clients[0].cluster.partition_count("b"), Some(2));
}

#[test]
fn the_leader_rejoins_when_a_subscribed_topic_gains_partitions() {
    let mut r = Rig::new(&[("t", 2)]);
    r.add(config(range()));
    r.subscribe(0, &["t"]);
    r.settle();
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1]));
    let topic = r.broker.topics.get_mut("t").unwrap();
    let mut p = topic.parts[&0].clone();
    p.log_end = 0;
    topic.parts.insert(2, p);
    // The next metadata refresh (metadata.max.age.ms) shows the new partition.
    r.run_until(secs(400), |r| r.clients[0].member.owned().len() == 3);
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1, 2]));
    assert_eq!(r.group.completed.len(), 2);
}

#[test]
fn a_leader_with_a_rack_rebalances_when_a_partitions_replicas_move_to_other_racks() {
    for (rack, rebalances) in [(Some("r1"), true), (None, false)] {
        let mut r = Rig::new(&[("t", 2)]);
        for n in 1..=3 {
            r.broker.racks.insert(n, format!("r{n}"));
        }
        r.add(ClassicConfig {
            client_rack: rack.map(str::to_owned),
            ..config(range())
        });
        r.subscribe(0, &["t"]);
        r.settle();
        assert_eq!(r.group.completed.len(), 1);
        // Partition 1 moves from broker 1 (r1) to brokers 2 and 3.
        r.broker.part(&tp("t", 1)).replicas = vec![2, 3];
        // Two metadata refreshes (metadata.max.age.ms) later.
        r.run_for(secs(700));
        assert_eq!(
            r.group.completed.len() == 2,
            rebalances,
            "client.rack {rack:?}: {} generations",
            r.group.completed.len()
        );
    }
}

#[test]
fn a_changed_subscription_rejoins_and_a_cooperative_member_revokes_only_the_dropped_topic() {
    let mut r = Rig::new(&[("a", 2), ("b", 2)]);
    r.add(config(cooperative()));
    r.subscribe(0, &["a", "b"]);
    r.settle();
    assert_eq!(r.clients[0].member.owned().len(), 4);
    r.subscribe(0, &["a"]);
    r.run_until(secs(10), Rig::all_stable);
    use CallbackKind::*;
    assert_eq!(
        r.clients[0].callbacks[1..],
        [
            (Revoked, tps("b", &[0, 1]), tps("a", &[0, 1])),
            (Assigned, vec![], tps("a", &[0, 1])),
        ]
    );
    assert_eq!(r.group.completed.len(), 2);
    // The same subscription again changes nothing.
    r.subscribe(0, &["a"]);
    r.run_for(secs(10));
    assert_eq!(r.group.completed.len(), 2);
}

#[cfg(feature = "regex")]
#[test]
fn a_pattern_subscription_follows_the_topics_the_metadata_shows() {
    let mut r = Rig::new(&[("t1", 1), ("t2", 1), ("x", 1)]);
    r.add(config(range()));
    r.c(0).intercept = true;
    let now = r.now();
    let pattern = crate::group::member::TopicPattern::new("t[0-9]").unwrap();
    r.clients[0]
        .member
        .subscribe(Subscription::Pattern(pattern), now);
    let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    let (_, sub) = subscription_of(&j);
    assert_eq!(sub.topics, ["t1", "t2"], "matched after fresh metadata");
    r.c(0).intercept = false;
    r.pass(0, &j);
    r.run_until(secs(5), Rig::all_stable);
    let mut want = tps("t1", &[0]);
    want.extend(tps("t2", &[0]));
    assert_eq!(r.clients[0].member.owned(), want);

    r.broker = r.broker.clone().topic("t3", &[1], 10);
    r.run_until(secs(400), |r| r.clients[0].member.owned().len() == 3);
    assert!(r.clients[0].member.owned().contains(&tp("t3", 0)));
}

// ----- the leader and what other clients send -------------------------------------------

/// Subscriptions no consumer protocol reader can decode, by what is wrong with them.
fn undecodable_subscriptions() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("empty", vec![]),
        ("a negative version", vec![0xff, 0xff, 0, 0, 0, 0]),
        ("a version and nothing else", vec![0, 3]),
        (
            "i32::MAX topics in ten bytes",
            vec![0, 3, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0],
        ),
        (
            "a topic name that is not UTF-8",
            vec![0, 0, 0, 0, 0, 1, 0, 2, 0xff, 0xfe, 0xff, 0xff, 0xff, 0xff],
        ),
        ("JSON", br#"{"topics":["t"],"version":3}"#.to_vec()),
    ]
}

/// A subscription to `topics` at version 3 (what the Java client writes).
fn subscription_bytes(topics: &[&str]) -> Vec<u8> {
    ConsumerProtocolSubscription {
        topics: topics.iter().map(|t| (*t).to_owned()).collect(),
        ..Default::default()
    }
    .encode()
}

/// Two of our members on `t` (4 partitions) with range, and a member of another client,
/// `foreign`, offering `metadata` for range; all stable.
fn beside_a_foreign_member(foreign: &str, metadata: Vec<u8>) -> Rig {
    let mut r = Rig::new(&[("t", 4)]);
    r.add(config(range()));
    r.add(config(range()));
    r.subscribe(0, &["t"]);
    r.settle();
    let now = r.now();
    r.group
        .add_foreign(foreign, vec![("range".to_owned(), metadata)], now);
    r.subscribe(1, &["t"]);
    r.run_until(secs(30), Rig::all_stable);
    let last = r.group.completed.last().unwrap();
    assert_eq!(last.leader, "c0-001", "ours leads");
    assert_eq!(last.members, ["c0-001", "c1-002", foreign]);
    r
}

#[test]
fn the_leader_assigns_nothing_to_a_member_whose_subscription_does_not_decode_and_the_rest_normally()
{
    for (what, garbage) in undecodable_subscriptions() {
        assert!(
            ConsumerProtocolSubscription::decode(&garbage).is_err(),
            "{what}"
        );
        let mut r = beside_a_foreign_member("zz-broken", garbage);
        // The broken member is left out of the assignor's input; ours share the topic.
        assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1]), "{what}");
        assert_eq!(r.clients[1].member.owned(), tps("t", &[2, 3]), "{what}");
        // It gets an empty assignment it can decode (not none, which means "rejoin").
        let theirs = r.group.assignment_of("zz-broken").unwrap();
        assert_eq!(
            ConsumerProtocolAssignment::decode(theirs).unwrap(),
            ConsumerProtocolAssignment::default(),
            "{what}"
        );
        // A warning in the leader's log, nothing for the applications.
        for c in &r.clients {
            assert!(c.errors.is_empty(), "{what}: {:?}", c.errors);
        }
        // And that generation stands: no rebalance follows.
        let generations = r.group.completed.len();
        r.run_for(secs(60));
        assert_eq!(r.group.completed.len(), generations, "{what}");
        assert!(r.all_stable(), "{what}");
    }
}

#[test]
fn the_leaders_warning_about_an_undecodable_subscription_names_the_member_and_the_fault_not_the_bytes(
) {
    let mut huge = vec![0, 3, 0x7f, 0xff, 0xff, 0xff];
    huge.resize(1 << 20, b'A');
    let e = ConsumerProtocolSubscription::decode(&huge).unwrap_err();
    let line = undecodable_subscription(
        "g",
        GenerationId(4),
        "rogue-1\n[fake log line]",
        Some("host-9"),
        &huge,
        &e,
    );
    assert_eq!(
        line,
        "group g: generation 4: member \"rogue-1\\n[fake log line]\" (group.instance.id \
         \"host-9\"): its subscription does not decode (ConsumerProtocolSubscription.topics: \
         bad length or count 2147483647; version 3, 1048576 bytes); assigning it nothing \
         and the other members as usual"
    );
    let e = ConsumerProtocolSubscription::decode(&[]).unwrap_err();
    let line = undecodable_subscription("g", GenerationId(4), "m", None, &[], &e);
    assert_eq!(
        line,
        "group g: generation 4: member \"m\": its subscription is empty; assigning it \
         nothing and the other members as usual"
    );
}

#[test]
fn a_member_with_a_newer_subscription_version_is_read_by_the_part_v3_knows_and_assigned_normally() {
    // Version 9 with a field appended that v3 does not know: read as v3 (Java does the
    // same), so the member gets its share of what it subscribes to.
    let mut v9 = subscription_bytes(&["t"]);
    v9[..2].copy_from_slice(&9i16.to_be_bytes());
    v9.extend_from_slice(&[0, 0, 0, 3, 1, 2, 3]);
    let r = beside_a_foreign_member("zz-newer", v9);
    // Range over three members of `t` (4 partitions), in member id order.
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1]));
    assert_eq!(r.clients[1].member.owned(), tps("t", &[2]));
    let theirs = r.group.assignment_of("zz-newer").unwrap();
    assert_eq!(
        theirs[..2],
        [0, 3],
        "the assignment is written at the version we know"
    );
    assert_eq!(assigned(theirs), tps("t", &[3]));
    assert!(r.clients.iter().all(|c| c.errors.is_empty()));
}

#[test]
fn a_member_subscribing_to_no_topics_gets_an_empty_assignment_and_the_others_share_everything() {
    let r = beside_a_foreign_member("zz-idle", subscription_bytes(&[]));
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1]));
    assert_eq!(r.clients[1].member.owned(), tps("t", &[2, 3]));
    let theirs = r.group.assignment_of("zz-idle").unwrap();
    assert_eq!(
        ConsumerProtocolAssignment::decode(theirs).unwrap(),
        ConsumerProtocolAssignment::default()
    );
}

#[test]
fn a_member_subscribing_to_thousands_of_missing_topics_gets_its_share_after_one_metadata_refresh() {
    let missing: Vec<String> = (0..20_000).map(|i| format!("missing-{i:05}")).collect();
    let mut topics: Vec<&str> = missing.iter().map(String::as_str).collect();
    topics.push("t");
    let mut r = Rig::new(&[("t", 4)]);
    r.add(config(range()));
    r.subscribe(0, &["t"]);
    r.settle();
    let (sim_start, metadata) = (r.now(), r.clients[0].metadata);
    r.group.add_foreign(
        "zz-greedy",
        vec![("range".to_owned(), subscription_bytes(&topics))],
        sim_start,
    );
    r.run_until(secs(30), Rig::all_stable);
    // The leader learned of the rebalance from its next heartbeat, asked for the counts
    // once and assigned when the answer came: the missing topics are skipped, the
    // existing one is shared.
    assert!(r.now() <= sim_start + secs(3), "{:?}", r.now() - sim_start);
    assert_eq!(r.clients[0].metadata, metadata + 1);
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1]));
    assert_eq!(
        assigned(r.group.assignment_of("zz-greedy").unwrap()),
        tps("t", &[2, 3])
    );
    assert!(r.clients[0].errors.is_empty());
}

#[test]
fn log_lines_name_at_most_twenty_topics_and_count_the_rest() {
    let few: Vec<String> = (0..3).map(|i| format!("t{i}")).collect();
    assert_eq!(some_of(&few, MAX_LOGGED_TOPICS), r#"["t0", "t1", "t2"]"#);
    let many: Vec<String> = (0..25).map(|i| format!("t{i}")).collect();
    let line = some_of(&many, MAX_LOGGED_TOPICS);
    assert!(line.ends_with(r#""t19"] and 5 more"#), "{line}");
    assert!(!line.contains("t20"), "{line}");
}

// ----- errors: JoinGroup --------------------------------------------------------------

#[test]
fn join_unknown_member_id_loses_the_partitions_and_rejoins_with_an_empty_member_id() {
    let mut r = stable_member(cooperative());
    let j = rebalance(&mut r);
    let (req, sub) = subscription_of(&j);
    assert_eq!(req.member_id, "c0-001");
    assert_eq!(
        from_wire(&sub.owned_partitions)
            .into_iter()
            .collect::<Vec<_>>(),
        tps("t", &[0, 1, 2]),
        "cooperative: the owned partitions travel with the join"
    );
    assert_eq!(sub.generation_id, 1);
    let at = r.now();
    r.answer_error(0, &j, ErrorCode::UNKNOWN_MEMBER_ID);
    let j2 = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    assert_eq!(r.now(), at, "retried at once");
    let (req, sub) = subscription_of(&j2);
    assert_eq!(req.member_id, "");
    assert!(sub.owned_partitions.is_empty());
    assert_eq!(sub.generation_id, -1);
    let c = &r.clients[0];
    assert_eq!(
        c.callbacks.last().unwrap(),
        &(CallbackKind::Lost, tps("t", &[0, 1, 2]), vec![])
    );
    let last = c.identities.last().unwrap();
    assert_eq!((last.generation_or_epoch(), last.member_id()), (-1, ""));
    assert!(c.errors.is_empty());
}

#[test]
fn join_rebalance_in_progress_and_load_in_progress_retry_after_a_backoff_with_the_same_id() {
    for code in [
        ErrorCode::REBALANCE_IN_PROGRESS,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
    ] {
        let mut r = stable_member(range());
        let j = rebalance(&mut r);
        let callbacks = r.clients[0].callbacks.clone();
        assert_eq!(
            callbacks.last().unwrap(),
            &(CallbackKind::Revoked, tps("t", &[0, 1, 2]), vec![]),
            "eager: everything is revoked before joining"
        );
        let at = r.now();
        let finds = r.clients[0].finds;
        r.answer_error(0, &j, code);
        let j2 = r.next_request(0, JoinGroupRequest::KEY, secs(2));
        let waited = r.now() - at;
        assert!(waited >= ms(80) && waited <= ms(120), "{code}: {waited:?}");
        assert_eq!(request::<JoinGroupRequest>(&j2).member_id, "c0-001");
        let c = &r.clients[0];
        assert_eq!(c.callbacks, callbacks, "{code}: no callback");
        assert_eq!(c.finds, finds, "{code}: the coordinator is still known");
        assert!(c.errors.is_empty());
    }
}

#[test]
fn join_coordinator_errors_find_the_coordinator_again() {
    for code in [
        ErrorCode::COORDINATOR_NOT_AVAILABLE,
        ErrorCode::NOT_COORDINATOR,
    ] {
        let mut r = stable_member(range());
        let j = rebalance(&mut r);
        let finds = r.clients[0].finds;
        r.answer_error(0, &j, code);
        assert_eq!(r.c(0).coordinator.node(), None, "{code}: marked unknown");
        let j2 = r.next_request(0, JoinGroupRequest::KEY, secs(3));
        assert_eq!(r.clients[0].finds, finds + 1, "{code}: found again");
        assert_eq!(request::<JoinGroupRequest>(&j2).member_id, "c0-001");
    }
}

/// The fatal errors and what their message must name.
fn fatal_cases() -> Vec<(ErrorCode, &'static [&'static str])> {
    vec![
        (
            ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
            &["partition.assignment.strategy", "range"],
        ),
        (
            ErrorCode::INVALID_SESSION_TIMEOUT,
            &[
                "session.timeout.ms=45000",
                "group.min.session.timeout.ms",
                "group.max.session.timeout.ms",
            ],
        ),
        (ErrorCode::INVALID_GROUP_ID, &["group.id"]),
        (ErrorCode::GROUP_AUTHORIZATION_FAILED, &["not authorized"]),
        (ErrorCode::GROUP_MAX_SIZE_REACHED, &["group.max.size"]),
        (ErrorCode::FENCED_INSTANCE_ID, &["group.instance.id"]),
        (ErrorCode::UNSUPPORTED_VERSION, &["version"]),
    ]
}

/// Checks that client 0 stopped for good with one fatal `code` naming `words`, and sends
/// nothing for a minute.
fn assert_fatal(r: &mut Rig, code: ErrorCode, words: &[&str]) {
    r.assert_fatal(0, code, words);
}

#[test]
fn await_join_to_fatal_on_a_fatal_join_error_with_a_message_naming_the_setting() {
    for (code, words) in fatal_cases() {
        let mut r = Rig::new(&[("t", 3)]);
        r.add(config(range()));
        r.c(0).intercept = true;
        r.subscribe(0, &["t"]);
        let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
        r.answer_error(0, &j, code);
        assert_fatal(&mut r, code, words);
    }
}

#[test]
fn await_join_to_need_join_on_an_unexpected_join_error_reported_once_and_retried_after_a_backoff() {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(config(range()));
    r.c(0).ext.inject = vec![(
        JoinGroupRequest::KEY,
        ErrorCode::UNKNOWN_SERVER_ERROR,
        Some(5),
    )];
    r.subscribe(0, &["t"]);
    r.run_until(secs(10), Rig::all_stable);
    let c = &r.clients[0];
    assert_eq!(c.errors.len(), 1, "one report per streak: {:?}", c.errors);
    assert!(!c.errors[0].1);
    let joins = c.sent_of(JoinGroupRequest::KEY);
    assert!(joins.windows(2).take(5).all(|w| w[1] - w[0] >= ms(80)));
    assert_eq!(c.member.owned(), tps("t", &[0, 1, 2]));
}

#[test]
fn need_join_to_fatal_when_the_broker_lacks_join_group_with_an_unsupported_error_naming_the_api() {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(config(range()));
    r.c(0).versions = Versions::new([(3, 1, 13), (10, 0, 6), (18, 0, 4)]);
    r.subscribe(0, &["t"]);
    r.run_for(secs(5));
    let c = &r.clients[0];
    assert!(c.member.is_fatal());
    assert_eq!(c.errors.len(), 1);
    assert_eq!(c.errors[0].0.kind(), crate::error::ErrorKind::Unsupported);
    assert!(
        c.errors[0].0.to_string().contains("JoinGroup"),
        "{}",
        c.errors[0].0
    );
    assert!(c.sent.is_empty());
}

#[test]
fn need_join_to_fatal_for_a_static_member_when_the_broker_lacks_join_group_v5() {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(static_config(range(), "host-a"));
    r.c(0).versions = Versions::new([(3, 1, 13), (10, 0, 6), (11, 0, 4), (18, 0, 4)]);
    r.subscribe(0, &["t"]);
    r.run_for(secs(5));
    let c = &r.clients[0];
    assert!(c.member.is_fatal());
    let text = c.errors[0].0.to_string();
    assert!(
        text.contains("group.instance.id=host-a") && text.contains("v5"),
        "{text}"
    );
}

// ----- errors: SyncGroup --------------------------------------------------------------

/// A stable member's rebalance up to its SyncGroup (the JoinGroup goes to the group).
fn sync_request(r: &mut Rig) -> Transmit {
    let j = rebalance(r);
    r.pass(0, &j);
    r.next_request(0, SyncGroupRequest::KEY, Duration::ZERO)
}

#[test]
fn sync_rebalance_in_progress_rejoins_at_once_with_the_same_member_id() {
    let mut r = stable_member(range());
    let s = sync_request(&mut r);
    let callbacks = r.clients[0].callbacks.len();
    let at = r.now();
    r.answer_error(0, &s, ErrorCode::REBALANCE_IN_PROGRESS);
    let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    assert_eq!(r.now(), at);
    assert_eq!(request::<JoinGroupRequest>(&j).member_id, "c0-001");
    assert_eq!(r.clients[0].callbacks.len(), callbacks);
    // The rejoin goes through: the member is stable again.
    r.c(0).intercept = false;
    r.pass(0, &j);
    r.run_until(secs(5), Rig::all_stable);
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1, 2]));
}

#[test]
fn sync_unknown_member_id_and_illegal_generation_lose_the_partitions() {
    for (code, member_after) in [
        (ErrorCode::UNKNOWN_MEMBER_ID, ""),
        (ErrorCode::ILLEGAL_GENERATION, "c0-001"),
    ] {
        let mut r = stable_member(cooperative());
        let s = sync_request(&mut r);
        assert!(
            r.clients[0].callbacks.len() == 1,
            "cooperative: nothing revoked before the join"
        );
        r.answer_error(0, &s, code);
        let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
        let (req, sub) = subscription_of(&j);
        assert_eq!(req.member_id, member_after, "{code}");
        assert_eq!(sub.generation_id, -1, "{code}");
        assert!(sub.owned_partitions.is_empty(), "{code}");
        let c = &r.clients[0];
        assert_eq!(
            c.callbacks.last().unwrap(),
            &(CallbackKind::Lost, tps("t", &[0, 1, 2]), vec![]),
            "{code}: lost, not revoked"
        );
        assert_eq!(c.member.identity().generation_or_epoch(), -1);
        assert_eq!(c.member.identity().member_id(), member_after);
    }
}

#[test]
fn sync_coordinator_errors_find_the_coordinator_again_and_rejoin() {
    for code in [
        ErrorCode::COORDINATOR_NOT_AVAILABLE,
        ErrorCode::NOT_COORDINATOR,
    ] {
        let mut r = stable_member(range());
        let s = sync_request(&mut r);
        let finds = r.clients[0].finds;
        r.answer_error(0, &s, code);
        assert_eq!(r.c(0).coordinator.node(), None, "{code}");
        let j = r.next_request(0, JoinGroupRequest::KEY, secs(3));
        assert_eq!(r.clients[0].finds, finds + 1);
        assert_eq!(request::<JoinGroupRequest>(&j).member_id, "c0-001");
    }
}

#[test]
fn sync_load_in_progress_rejoins_after_a_backoff() {
    let mut r = stable_member(cooperative());
    let s = sync_request(&mut r);
    let at = r.now();
    r.answer_error(0, &s, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
    let j = r.next_request(0, JoinGroupRequest::KEY, secs(2));
    let waited = r.now() - at;
    assert!(waited >= ms(80) && waited <= ms(120), "{waited:?}");
    assert_eq!(request::<JoinGroupRequest>(&j).member_id, "c0-001");
    let c = &r.clients[0];
    assert_eq!(c.callbacks.len(), 1, "the partitions are kept");
    assert_eq!(c.member.owned(), tps("t", &[0, 1, 2]));
    assert!(c.errors.is_empty());
}

#[test]
fn heartbeats_continue_while_awaiting_sync_and_rebalance_in_progress_is_ignored_there() {
    let mut r = stable_member(range());
    let s = sync_request(&mut r);
    let hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
    assert_eq!(r.clients[0].kind(), Kind::AwaitSync);
    assert_eq!(request::<HeartbeatRequest>(&hb).generation_id, 2);
    r.answer_error(0, &hb, ErrorCode::REBALANCE_IN_PROGRESS);
    assert_eq!(r.clients[0].kind(), Kind::AwaitSync);
    r.pass(0, &s);
    r.run_for(secs(1));
    let c = &r.clients[0];
    assert_eq!(c.kind(), Kind::Stable, "no rejoin asked for meanwhile");
    assert_eq!(c.sent_of(JoinGroupRequest::KEY).len(), 3);
}

#[test]
fn await_sync_to_fatal_on_a_fatal_sync_error() {
    for (code, words) in fatal_cases() {
        if !matches!(
            code,
            ErrorCode::FENCED_INSTANCE_ID
                | ErrorCode::GROUP_AUTHORIZATION_FAILED
                | ErrorCode::INCONSISTENT_GROUP_PROTOCOL
        ) {
            continue;
        }
        let mut r = stable_member(range());
        let s = sync_request(&mut r);
        r.answer_error(0, &s, code);
        assert_fatal(&mut r, code, words);
    }
}

#[test]
fn await_sync_to_need_join_on_an_empty_assignment_reported_and_retried_after_a_backoff() {
    let mut r = stable_member(range());
    let s = sync_request(&mut r);
    let callbacks = r.clients[0].callbacks.len();
    let resp = SyncGroupResponse {
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignment: Bytes(vec![]),
        ..Default::default()
    };
    let at = r.now();
    r.answer(0, &s, sim::response::<SyncGroupRequest>(&s, &resp));
    let c = &r.clients[0];
    assert_eq!(c.errors.len(), 1);
    assert!(!c.errors[0].1);
    assert!(
        c.errors[0].0.to_string().contains("empty assignment"),
        "{}",
        c.errors[0].0
    );
    assert_eq!(
        c.callbacks.len(),
        callbacks,
        "no Assigned for an empty payload"
    );
    let j = r.next_request(0, JoinGroupRequest::KEY, secs(2));
    assert!(r.now() - at >= ms(80));
    assert_eq!(request::<JoinGroupRequest>(&j).member_id, "c0-001");

    // A decodable assignment without partitions is fine: Assigned([]).
    r.pass(0, &j);
    let s = r.next_request(0, SyncGroupRequest::KEY, Duration::ZERO);
    let resp = SyncGroupResponse {
        protocol_name: Some("range".into()),
        assignment: Bytes(assignment_bytes(&[])),
        ..Default::default()
    };
    r.answer(0, &s, sim::response::<SyncGroupRequest>(&s, &resp));
    let c = &r.clients[0];
    assert_eq!(
        c.callbacks.last().unwrap(),
        &(CallbackKind::Assigned, vec![], vec![])
    );
    assert_eq!(c.kind(), Kind::Stable);
}

#[test]
fn await_sync_to_need_join_when_the_assignment_names_unsubscribed_topics() {
    let mut r = stable_member(cooperative());
    let s = sync_request(&mut r);
    let resp = SyncGroupResponse {
        protocol_name: Some("cooperative-sticky".into()),
        assignment: Bytes(assignment_bytes(&[tp("t", 0), tp("other", 0)])),
        ..Default::default()
    };
    r.answer(0, &s, sim::response::<SyncGroupRequest>(&s, &resp));
    let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    let c = &r.clients[0];
    assert_eq!(c.callbacks.len(), 1, "no callback for a refused assignment");
    assert_eq!(c.member.owned(), tps("t", &[0, 1, 2]));
    assert_eq!(request::<JoinGroupRequest>(&j).member_id, "c0-001");
}

#[test]
fn await_sync_to_fatal_when_the_answer_names_another_assignor() {
    let mut r = stable_member(range());
    let s = sync_request(&mut r);
    let resp = SyncGroupResponse {
        protocol_name: Some("roundrobin".into()),
        assignment: Bytes(assignment_bytes(&tps("t", &[0]))),
        ..Default::default()
    };
    r.answer(0, &s, sim::response::<SyncGroupRequest>(&s, &resp));
    assert!(r.clients[0].member.is_fatal());
    assert_eq!(
        r.clients[0].errors[0].0.kafka_code(),
        Some(ErrorCode::INCONSISTENT_GROUP_PROTOCOL.code())
    );
}

#[test]
fn malformed_join_and_sync_answers_close_the_link_and_rejoin_after_a_backoff() {
    let mut r = stable_member(range());
    let s = sync_request(&mut r);
    let at = r.now();
    r.answer(0, &s, sim::malformed());
    let j = r.next_request(0, JoinGroupRequest::KEY, secs(2));
    assert!(r.now() - at >= ms(50));
    assert_eq!(r.clients[0].errors.len(), 1);
    let at = r.now();
    r.answer(0, &j, sim::malformed());
    let _j = r.next_request(0, JoinGroupRequest::KEY, secs(2));
    assert!(r.now() - at >= ms(50));
    assert_eq!(r.clients[0].errors.len(), 2, "two distinct problems");
}

// ----- errors: Heartbeat --------------------------------------------------------------

#[test]
fn stable_revokes_everything_before_rejoining_on_heartbeat_rebalance_in_progress_when_eager() {
    let mut r = stable_member(range());
    let j = rebalance(&mut r);
    let (_, sub) = subscription_of(&j);
    assert!(sub.owned_partitions.is_empty());
    assert_eq!(
        r.clients[0].callbacks[1],
        (CallbackKind::Revoked, tps("t", &[0, 1, 2]), vec![])
    );
    assert_eq!(r.clients[0].member.owned(), vec![]);
}

#[test]
fn stable_keeps_the_partitions_while_rejoining_on_heartbeat_rebalance_in_progress_when_cooperative()
{
    let mut r = stable_member(cooperative());
    let j = rebalance(&mut r);
    let (_, sub) = subscription_of(&j);
    assert_eq!(sub.owned_partitions.len(), 1);
    assert_eq!(sub.generation_id, 1);
    assert_eq!(r.clients[0].callbacks.len(), 1, "no callback");
    assert_eq!(r.clients[0].member.owned(), tps("t", &[0, 1, 2]));
    assert_eq!(
        r.clients[0].member.identity().generation_or_epoch(),
        1,
        "still valid for commits"
    );
    r.pass(0, &j);
    let s = r.next_request(0, SyncGroupRequest::KEY, Duration::ZERO);
    r.pass(0, &s);
    let c = &r.clients[0];
    assert_eq!(
        c.callbacks.last().unwrap(),
        &(CallbackKind::Assigned, vec![], tps("t", &[0, 1, 2])),
        "nothing new, nothing revoked"
    );
    assert_eq!(c.member.identity().generation_or_epoch(), 2);
}

#[test]
fn heartbeat_unknown_member_id_and_illegal_generation_lose_the_partitions() {
    for (code, member_after) in [
        (ErrorCode::UNKNOWN_MEMBER_ID, ""),
        (ErrorCode::ILLEGAL_GENERATION, "c0-001"),
    ] {
        for assignors in [range(), cooperative()] {
            let mut r = stable_member(assignors);
            let hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
            let req = request::<HeartbeatRequest>(&hb);
            assert_eq!((req.generation_id, req.member_id.as_str()), (1, "c0-001"));
            r.answer_error(0, &hb, code);
            let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
            assert_eq!(request::<JoinGroupRequest>(&j).member_id, member_after);
            let c = &r.clients[0];
            assert_eq!(
                c.callbacks[1..],
                [(CallbackKind::Lost, tps("t", &[0, 1, 2]), vec![])],
                "{code}"
            );
            assert_eq!(
                c.identities.last().unwrap(),
                &Identity::classic(GenerationId::UNKNOWN, MemberId::new(member_after), None,)
            );
        }
    }
}

#[test]
fn heartbeat_coordinator_errors_find_the_coordinator_again_without_rejoining() {
    for code in [
        ErrorCode::COORDINATOR_NOT_AVAILABLE,
        ErrorCode::NOT_COORDINATOR,
    ] {
        let mut r = stable_member(range());
        let hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
        let finds = r.clients[0].finds;
        r.answer_error(0, &hb, code);
        assert_eq!(r.c(0).coordinator.node(), None, "{code}");
        let hb2 = r.next_request(0, HeartbeatRequest::KEY, secs(4));
        assert_eq!(r.clients[0].finds, finds + 1);
        let req = request::<HeartbeatRequest>(&hb2);
        assert_eq!((req.generation_id, req.member_id.as_str()), (1, "c0-001"));
        let c = &r.clients[0];
        assert_eq!(c.callbacks.len(), 1);
        assert_eq!(c.kind(), Kind::Stable);
        assert!(c.sent_of(JoinGroupRequest::KEY).len() == 2, "no rejoin");
    }
}

#[test]
fn heartbeat_load_in_progress_and_a_lost_link_retry_after_a_backoff() {
    let mut r = stable_member(range());
    let hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
    let at = r.now();
    r.answer_error(0, &hb, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
    let hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
    let waited = r.now() - at;
    assert!(waited >= ms(80) && waited <= ms(120), "{waited:?}");
    // The link closes under the heartbeat: rediscovery, and a heartbeat after a backoff.
    let finds = r.clients[0].finds;
    let at = r.now();
    r.close(0, hb.route, "reset by peer");
    r.settle();
    let _hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
    assert!(r.now() - at >= ms(100), "the second failure waits longer");
    assert_eq!(r.clients[0].finds, finds + 1);
    assert_eq!(r.clients[0].kind(), Kind::Stable);
    assert!(r.clients[0].errors.is_empty());
}

#[test]
fn stable_to_fatal_on_a_fatal_heartbeat_error() {
    for code in [
        ErrorCode::FENCED_INSTANCE_ID,
        ErrorCode::GROUP_AUTHORIZATION_FAILED,
    ] {
        let mut r = stable_member_with(static_config(range(), "host-a"));
        let hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
        assert_eq!(
            request::<HeartbeatRequest>(&hb)
                .group_instance_id
                .as_deref(),
            Some("host-a")
        );
        r.answer_error(0, &hb, code);
        let words: &[&str] = if code == ErrorCode::FENCED_INSTANCE_ID {
            &["group.instance.id=host-a"]
        } else {
            &["not authorized"]
        };
        assert_fatal(&mut r, code, words);
    }
}

#[test]
fn stable_ignores_a_heartbeat_answer_for_an_older_generation() {
    let mut r = stable_member(cooperative());
    let hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
    // Meanwhile another heartbeat path triggers a rejoin and a new generation.
    r.answer_error(0, &hb, ErrorCode::REBALANCE_IN_PROGRESS);
    let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    r.pass(0, &j);
    let s = r.next_request(0, SyncGroupRequest::KEY, Duration::ZERO);
    let hb2 = r.next_request(0, HeartbeatRequest::KEY, secs(4));
    assert_eq!(request::<HeartbeatRequest>(&hb2).generation_id, 2);
    r.pass(0, &s);
    // Forge a stale heartbeat answer: a heartbeat of generation 2 answered
    // ILLEGAL_GENERATION after generation 2 ended would reset; one of generation 1 must not.
    let member = &mut r.clients[0].member;
    member.heartbeat = Some(HeartbeatSent {
        id: RequestId(999),
        route: hb2.route,
        generation: GenerationId(1),
        member_id: MemberId::new("c0-001"),
    });
    r.clients[0].in_flight.insert(RequestId(999), hb2.route);
    r.push_answer(Answer {
        id: RequestId(999),
        ..error_reply(0, &hb2, ErrorCode::ILLEGAL_GENERATION)
    });
    r.settle();
    let c = &r.clients[0];
    assert_eq!(c.kind(), Kind::Stable);
    assert_eq!(c.member.identity().generation_or_epoch(), 2);
    assert!(c.callbacks.iter().all(|(k, _, _)| *k != CallbackKind::Lost));
}

// ----- the poll interval, the session ---------------------------------------------------

#[test]
fn stable_to_need_join_when_the_poll_interval_expires_sends_leave_group_loses_the_partitions_and_waits_for_a_poll(
) {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(config(range()));
    r.subscribe(0, &["t"]);
    r.settle();
    let polled = r.now();
    r.c(0).polling = false;
    r.c(0).callback_delay = None;
    r.run_until(secs(301), |r| r.clients[0].pending.is_some());
    assert_eq!(
        r.now(),
        polled + secs(300),
        "expires at max.poll.interval.ms"
    );
    let c = &r.clients[0];
    assert_eq!(
        c.callbacks.last().unwrap(),
        &(CallbackKind::Lost, tps("t", &[0, 1, 2]), vec![])
    );
    assert_eq!(c.sent.last().unwrap().0, LeaveGroupRequest::KEY);
    assert_eq!(c.member.identity().generation_or_epoch(), -1);
    assert_eq!(c.member.identity().member_id(), "");
    assert_eq!(
        r.group.state,
        GroupState::Empty,
        "the LeaveGroup went through"
    );
    // No rejoin while the user thread is away.
    let sent = r.clients[0].sent.len();
    r.run_for(secs(120));
    assert_eq!(r.clients[0].sent.len(), sent);
    assert_eq!(r.clients[0].member.poll_timeout(r.now()), None, "idle");
    // The user thread runs the Lost callback: it is polling again.
    r.finish_callback(0);
    r.c(0).callback_delay = Some(Duration::ZERO);
    r.run_until(secs(5), Rig::all_stable);
    let c = &r.clients[0];
    assert_eq!(c.member.owned(), tps("t", &[0, 1, 2]));
    assert_eq!(c.member.identity().member_id(), "c0-002");
}

#[test]
fn need_join_after_a_poll_interval_expiry_with_nothing_owned_joins_once_the_user_polls() {
    let mut r = Rig::new(&[("t", 1)]);
    r.add(config(range()));
    r.add(config(range()));
    r.subscribe(0, &["t"]);
    r.subscribe(1, &["t"]);
    r.run_until(secs(10), Rig::all_stable);
    assert!(r.clients[1].member.owned().is_empty());
    r.c(1).polling = false;
    let lost_before = r.clients[1].callbacks.len();
    r.run_for(secs(301));
    let c = &r.clients[1];
    assert_eq!(c.callbacks.len(), lost_before, "nothing owned: no callback");
    assert!(c.sent_of(LeaveGroupRequest::KEY).len() == 1);
    let sent = c.sent.len();
    r.run_for(secs(60));
    assert_eq!(r.clients[1].sent.len(), sent, "waits for the user");
    r.c(1).polling = true;
    r.run_until(secs(10), Rig::all_stable);
    assert_eq!(r.group.member_ids().len(), 2);
}

#[test]
fn stable_to_need_join_when_a_static_members_poll_interval_expires_sends_no_leave_group() {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(static_config(range(), "host-a"));
    r.subscribe(0, &["t"]);
    r.settle();
    r.c(0).polling = false;
    r.c(0).callback_delay = None;
    r.run_for(secs(301));
    let c = &r.clients[0];
    assert!(c.sent_of(LeaveGroupRequest::KEY).is_empty());
    assert_eq!(
        c.callbacks.last().unwrap(),
        &(CallbackKind::Lost, tps("t", &[0, 1, 2]), vec![]),
        "the partitions are lost all the same"
    );
    let last = c.identities.last().unwrap();
    assert_eq!(
        (
            last.generation_or_epoch(),
            last.member_id(),
            last.instance_id()
        ),
        (-1, "", Some("host-a"))
    );
}

#[test]
fn stable_to_need_join_when_the_session_times_out_with_the_coordinator_unreachable() {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(config(range()));
    r.subscribe(0, &["t"]);
    r.settle();
    r.run_for(secs(1));
    let last_ok = r.now() - secs(1);
    r.coordinator_down = true;
    for lane in [Lane::Group, Lane::Join] {
        r.close(0, Route::node(NodeId(COORD), lane), "broker down");
    }
    let finds = r.clients[0].finds;
    let sent = r.clients[0].sent.len();
    r.run_until(secs(60), |r| {
        r.clients[0].callbacks.last().unwrap().0 == CallbackKind::Lost
    });
    assert_eq!(r.now(), last_ok + secs(45), "lost at session.timeout.ms");
    let c = &r.clients[0];
    assert_eq!(
        c.callbacks.last().unwrap(),
        &(CallbackKind::Lost, tps("t", &[0, 1, 2]), vec![])
    );
    assert_eq!(c.member.identity().generation_or_epoch(), -1);
    assert_eq!(c.sent.len(), sent, "nothing could go out");
    let finding = c.finds - finds;
    assert!(
        finding > 3 && finding < 100,
        "rediscovery backs off: {finding}"
    );
    // The coordinator comes back; the member joins afresh.
    r.run_for(secs(30));
    r.coordinator_down = false;
    r.run_until(secs(10), Rig::all_stable);
    let c = &r.clients[0];
    assert_eq!(c.member.owned(), tps("t", &[0, 1, 2]));
    assert_ne!(c.member.identity().member_id(), "c0-001");
}

// ----- static membership, leaderless groups ---------------------------------------------

#[test]
fn static_members_skip_member_id_required_do_not_leave_and_return_without_a_rebalance() {
    let mut r = Rig::new(&[("t", 4)]);
    r.add(static_config(range(), "host-a"));
    r.add(static_config(range(), "host-b"));
    r.subscribe(0, &["t"]);
    r.settle();
    assert_eq!(
        r.clients[0].sent_of(JoinGroupRequest::KEY).len(),
        1,
        "no MEMBER_ID_REQUIRED step"
    );
    assert_eq!(r.clients[0].member.identity().member_id(), "host-a-001");
    r.subscribe(1, &["t"]);
    r.run_until(secs(10), Rig::all_stable);
    let a_owned = r.clients[0].member.owned();
    assert_eq!(a_owned, tps("t", &[0, 1]));
    let generations = r.group.completed.len();

    // host-a closes: no LeaveGroup, Left at once.
    r.leave(0);
    let c = &r.clients[0];
    assert_eq!(c.lefts, 1);
    assert_eq!(c.identities.last().unwrap(), &Identity::Outsider);
    r.run_for(secs(1));
    assert!(r.clients[0].sent_of(LeaveGroupRequest::KEY).is_empty());
    r.clients[0].alive = false;

    // host-a restarts within the session: it gets its partitions back at once, as the
    // leader that skips the assignment, and host-b sees no rebalance.
    let b_callbacks = r.clients[1].callbacks.len();
    let i = r.add(static_config(range(), "host-a"));
    r.c(i).intercept = true;
    r.subscribe(i, &["t"]);
    let j = r.next_request(i, JoinGroupRequest::KEY, Duration::ZERO);
    let req = request::<JoinGroupRequest>(&j);
    assert_eq!(
        (req.member_id.as_str(), req.group_instance_id.as_deref()),
        ("", Some("host-a"))
    );
    r.pass(i, &j);
    let s = r.next_request(i, SyncGroupRequest::KEY, Duration::ZERO);
    assert!(
        request::<SyncGroupRequest>(&s).assignments.is_empty(),
        "skip_assignment: the leader does not assign"
    );
    r.pass(i, &s);
    r.c(i).intercept = false;
    r.run_until(secs(5), Rig::all_stable);
    assert_eq!(r.clients[i].member.owned(), a_owned);
    assert_eq!(r.group.completed.len(), generations, "no rebalance");
    assert_eq!(r.clients[1].callbacks.len(), b_callbacks);
}

#[test]
fn a_second_consumer_with_the_same_instance_id_fences_the_first() {
    let mut r = Rig::new(&[("t", 2)]);
    // The fenced one holds its partitions until it hears it was fenced: a zombie, as with
    // Kafka; this test is not about single ownership.
    r.check = false;
    r.add(static_config(range(), "host-a"));
    r.subscribe(0, &["t"]);
    r.settle();
    r.add(static_config(range(), "host-a"));
    r.subscribe(1, &["t"]);
    r.run_for(secs(5));
    let c = &r.clients[0];
    assert!(c.member.is_fatal());
    let e = &c.errors[0].0;
    assert_eq!(e.kafka_code(), Some(ErrorCode::FENCED_INSTANCE_ID.code()));
    assert!(e.to_string().contains("group.instance.id=host-a"), "{e}");
    assert!(!r.clients[1].member.is_fatal());
}

#[test]
fn await_join_to_await_sync_in_a_leaderless_group_takes_the_assignment_from_sync_group() {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(config(cooperative()));
    r.c(0).intercept = true;
    r.subscribe(0, &["t"]);
    let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    let resp = JoinGroupResponse {
        generation_id: 7,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("cooperative-sticky".into()),
        leader: String::new(),
        member_id: "m-848".into(),
        members: vec![],
        ..Default::default()
    };
    r.answer(0, &j, sim::response::<JoinGroupRequest>(&j, &resp));
    let s = r.next_request(0, SyncGroupRequest::KEY, Duration::ZERO);
    let req = request::<SyncGroupRequest>(&s);
    assert_eq!((req.generation_id, req.member_id.as_str()), (7, "m-848"));
    assert!(req.assignments.is_empty());
    assert_eq!(req.protocol_name.as_deref(), Some("cooperative-sticky"));
    let resp = SyncGroupResponse {
        protocol_type: Some("consumer".into()),
        protocol_name: Some("cooperative-sticky".into()),
        assignment: Bytes(assignment_bytes(&tps("t", &[0, 2]))),
        ..Default::default()
    };
    r.answer(0, &s, sim::response::<SyncGroupRequest>(&s, &resp));
    let c = &r.clients[0];
    assert_eq!(
        c.callbacks,
        vec![(CallbackKind::Assigned, tps("t", &[0, 2]), tps("t", &[0, 2]))]
    );
    assert_eq!(c.member.identity().generation_or_epoch(), 7);
    // The server asks for a rejoin: the owned partitions travel with it.
    let j = rebalance(&mut r);
    let (req, sub) = subscription_of(&j);
    assert_eq!(req.member_id, "m-848");
    assert_eq!(sub.generation_id, 7);
    assert_eq!(
        from_wire(&sub.owned_partitions)
            .into_iter()
            .collect::<Vec<_>>(),
        tps("t", &[0, 2])
    );
}

// ----- callbacks, leaving ---------------------------------------------------------------

#[test]
fn await_callback_holds_until_the_callback_is_answered_and_ignores_a_stale_token() {
    let mut r = stable_member(range());
    r.c(0).callback_delay = None;
    let hb = r.next_request(0, HeartbeatRequest::KEY, secs(4));
    r.answer_error(0, &hb, ErrorCode::REBALANCE_IN_PROGRESS);
    let token = r.clients[0].pending.as_ref().unwrap().token;
    assert_eq!(
        r.clients[0].member.owned(),
        tps("t", &[0, 1, 2]),
        "until answered"
    );
    // Ten seconds without an answer: heartbeats (answered), no JoinGroup.
    let end = r.now() + secs(10);
    while r.now() < end {
        r.run_for(secs(1));
        for t in std::mem::take(&mut r.clients[0].intercepted) {
            assert_eq!(t.api_key, HeartbeatRequest::KEY);
            r.answer_error(0, &t, ErrorCode::REBALANCE_IN_PROGRESS);
        }
    }
    assert!(r.clients[0].sent_of(HeartbeatRequest::KEY).len() >= 3);
    assert_eq!(r.clients[0].sent_of(JoinGroupRequest::KEY).len(), 2);
    let now = r.now();
    r.clients[0]
        .member
        .callback_done(CallbackToken(token.0 + 100), now);
    r.clients[0]
        .member
        .callback_done(CallbackToken(token.0 - 1), now);
    r.settle();
    assert_eq!(r.clients[0].sent_of(JoinGroupRequest::KEY).len(), 2);
    r.finish_callback(0);
    assert_eq!(r.clients[0].member.owned(), vec![]);
    let _j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    // The same token again changes nothing.
    let now = r.now();
    r.clients[0].member.callback_done(token, now);
    r.settle();
    assert_eq!(r.clients[0].kind(), Kind::AwaitJoin);
}

#[test]
fn await_join_to_unsubscribed_on_leave_sends_leave_group_and_drops_the_join_answer() {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(config(range()));
    r.c(0).intercept = true;
    r.subscribe(0, &["t"]);
    let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    r.pass(0, &j);
    let j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    r.leave(0);
    let l = r.next_request(0, LeaveGroupRequest::KEY, Duration::ZERO);
    assert_eq!(l.route.lane, Lane::Group);
    let req = request::<LeaveGroupRequest>(&l);
    assert_eq!(req.members[0].member_id, "c0-001");
    assert_eq!(req.members[0].group_instance_id, None);
    assert_eq!(r.clients[0].lefts, 0, "Left once LeaveGroup is answered");
    let events = r.clients[0].identities.len();
    r.pass(0, &j);
    r.run_for(secs(1));
    let c = &r.clients[0];
    assert!(c.callbacks.is_empty());
    assert_eq!(c.identities.len(), events);
    assert!(
        c.sent_of(SyncGroupRequest::KEY).is_empty(),
        "the join answer was dropped"
    );
    r.pass(0, &l);
    let c = &r.clients[0];
    assert_eq!(c.lefts, 1);
    assert_eq!(c.identities.last().unwrap(), &Identity::Outsider);
    assert_eq!(c.kind(), Kind::Unsubscribed);
    assert_eq!(c.member.poll_timeout(r.now()), None);
}

#[test]
fn await_join_to_unsubscribed_on_leave_before_the_member_has_an_id_sends_no_leave_group() {
    let mut r = Rig::new(&[("t", 3)]);
    r.add(config(range()));
    r.c(0).intercept = true;
    r.subscribe(0, &["t"]);
    let _j = r.next_request(0, JoinGroupRequest::KEY, Duration::ZERO);
    r.leave(0);
    r.run_for(secs(1));
    let c = &r.clients[0];
    assert_eq!(c.lefts, 1);
    assert!(c.sent_of(LeaveGroupRequest::KEY).is_empty());
}

#[test]
fn unsubscribed_to_need_join_when_a_member_that_left_subscribes_again_after_others_took_over() {
    let mut r = Rig::new(&[("t", 4)]);
    r.add(config(cooperative()));
    r.add(config(cooperative()));
    r.subscribe(0, &["t"]);
    r.subscribe(1, &["t"]);
    r.run_until(secs(30), Rig::all_stable);
    r.leave(0);
    r.run_until(secs(30), Rig::all_stable);
    assert_eq!(r.clients[0].lefts, 1);
    assert_eq!(r.clients[1].member.owned().len(), 4);
    r.subscribe(0, &["t"]);
    r.run_until(secs(30), Rig::all_stable);
    assert_eq!(r.clients[0].member.owned().len(), 2);
    assert_eq!(r.clients[1].member.owned().len(), 2);
}

// ----- no busy loops ----------------------------------------------------------------------

#[test]
fn no_error_turns_into_a_busy_loop() {
    let codes = [
        ErrorCode::COORDINATOR_NOT_AVAILABLE,
        ErrorCode::NOT_COORDINATOR,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode::MEMBER_ID_REQUIRED,
        ErrorCode::UNKNOWN_MEMBER_ID,
        ErrorCode::ILLEGAL_GENERATION,
        ErrorCode::REBALANCE_IN_PROGRESS,
        ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode::INVALID_SESSION_TIMEOUT,
        ErrorCode::GROUP_AUTHORIZATION_FAILED,
        ErrorCode::FENCED_INSTANCE_ID,
        ErrorCode::UNKNOWN_SERVER_ERROR,
        ErrorCode::REQUEST_TIMED_OUT,
    ];
    for api in [
        JoinGroupRequest::KEY,
        SyncGroupRequest::KEY,
        HeartbeatRequest::KEY,
    ] {
        for code in codes {
            let mut r = Rig::new(&[("t", 3)]);
            r.add(config(cooperative()));
            r.subscribe(0, &["t"]);
            r.settle();
            r.c(0).ext.inject = vec![(api, code, None)];
            let start = r.now();
            r.run_for(secs(60));
            let c = &r.clients[0];
            let n = c.sent.iter().filter(|(_, t, _)| *t > start).count();
            // At most one request per kind and backoff step (capped at 1 s), plus the
            // heartbeats that keep going meanwhile.
            assert!(n <= 200, "api {api} {code}: {n} requests in a minute");
            let mut per_instant: BTreeMap<Instant, usize> = BTreeMap::new();
            for (_, t, _) in &c.sent {
                *per_instant.entry(*t).or_default() += 1;
            }
            let most = per_instant.values().max().copied().unwrap_or(0);
            assert!(
                most <= 4,
                "api {api} {code}: {most} requests at one instant"
            );
            let next = c.member.poll_timeout(r.now());
            assert!(next.is_none_or(|t| t > r.now()));
        }
    }
}

// ----- churn ------------------------------------------------------------------------------

/// Members come and go (and their user threads take a while to answer callbacks); at
/// every instant no partition has two owners (counting partitions awaiting revocation),
/// and once the churn stops every partition has exactly one.
fn churn(assignors: fn() -> Vec<Box<dyn Assignor>>, seed: u32) {
    let mut r = Rig::new(&[("t", 7), ("u", 3)]);
    let n = 5;
    for _ in 0..n {
        r.add(config(assignors()));
    }
    let mut rng = XorShift::new(seed);
    let start = r.now();
    let mut subscribed = vec![false; n];
    for _ in 0..60 {
        let i = (rng.next_u32() as usize) % n;
        if subscribed[i] && rng.next_u32() % 3 == 0 {
            r.leave(i);
            subscribed[i] = false;
        } else if !subscribed[i] {
            let topics: &[&str] = if rng.next_u32() % 4 == 0 {
                &["t"]
            } else {
                &["t", "u"]
            };
            r.subscribe(i, topics);
            subscribed[i] = true;
        }
        for c in &mut r.clients {
            c.callback_delay = Some(ms(u64::from(rng.next_u32() % 1500)));
        }
        r.run_for(ms(500 + u64::from(rng.next_u32() % 8000)));
    }
    // Quiescence: everyone subscribed to both topics, answering at once.
    for (i, s) in subscribed.iter_mut().enumerate() {
        if !*s {
            r.subscribe(i, &["t", "u"]);
            *s = true;
        } else {
            r.subscribe(i, &["t", "u"]);
        }
    }
    for c in &mut r.clients {
        c.callback_delay = Some(ms(10));
    }
    r.run_until(secs(600), Rig::all_stable);
    let callbacks: usize = r.clients.iter().map(|c| c.callbacks.len()).sum();
    let revoked: usize = r
        .clients
        .iter()
        .flat_map(|c| &c.callbacks)
        .filter(|(k, parts, _)| *k == CallbackKind::Revoked && !parts.is_empty())
        .count();
    log::info!(
        "churn seed {seed}: {} generations, {callbacks} callbacks, {revoked} revocations, {:?} simulated",
        r.group.completed.len(),
        r.now() - start
    );
    assert!(
        r.group.completed.len() >= 20,
        "the churn rebalanced the group"
    );
    assert!(revoked >= 10, "partitions changed hands");
    let mut owners: BTreeMap<TopicPartition, usize> = BTreeMap::new();
    for (i, c) in r.clients.iter().enumerate() {
        for p in c.member.owned() {
            assert!(owners.insert(p.clone(), i).is_none(), "{p} owned twice");
        }
        assert!(c.errors.is_empty(), "client {i}: {:?}", c.errors);
        assert!(c.callbacks.iter().all(|(k, _, _)| *k != CallbackKind::Lost));
    }
    let mut want = tps("t", &[0, 1, 2, 3, 4, 5, 6]);
    want.extend(tps("u", &[0, 1, 2]));
    assert_eq!(owners.into_keys().collect::<Vec<_>>(), want);
}

#[test]
fn churn_with_cooperative_sticky_never_gives_a_partition_two_owners() {
    for seed in [1, 7, 42] {
        churn(cooperative, seed);
    }
}

#[test]
fn churn_with_range_never_gives_a_partition_two_owners() {
    for seed in [3, 11] {
        churn(range, seed);
    }
}

// ----- the shape of the member -------------------------------------------------------------

#[test]
fn the_transition_table_matches_the_diagram() {
    let legal = State::legal;
    use Kind::*;
    let all = [
        Unsubscribed,
        NeedJoin,
        AwaitCallback,
        AwaitJoin,
        AwaitMetadata,
        AwaitSync,
        Stable,
        Fatal,
    ];
    for k in all {
        assert!(!legal(Fatal, k), "Fatal is final");
        assert!(k == Fatal || legal(k, Fatal));
        assert!(k == Fatal || legal(k, Unsubscribed));
    }
    assert!(
        !legal(Unsubscribed, AwaitJoin),
        "every join is prepared first"
    );
    assert!(!legal(Stable, AwaitJoin));
    assert!(
        !legal(AwaitJoin, Stable),
        "an assignment always goes through a callback"
    );
    assert!(!legal(AwaitSync, Stable));
}

#[test]
fn an_illegal_transition_stops_the_member_with_one_protocol_error() {
    let mut m = ClassicMember::new(config(range()), sim::jitter(1));
    m.core.expect_illegal = true;
    m.transition(State::Stable, "forced by the test");
    assert!(m.is_fatal());
    let events: Vec<MemberEvent> = std::iter::from_fn(|| m.poll_event()).collect();
    let [MemberEvent::Error { error, fatal: true }] = &events[..] else {
        panic!("{events:?}");
    };
    assert_eq!(error.kind(), crate::error::ErrorKind::Protocol);
    let msg = error.to_string();
    assert!(
        msg.contains("illegal member transition Unsubscribed -> Stable (forced by the test)"),
        "{msg}"
    );
    // Fatal is final: another illegal step changes nothing and emits nothing.
    m.transition(State::NeedJoin, "again");
    assert!(m.is_fatal());
    assert!(m.poll_event().is_none());
    // And a stopped member refuses a new subscription (the consumer replaces it).
    m.subscribe(
        Subscription::Topics(["t".to_owned()].into()),
        Clock::new().now(),
    );
    assert!(m.is_fatal());
    assert!(m.poll_event().is_none());
}

#[test]
#[should_panic(expected = "illegal member transition Unsubscribed -> Stable")]
fn an_illegal_transition_fails_the_test_that_takes_it() {
    let mut m = ClassicMember::new(config(range()), sim::jitter(1));
    m.transition(State::Stable, "a bug");
}

#[test]
fn partitions_round_trip_through_the_consumer_protocol_form() {
    let set: BTreeSet<TopicPartition> = [tp("b", 1), tp("a", 2), tp("a", 0)].into_iter().collect();
    let wire = to_wire(&set);
    assert_eq!(wire.len(), 2);
    assert_eq!(
        (wire[0].topic.as_str(), wire[0].partitions.clone()),
        ("a", vec![0, 2])
    );
    assert_eq!(from_wire(&wire), set);
}

#[test]
fn join_group_carries_the_rack_the_instance_id_and_a_truncated_reason() {
    let mut cfg = static_config(vec![Box::new(CooperativeSticky), Box::new(Range)], "host-a");
    cfg.client_rack = Some("rack-1".into());
    let mut m = ClassicMember::new(cfg, sim::jitter(1));
    m.topics = ["b".to_owned(), "a".to_owned()].into_iter().collect();
    m.core.learn_group(&Coordinator::new(
        "g",
        sim::retry_backoff(),
        secs(30),
        sim::jitter(2),
    ));
    m.rejoin_reason = "x".repeat(300);
    let req = m.join_request();
    assert_eq!(req.group_instance_id.as_deref(), Some("host-a"));
    assert_eq!(req.reason.as_ref().unwrap().len(), 255);
    let names: Vec<&str> = req.protocols.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["cooperative-sticky", "range"]);
    let sub = ConsumerProtocolSubscription::decode(&req.protocols[0].metadata.0).unwrap();
    assert_eq!(sub.topics, ["a", "b"], "sorted");
    assert_eq!(sub.rack_id.as_deref(), Some("rack-1"));
    // cooperative-sticky and range together are eager: no owned partitions in the join.
    assert_eq!(m.protocol, RebalanceProtocol::Eager);
}

// ----- rebalance metrics ----------------------------------------------------------------

#[test]
fn a_first_join_is_one_rebalance_from_its_join_group_to_the_sync_group_answer() {
    use RebalancePhase::*;
    let mut r = Rig::new(&[("t", 3)]);
    r.add(config(range()));
    r.c(0).answer_delay = ms(40);
    r.subscribe(0, &["t"]);
    r.run_until(secs(5), Rig::all_stable);
    let c = &r.clients[0];
    let phases: Vec<RebalancePhase> = c.rebalances.iter().map(|(_, p)| *p).collect();
    // MEMBER_ID_REQUIRED and the JoinGroup again with the given id are one join, not a
    // failed rebalance (the second start goes on with the first).
    assert_eq!(phases, vec![Started, Started, Completed]);
    let mut stats = IoStats::default();
    for (at, phase) in &c.rebalances {
        stats.rebalance(*phase, *at);
    }
    let mut m = Metrics::empty("c");
    stats.fill(&mut m, r.now());
    assert_eq!((m.rebalance_total, m.failed_rebalance_total), (1, 0));
    // Two JoinGroups and a SyncGroup, answered 40 ms each.
    assert_eq!(m.rebalance_latency_max, Some(ms(120)));
}

#[test]
fn an_error_answer_to_join_group_fails_the_rebalance_and_the_retry_starts_another() {
    use RebalancePhase::*;
    let mut r = stable_member(range());
    let before = r.clients[0].rebalances.len();
    let j = rebalance(&mut r);
    r.answer_error(0, &j, ErrorCode::REBALANCE_IN_PROGRESS);
    let j2 = r.next_request(0, JoinGroupRequest::KEY, secs(2));
    r.pass(0, &j2);
    let s = r.next_request(0, SyncGroupRequest::KEY, Duration::ZERO);
    r.pass(0, &s);
    let phases: Vec<RebalancePhase> = r.clients[0].rebalances[before..]
        .iter()
        .map(|(_, p)| *p)
        .collect();
    assert_eq!(phases, vec![Started, Failed, Started, Completed]);
}
