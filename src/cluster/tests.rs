//! Deterministic tests of the metadata cache and its refresh policy, against the simulated
//! brokers of `crate::sim`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::backoff::{Jitter, XorShift};
use crate::error::ErrorKind;
use crate::link::Versions;
use crate::protocol::api::metadata::MetadataRequest;
use crate::protocol::api::Api;
use crate::sim::{
    bootstrap_route, cluster_config, control_route, malformed, ms, request, response, tp, Net,
    SimBroker,
};

/// A cluster, the links it uses and the brokers that answer it.
struct Rig {
    net: Net,
    cluster: Cluster,
    broker: SimBroker,
}

impl Rig {
    /// One bootstrap server, ready; brokers 1 and 2; topic `t` with two partitions.
    fn new() -> Rig {
        Rig::with(cluster_config())
    }

    fn with(cfg: ClusterConfig) -> Rig {
        let mut net = Net::new();
        net.ready(bootstrap_route(0));
        Rig {
            net,
            cluster: Cluster::new(cfg),
            broker: SimBroker::new(&[1, 2]).topic("t", &[1, 2], 10),
        }
    }

    fn now(&self) -> Instant {
        self.net.now()
    }

    /// One round of the I/O loop for the cluster: the request it hands out, if any (links
    /// it wants are then connected).
    fn poll(&mut self) -> Option<Transmit> {
        let now = self.now();
        self.net.links.begin_round();
        let t = self.cluster.poll_transmit(now, &mut self.net.links);
        if let Some(t) = &t {
            self.net.sent(t);
        }
        self.net.connect_wanted();
        t
    }

    /// Delivers `body` as the answer to `t`.
    fn deliver(&mut self, t: &Transmit, body: &[u8]) {
        let now = self.now();
        self.net.answered(t.route);
        self.cluster
            .handle_response(t.tag.id, t.version, body, now, &mut self.net.links);
    }

    /// Answers `t` as the simulated brokers do.
    fn answer(&mut self, t: &Transmit) {
        let body = self.broker.answer(t);
        self.deliver(t, &body);
    }

    /// Sends a refresh and answers it: the cluster now knows what the brokers say.
    fn refresh(&mut self) -> Transmit {
        let t = self.poll().expect("a refresh goes out");
        self.answer(&t);
        t
    }

    fn at(&mut self, t: Instant) {
        self.net.clock.advance_to(t);
    }

    fn advance(&mut self, d: Duration) {
        self.net.clock.advance(d);
    }

    fn events(&mut self) -> Vec<ClusterEvent> {
        std::iter::from_fn(|| self.cluster.poll_event()).collect()
    }

    fn assign(&mut self, topics: &[&str]) {
        self.cluster
            .set_interest(Interest::Assignment, topics.iter().map(|t| Arc::from(*t)));
    }

    /// A `partitions_for(topic)` caller with a minute to wait.
    fn partitions_for(&mut self, id: u64, topic: &str) {
        let now = self.now();
        self.cluster
            .wait_for_topic(CallId(id), topic, now + Duration::from_secs(60), now);
    }

    /// The answers to `partitions_for` callers so far, by caller.
    fn partitions(&mut self) -> Vec<(u64, Result<Vec<TopicPartition>>)> {
        self.events()
            .into_iter()
            .map(|e| match e {
                ClusterEvent::Partitions { id, result } => (id.0, result),
                ClusterEvent::Error(e) => panic!("{e}"),
            })
            .collect()
    }
}

fn asked_topics(t: &Transmit) -> Vec<String> {
    request::<MetadataRequest>(t)
        .topics
        .expect("named topics")
        .into_iter()
        .map(|t| t.name.expect("by name"))
        .collect()
}

#[test]
fn the_first_refresh_goes_out_at_once_to_a_ready_control_link() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    let t = r.poll().expect("the first refresh is due at once");
    assert_eq!(t.route, bootstrap_route(0));
    assert_eq!(t.api_key, MetadataRequest::KEY);
    assert_eq!(asked_topics(&t), vec!["t".to_owned()]);
    let req = request::<MetadataRequest>(&t);
    assert!(
        !req.allow_auto_topic_creation,
        "a consumer never creates topics"
    );
}

#[test]
fn with_no_link_ready_the_first_refresh_wants_three_candidates_and_uses_the_first_ready() {
    let mut net = Net::new();
    net.auto_connect = false;
    let mut c = Cluster::new(ClusterConfig {
        bootstrap_servers: 5,
        ..cluster_config()
    });
    net.links.begin_round();
    assert!(c.poll_transmit(net.now(), &mut net.links).is_none());
    net.connect_wanted();
    assert_eq!(
        net.connecting.len(),
        3,
        "three candidates dialled at once, not all five: {:?}",
        net.connecting
    );
    assert!(net
        .connecting
        .iter()
        .all(|r| r.lane == Lane::Control && matches!(r.peer, Peer::Bootstrap(_))));
    let second = net.connecting[1];
    net.ready(second);
    net.links.begin_round();
    let t = c
        .poll_transmit(net.now(), &mut net.links)
        .expect("the refresh goes out on the link that became ready");
    assert_eq!(t.route, second);
}

#[test]
fn at_most_one_metadata_request_is_in_flight() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    let first = r.poll().expect("first refresh");
    for _ in 0..5 {
        r.cluster.request_update();
        r.advance(Duration::from_secs(10));
        assert!(
            r.poll().is_none(),
            "a second request while one is in flight"
        );
        assert_eq!(r.cluster.poll_timeout(r.now()), None);
    }
    r.answer(&first);
    r.cluster.request_update();
    assert!(
        r.poll().is_some(),
        "the next one goes once the first is answered"
    );
}

#[test]
fn repeated_refresh_requests_are_spaced_by_a_delay_doubling_to_retry_backoff_max() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    let mut last = r.now();
    r.refresh();
    let mut gaps = Vec::new();
    for _ in 0..7 {
        r.cluster.request_update();
        let due = r
            .cluster
            .poll_timeout(r.now())
            .expect("the spacing says when");
        r.at(due - ms(1));
        assert!(r.poll().is_none(), "sent before the spacing ended");
        r.at(due);
        r.refresh();
        gaps.push(due - last);
        last = due;
    }
    assert_eq!(
        gaps,
        [100, 200, 400, 800, 1000, 1000, 1000].map(ms).to_vec(),
        "retry.backoff.ms doubling to retry.backoff.max.ms"
    );
}

#[test]
fn the_spacing_starts_again_from_retry_backoff_after_a_quiet_period() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.refresh();
    for _ in 0..5 {
        r.cluster.request_update();
        let due = r.cluster.poll_timeout(r.now()).unwrap();
        r.at(due);
        r.refresh();
    }
    // Quiet for longer than twice the longest spacing.
    r.advance(Duration::from_secs(3));
    r.cluster.request_update();
    let sent = r.now();
    r.refresh();
    r.cluster.request_update();
    assert_eq!(
        r.cluster.poll_timeout(r.now()),
        Some(sent + ms(100)),
        "back to retry.backoff.ms"
    );
}

#[test]
fn metadata_max_age_triggers_a_refresh_and_nothing_else_wakes_a_fresh_cache() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    let answered = r.now();
    r.refresh();
    let age = cluster_config().metadata_max_age;
    assert_eq!(r.cluster.poll_timeout(r.now()), Some(answered + age));
    r.at(answered + age - ms(1));
    assert!(r.poll().is_none());
    r.at(answered + age);
    let t = r.poll().expect("the cache aged out");
    assert_eq!(asked_topics(&t), vec!["t".to_owned()]);
}

#[test]
fn a_new_interest_in_an_unknown_topic_triggers_a_refresh_and_a_known_one_does_not() {
    let mut r = Rig::new();
    r.broker = r.broker.clone().topic("u", &[1], 3);
    r.assign(&["t"]);
    r.refresh();
    r.advance(Duration::from_secs(5));
    r.cluster
        .set_interest(Interest::Lookup(CallId(1)), [Arc::from("t")]);
    assert!(r.poll().is_none(), "t is known: no refresh");
    assert!(r.cluster.poll_timeout(r.now()) > Some(r.now() + Duration::from_secs(200)));
    r.cluster
        .set_interest(Interest::Lookup(CallId(2)), [Arc::from("u")]);
    let t = r.poll().expect("u is not known: a refresh");
    let asked: BTreeSet<String> = asked_topics(&t).into_iter().collect();
    assert_eq!(
        asked,
        ["t", "u"].map(String::from).into(),
        "the union of interests"
    );
    r.answer(&t);
    assert!(matches!(
        r.cluster.leader(&tp("u", 0)),
        Leader::Known(NodeId(1), _)
    ));
}

#[test]
fn a_topic_nobody_is_interested_in_any_more_is_kept_until_its_metadata_is_max_age_old_and_never_refreshed(
) {
    let mut r = Rig::new();
    r.assign(&["t"]);
    let learnt = r.now();
    r.refresh();
    assert!(!r.cluster.topic_id("t").is_zero());
    r.cluster.clear_interest(Interest::Assignment);
    r.cluster.request_update();
    r.advance(Duration::from_secs(1));
    let t = r.poll().unwrap();
    assert!(
        asked_topics(&t).is_empty(),
        "not refreshed for its own sake"
    );
    r.answer(&t);
    assert!(
        matches!(r.cluster.leader(&tp("t", 0)), Leader::Known(..)),
        "still described: younger than metadata.max.age.ms"
    );
    assert!(!r.cluster.topic_id("t").is_zero());
    // The first answer after its metadata is max-age old forgets it.
    let age = cluster_config().metadata_max_age;
    r.at(r.now() + age);
    assert!(r.now() - learnt > age);
    let t = r.poll().expect("the max-age refresh");
    assert!(asked_topics(&t).is_empty());
    r.answer(&t);
    assert_eq!(r.cluster.leader(&tp("t", 0)), Leader::Unknown);
    assert!(r.cluster.topic_id("t").is_zero());
    assert!(r.cluster.described().is_empty());
}

#[test]
fn a_topic_that_failed_is_forgotten_by_the_next_answer_once_nobody_wants_it() {
    let mut r = Rig::new();
    r.assign(&["t", "gone"]);
    r.refresh();
    assert!(matches!(
        r.cluster.leader(&tp("gone", 0)),
        Leader::Missing(_)
    ));
    r.assign(&["t"]);
    r.cluster.request_update();
    r.advance(Duration::from_secs(1));
    r.refresh();
    assert_eq!(r.cluster.leader(&tp("gone", 0)), Leader::Unknown);
}

#[test]
fn a_topic_an_answer_lists_although_nobody_asked_for_it_is_not_taken_in() {
    let mut r = Rig::new();
    let t = r.poll().expect("the first refresh, for no topic");
    assert!(asked_topics(&t).is_empty());
    let listing_t = r
        .broker
        .metadata(&MetadataRequest::for_topics(["t".to_owned()]));
    r.deliver(&t, &response::<MetadataRequest>(&t, &listing_t));
    assert!(
        r.cluster.broker(NodeId(1)).is_some(),
        "the answer was applied"
    );
    assert!(r.cluster.described().is_empty());
    assert_eq!(r.cluster.fresh_partitions("t", r.now()), None);
    r.partitions_for(1, "t");
    assert!(
        r.partitions().is_empty(),
        "not answered from an unasked listing"
    );
    assert!(r.poll().is_some(), "asked at once");
}

#[test]
fn partitions_for_a_known_topic_is_answered_from_the_cache_with_no_request() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    let answered = r.now();
    r.refresh();
    r.advance(Duration::from_secs(1));
    r.partitions_for(7, "t");
    let ev = r.partitions();
    let [(7, Ok(parts))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(parts, &vec![tp("t", 0), tp("t", 1)]);
    assert!(r.poll().is_none(), "no request");
    assert_eq!(
        r.cluster.poll_timeout(r.now()),
        Some(answered + cluster_config().metadata_max_age),
        "nothing to wake for but the max age"
    );
}

#[test]
fn twenty_partitions_for_calls_on_known_topics_are_answered_with_no_request_at_all() {
    let mut r = Rig::new();
    r.broker = r.broker.clone().topic("u", &[2, 1, 2], 5);
    r.assign(&["t", "u"]);
    r.refresh();
    let before = r.cluster.generation();
    let timer = r.cluster.poll_timeout(r.now());
    for i in 0..20 {
        r.advance(ms(3));
        let topic = if i % 2 == 0 { "t" } else { "u" };
        r.partitions_for(i, topic);
        let ev = r.partitions();
        let [(id, Ok(parts))] = &ev[..] else {
            panic!("call {i}: {ev:?}")
        };
        assert_eq!(*id, i);
        assert_eq!(parts.len(), if topic == "t" { 2 } else { 3 });
        assert!(r.poll().is_none(), "call {i} sent a request");
    }
    assert_eq!(r.cluster.generation(), before);
    assert_eq!(r.cluster.poll_timeout(r.now()), timer, "no new timer");
}

#[test]
fn partitions_for_a_topic_learnt_for_an_earlier_call_is_answered_from_the_cache_until_max_age() {
    let mut r = Rig::new();
    r.broker = r.broker.clone().topic("u", &[1], 3);
    let learnt = r.now();
    r.partitions_for(1, "u");
    let t = r.poll().expect("u is unknown: a request");
    assert_eq!(asked_topics(&t), vec!["u".to_owned()]);
    r.answer(&t);
    assert!(matches!(&r.partitions()[..], [(1, Ok(p))] if p == &vec![tp("u", 0)]));
    // Another topic's call, answered, does not make the cache forget u.
    r.advance(ms(5));
    r.partitions_for(2, "t");
    let t = r.poll().expect("t is unknown: a request");
    assert_eq!(
        asked_topics(&t),
        vec!["t".to_owned()],
        "only what callers wait for"
    );
    r.answer(&t);
    assert!(matches!(&r.partitions()[..], [(2, Ok(_))]));
    r.advance(Duration::from_secs(60));
    r.partitions_for(3, "u");
    assert!(matches!(&r.partitions()[..], [(3, Ok(p))] if p == &vec![tp("u", 0)]));
    assert!(r.poll().is_none(), "from the cache");
    // Older than metadata.max.age.ms: asked again.
    r.at(learnt + cluster_config().metadata_max_age);
    r.partitions_for(4, "u");
    assert!(r.partitions().is_empty(), "not from metadata that old");
    let t = r.poll().expect("a fresh request");
    assert_eq!(asked_topics(&t), vec!["u".to_owned()]);
    r.answer(&t);
    assert!(matches!(&r.partitions()[..], [(4, Ok(_))]));
}

#[test]
fn successive_partitions_for_calls_on_new_topics_each_go_out_at_once() {
    let mut r = Rig::new();
    for n in 0..8 {
        r.broker = r.broker.clone().topic(&format!("new{n}"), &[1, 2], 1);
    }
    r.refresh();
    for n in 0..8u64 {
        r.advance(ms(2));
        let topic = format!("new{n}");
        r.partitions_for(n, &topic);
        let t = r
            .poll()
            .unwrap_or_else(|| panic!("call {n} waited for the spacing"));
        assert_eq!(asked_topics(&t), vec![topic]);
        r.answer(&t);
        let ev = r.partitions();
        assert!(
            matches!(&ev[..], [(id, Ok(p))] if *id == n && p.len() == 2),
            "{ev:?}"
        );
    }
}

#[test]
fn partitions_for_an_unknown_topic_does_not_wait_behind_another_refresh_backoff() {
    let mut r = Rig::new();
    r.broker = r.broker.clone().topic("u", &[2], 1);
    r.assign(&["t"]);
    // t-0 has no leader: the cache keeps asking, and the answers bring nothing new.
    r.broker.part(&tp("t", 0)).leader = -1;
    r.refresh();
    for _ in 0..4 {
        let due = r.cluster.poll_timeout(r.now()).expect("spaced refresh");
        r.at(due);
        r.refresh();
    }
    let spaced = r.cluster.poll_timeout(r.now()).expect("spaced refresh") - r.now();
    assert_eq!(
        spaced,
        ms(1000),
        "the spacing has grown to retry.backoff.max.ms"
    );
    r.advance(ms(1));
    r.partitions_for(1, "u");
    let t = r.poll().expect("the new topic's request goes out at once");
    r.answer(&t);
    assert!(matches!(&r.partitions()[..], [(1, Ok(p))] if p == &vec![tp("u", 0)]));
    // That answer brought news (u), so the spacing starts again from retry.backoff.ms, and
    // grows again while t-0 stays leaderless: never a loop.
    let mut gaps = Vec::new();
    for _ in 0..4 {
        let due = r.cluster.poll_timeout(r.now()).expect("spaced refresh");
        gaps.push(due - r.now());
        r.at(due);
        r.refresh();
    }
    assert_eq!(gaps, [100, 200, 400, 800].map(ms).to_vec());
}

#[test]
fn a_failing_cluster_still_backs_off_after_an_urgent_request_and_never_loops() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.refresh();
    r.advance(ms(10));
    r.partitions_for(1, "u");
    let t = r.poll().expect("at once");
    let mut sent = vec![r.now()];
    let body = r.broker.answer_error(&t, ErrorCode::Other(-1));
    r.deliver(&t, &body);
    // The caller still waits; its topic is asked again only after the growing spacing.
    for _ in 0..5 {
        assert!(r.poll().is_none(), "a retry without waiting");
        let due = r.cluster.poll_timeout(r.now()).expect("a spaced retry");
        r.at(due);
        let t = r.poll().expect("the retry");
        sent.push(r.now());
        let body = r.broker.answer_error(&t, ErrorCode::Other(-1));
        r.deliver(&t, &body);
    }
    let gaps: Vec<Duration> = sent.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, [200, 400, 800, 1000, 1000].map(ms).to_vec());
    assert!(r.partitions().is_empty());
}

#[test]
fn an_answer_that_brings_news_starts_the_spacing_again_from_retry_backoff() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.refresh();
    for _ in 0..4 {
        r.cluster.request_update();
        let due = r.cluster.poll_timeout(r.now()).unwrap();
        r.at(due);
        r.refresh();
    }
    r.cluster.request_update();
    let sent = r.cluster.poll_timeout(r.now()).unwrap();
    assert_eq!(sent - r.now(), ms(1000), "nothing new four times: grown");
    r.at(sent);
    r.broker.part(&tp("t", 1)).leader = 1; // a leader moved
    r.refresh();
    r.cluster.request_update();
    assert_eq!(
        r.cluster.poll_timeout(r.now()),
        Some(sent + ms(100)),
        "news: back to retry.backoff.ms"
    );
}

#[test]
fn partitions_for_a_topic_that_did_not_exist_asks_afresh_and_sees_it_created() {
    let mut r = Rig::new();
    r.partitions_for(1, "late");
    let t = r.poll().unwrap();
    r.answer(&t);
    let ev = r.partitions();
    let [(1, Err(e))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::UnknownTopicOrPartition);
    r.broker = r.broker.clone().topic("late", &[2], 1);
    r.advance(ms(5));
    r.partitions_for(2, "late");
    assert!(
        r.partitions().is_empty(),
        "a failure is not answered from the cache"
    );
    let t = r.poll().expect("at once");
    r.answer(&t);
    assert!(matches!(&r.partitions()[..], [(2, Ok(p))] if p == &vec![tp("late", 0)]));
}

#[test]
fn a_cancelled_partitions_for_caller_is_never_answered_and_its_topic_not_asked_again() {
    let mut r = Rig::new();
    r.partitions_for(1, "u");
    let t = r.poll().unwrap();
    r.cluster.cancel_waiter(CallId(1));
    r.cluster.handle_failure(t.tag.id, &Failure::TimedOut);
    r.net.close(t.route, "timed out");
    r.advance(Duration::from_secs(2));
    // The first round wants the closed link again, the second sends on it.
    let t = r
        .poll()
        .or_else(|| r.poll())
        .expect("the retry of the failed request");
    assert!(asked_topics(&t).is_empty(), "{:?}", asked_topics(&t));
    r.answer(&t);
    assert!(r.events().is_empty());
    assert_eq!(
        r.cluster.poll_timeout(r.now()),
        Some(r.now() + cluster_config().metadata_max_age)
    );
}

#[test]
fn partitions_for_an_unknown_topic_is_an_error_naming_it() {
    let mut r = Rig::new();
    let deadline = r.now() + Duration::from_secs(60);
    r.cluster
        .wait_for_topic(CallId(3), "nope", deadline, r.now());
    let t = r.poll().unwrap();
    assert_eq!(asked_topics(&t), vec!["nope".to_owned()]);
    r.answer(&t);
    let ev = r.events();
    let [ClusterEvent::Partitions {
        id: CallId(3),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::UnknownTopicOrPartition);
    assert!(e.to_string().contains("nope"), "{e}");
}

#[test]
fn partitions_for_times_out_at_its_deadline_saying_why_no_broker_answered() {
    let mut r = Rig::new();
    // The only bootstrap server refuses connections.
    r.net = Net::new();
    r.net.down.insert(Peer::Bootstrap(0));
    let deadline = r.now() + Duration::from_secs(5);
    r.cluster.wait_for_topic(CallId(9), "t", deadline, r.now());
    while r.now() < deadline {
        assert!(r.poll().is_none());
        r.cluster.handle_timeout(r.now(), &r.net.links);
        assert!(r.events().is_empty(), "answered before the deadline");
        let next = [
            r.cluster.poll_timeout(r.now()),
            r.net.links.poll_timeout(r.now()),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("a timer: the link's backoff or the deadline");
        assert!(next > r.now());
        assert!(next <= deadline, "the deadline is a timer");
        r.at(next);
    }
    r.cluster.handle_timeout(r.now(), &r.net.links);
    let ev = r.events();
    let [ClusterEvent::Partitions {
        id: CallId(9),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Timeout);
    let text = e.to_string();
    assert!(text.contains("topic t"), "{text}");
    assert!(text.contains("connection refused"), "says why: {text}");
}

#[test]
fn a_leader_missing_from_the_broker_list_is_unknown_and_asks_for_a_refresh() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.broker.part(&tp("t", 1)).leader = 7; // not a broker the answer lists
    let sent = r.now();
    r.refresh();
    assert!(matches!(
        r.cluster.leader(&tp("t", 0)),
        Leader::Known(NodeId(1), _)
    ));
    assert_eq!(r.cluster.leader(&tp("t", 1)), Leader::Unknown);
    assert!(r.cluster.broker(NodeId(7)).is_none());
    assert_eq!(
        r.cluster.poll_timeout(r.now()),
        Some(sent + ms(100)),
        "another refresh after the spacing"
    );
    r.at(sent + ms(100));
    r.broker.part(&tp("t", 1)).leader = 2;
    r.refresh();
    assert!(matches!(
        r.cluster.leader(&tp("t", 1)),
        Leader::Known(NodeId(2), LeaderEpoch(5))
    ));
}

#[test]
fn the_cache_keeps_each_partitions_replicas_and_each_brokers_rack_for_the_rack_aware_assignors() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.broker.racks.insert(1, "rack-a".into());
    r.broker.part(&tp("t", 0)).replicas = vec![1, 2];
    // Broker 9 is not listed: a replica the answer names without an address.
    r.broker.part(&tp("t", 1)).replicas = vec![2, 9];
    r.refresh();
    let replicas = r.cluster.replicas("t").expect("t is known");
    assert_eq!(
        replicas,
        vec![
            (0, &[NodeId(1), NodeId(2)][..]),
            (1, &[NodeId(2), NodeId(9)][..])
        ]
    );
    let rack = |r: &Rig, n: i32| r.cluster.broker(NodeId(n)).and_then(|b| b.rack.clone());
    assert_eq!(
        (rack(&r, 1), rack(&r, 2), rack(&r, 9)),
        (Some("rack-a".to_owned()), None, None)
    );
    assert_eq!(r.cluster.replicas("unknown"), None);
    // A refresh replaces what the cache knew.
    r.advance(Duration::from_secs(1));
    r.cluster.request_update();
    r.broker.part(&tp("t", 0)).replicas = vec![2];
    r.broker.racks.insert(2, "rack-b".into());
    r.refresh();
    assert_eq!(r.cluster.replicas("t").unwrap()[0], (0, &[NodeId(2)][..]));
    assert_eq!(rack(&r, 2), Some("rack-b".to_owned()));
}

#[test]
fn a_partition_leaderless_during_an_election_is_unknown() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.broker.part(&tp("t", 0)).leader = -1;
    r.refresh();
    assert_eq!(r.cluster.leader(&tp("t", 0)), Leader::Unknown);
    assert!(r.cluster.poll_timeout(r.now()) < Some(r.now() + Duration::from_secs(1)));
}

#[test]
fn a_topic_or_partition_that_does_not_exist_is_missing() {
    let mut r = Rig::new();
    r.assign(&["t", "gone"]);
    r.refresh();
    assert_eq!(
        r.cluster.leader(&tp("gone", 0)),
        Leader::Missing(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    assert_eq!(
        r.cluster.leader(&tp("t", 9)),
        Leader::Missing(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
}

#[test]
fn rebootstrap_required_forgets_the_brokers_and_asks_a_bootstrap_server_again() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.refresh();
    assert!(r.cluster.broker(NodeId(1)).is_some());
    // The next refresh goes to a broker's control link (the bootstrap one is closed).
    r.net.close(bootstrap_route(0), "idle");
    r.net.ready(control_route(1));
    r.cluster.request_update();
    r.advance(Duration::from_secs(1));
    let t = r.poll().expect("refresh");
    assert_eq!(t.route, control_route(1));
    let body = r.broker.answer_error(&t, ErrorCode::REBOOTSTRAP_REQUIRED);
    r.deliver(&t, &body);
    assert!(r.cluster.broker(NodeId(1)).is_none(), "brokers forgotten");
    assert!(r.cluster.broker(NodeId(2)).is_none());
    assert_eq!(r.cluster.leader(&tp("t", 0)), Leader::Unknown);
    // The next refresh can only go to a bootstrap server.
    r.advance(Duration::from_secs(1));
    let mut sent = None;
    for _ in 0..3 {
        sent = sent.or_else(|| r.poll());
        r.advance(Duration::from_secs(1));
    }
    let t = sent.expect("a refresh after the spacing");
    assert_eq!(t.route, bootstrap_route(0));
    r.answer(&t);
    assert!(r.cluster.broker(NodeId(1)).is_some());
}

#[test]
fn a_malformed_answer_fails_the_waiters_and_asks_again() {
    let mut r = Rig::new();
    let deadline = r.now() + Duration::from_secs(60);
    r.cluster.wait_for_topic(CallId(1), "t", deadline, r.now());
    let sent = r.now();
    let t = r.poll().unwrap();
    r.deliver(&t, &malformed());
    let ev = r.events();
    let [ClusterEvent::Partitions {
        id: CallId(1),
        result: Err(e),
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Protocol);
    assert_eq!(r.cluster.generation().0, 0, "nothing applied");
    assert_eq!(r.cluster.poll_timeout(r.now()), Some(sent + ms(100)));
}

#[test]
fn a_top_level_error_keeps_what_was_known_and_asks_again_after_the_spacing() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.refresh();
    r.advance(Duration::from_secs(5));
    r.cluster.request_update();
    let sent = r.now();
    let t = r.poll().unwrap();
    let body = r.broker.answer_error(&t, ErrorCode::Other(-1));
    r.deliver(&t, &body);
    assert!(matches!(r.cluster.leader(&tp("t", 0)), Leader::Known(..)));
    assert_eq!(r.cluster.generation().0, 1);
    assert_eq!(r.cluster.poll_timeout(r.now()), Some(sent + ms(100)));
}

#[test]
fn a_failed_request_is_retried_after_the_spacing_and_its_late_answer_ignored() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    let sent = r.now();
    let t = r.poll().unwrap();
    r.cluster.handle_failure(t.tag.id, &Failure::TimedOut);
    r.net.close(t.route, "a request timed out");
    assert_eq!(r.cluster.poll_timeout(r.now()), Some(sent + ms(100)));
    r.answer(&t);
    assert_eq!(
        r.cluster.generation().0,
        0,
        "the answer to a failed request is stale"
    );
}

#[test]
fn only_the_answer_to_the_request_in_flight_is_applied() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    let first = r.refresh();
    assert_eq!(r.cluster.generation().0, 1);
    r.advance(Duration::from_secs(1));
    r.cluster.request_update();
    let second = r.poll().unwrap();
    // The first answer again, and an answer for a request never sent.
    let body = r.broker.answer(&first);
    r.deliver(&first, &body);
    r.cluster.handle_response(
        RequestId(999),
        second.version,
        &body,
        r.now(),
        &mut r.net.links,
    );
    assert_eq!(r.cluster.generation().0, 1);
    r.answer(&second);
    assert_eq!(r.cluster.generation().0, 2);
}

#[test]
fn a_throttled_answer_throttles_its_link() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    let t = r.poll().unwrap();
    let mut resp = r.broker.metadata(&request::<MetadataRequest>(&t));
    resp.throttle_time_ms = 700;
    r.deliver(&t, &response::<MetadataRequest>(&t, &resp));
    r.net.links.begin_round();
    assert!(r.net.links.ready(t.route, r.now()).is_none());
    assert_eq!(r.net.links.poll_timeout(r.now()), Some(r.now() + ms(700)));
}

#[test]
fn a_broker_without_a_metadata_version_is_reported_once_and_not_used() {
    let mut r = Rig::new();
    r.net
        .links
        .on_ready(bootstrap_route(0), Versions::new([(1, 4, 17)]));
    r.assign(&["t"]);
    for _ in 0..3 {
        assert!(r.poll().is_none());
        r.advance(Duration::from_secs(1));
    }
    let ev = r.events();
    let [ClusterEvent::Error(e)] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.to_string().contains("Metadata"), "{e}");
}

#[test]
fn poll_timeout_never_returns_a_passed_instant() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.refresh();
    r.cluster.request_update();
    let due = r.cluster.poll_timeout(r.now()).unwrap();
    assert_eq!(r.cluster.poll_timeout(due), None, "due now is not a timer");
    assert!(r.cluster.poll_timeout(due + ms(1)).is_none());
    // A caller whose deadline is due while its request is in flight.
    r.at(due);
    r.cluster
        .wait_for_topic(CallId(1), "u", due + ms(50), r.now());
    let _in_flight = r.poll().expect("the caller's request");
    assert_eq!(r.cluster.poll_timeout(due), Some(due + ms(50)));
    assert_eq!(
        r.cluster.poll_timeout(due + ms(50)),
        None,
        "a deadline due now is not a timer"
    );
}

// ----- randomized --------------------------------------------------------------------------

/// Random interleavings of interests, refresh requests, `partitions_for` callers, answers
/// (good, top-level errors, REBOOTSTRAP_REQUIRED, malformed, stale), failures, refused
/// connects and time; after every step: at most one request in flight, requests at least
/// `retry.backoff.ms` apart, every caller answered exactly once and no later than its
/// deadline, `poll_timeout` in the future. Then the faults stop and the cache must go
/// quiet: nothing but the `metadata.max.age.ms` refresh.
#[test]
fn randomized_interleavings_keep_the_invariants_and_end_quiet() {
    for seed in 1..=6u32 {
        run_random(seed, 2_000);
    }
}

fn run_random(seed: u32, steps: usize) {
    let mut rng = XorShift::new(seed.wrapping_mul(7919));
    let mut pick = |n: u32| rng.next_u32() % n;
    let mut r = Rig::with(ClusterConfig {
        bootstrap_servers: 2,
        ..cluster_config()
    });
    r.net = Net::new();
    let topics = ["t", "u", "nope"];
    r.broker = r.broker.clone().topic("u", &[2, 1, 2], 5);
    let mut outstanding: Option<Transmit> = None;
    let mut old: Vec<Transmit> = Vec::new();
    let mut last_sent: Option<Instant> = None;
    let mut waiters: BTreeMap<CallId, Instant> = BTreeMap::new();
    let mut answered: BTreeSet<u64> = BTreeSet::new();
    // A new interest or caller since the last request: the next may go out at once.
    let mut urgent = false;
    let mut next_waiter = 1u64;
    let ctx = |step: usize| format!("seed {seed} step {step}");

    let check = |r: &mut Rig,
                 outstanding: &mut Option<Transmit>,
                 last_sent: &mut Option<Instant>,
                 waiters: &mut BTreeMap<CallId, Instant>,
                 answered: &mut BTreeSet<u64>,
                 urgent: &mut bool,
                 step: usize| {
        let now = r.now();
        r.cluster.handle_timeout(now, &r.net.links);
        if let Some(t) = r.poll() {
            assert!(
                outstanding.is_none(),
                "{}: two requests in flight",
                ctx(step)
            );
            if let Some(l) = *last_sent {
                assert!(
                    now - l >= ms(100) || *urgent,
                    "{}: requests {:?} apart with no new caller",
                    ctx(step),
                    now - l
                );
            }
            *last_sent = Some(now);
            *outstanding = Some(t);
            *urgent = false;
        }
        for e in r.events() {
            match e {
                ClusterEvent::Partitions { id, result } => {
                    let deadline = waiters
                        .remove(&id)
                        .unwrap_or_else(|| panic!("{}: caller {id} answered twice", ctx(step)));
                    assert!(
                        now <= deadline,
                        "{}: caller {id} answered {:?} after its deadline: {result:?}",
                        ctx(step),
                        now - deadline
                    );
                    if let Err(e) = &result {
                        assert!(!e.to_string().is_empty());
                    }
                    answered.insert(id.0);
                }
                ClusterEvent::Error(e) => panic!("{}: {e}", ctx(step)),
            }
        }
        for (id, d) in waiters.iter() {
            assert!(
                *d > now,
                "{}: caller {id} not answered at its deadline",
                ctx(step)
            );
        }
        if let Some(t) = r.cluster.poll_timeout(now) {
            assert!(t > now, "{}: poll_timeout in the past", ctx(step));
        }
    };

    for step in 0..steps {
        match pick(16) {
            0 => r.cluster.request_update(),
            1 => {
                let n = pick(3) as usize;
                let set: Vec<Arc<str>> = (0..n)
                    .map(|i| Arc::from(topics[(i + pick(3) as usize) % 3]))
                    .collect();
                r.cluster
                    .set_interest(Interest::Lookup(CallId(pick(3) as u64)), set);
                urgent = true;
            }
            2 => r
                .cluster
                .clear_interest(Interest::Lookup(CallId(pick(3) as u64))),
            3 => {
                let id = next_waiter;
                next_waiter += 1;
                let deadline = r.now() + ms(200 + pick(5_000) as u64);
                let now = r.now();
                r.cluster
                    .wait_for_topic(CallId(id), topics[pick(3) as usize], deadline, now);
                waiters.insert(CallId(id), deadline);
                urgent = true;
            }
            4..=7 => {
                if let Some(t) = outstanding.take() {
                    let body = match pick(10) {
                        0 => malformed(),
                        1 => r.broker.answer_error(&t, ErrorCode::REBOOTSTRAP_REQUIRED),
                        2 => r.broker.answer_error(&t, ErrorCode::Other(-1)),
                        _ => r.broker.answer(&t),
                    };
                    r.deliver(&t, &body);
                    old.push(t);
                }
            }
            8 => {
                if let Some(t) = outstanding.take() {
                    let f = if pick(2) == 0 {
                        Failure::TimedOut
                    } else {
                        Failure::Disconnected("reset by peer".into())
                    };
                    r.net.close(t.route, "closed");
                    r.cluster.handle_failure(t.tag.id, &f);
                    old.push(t);
                }
            }
            9 => {
                // A stale answer: to a request already answered or failed.
                if !old.is_empty() {
                    let t = &old[pick(old.len() as u32) as usize];
                    let body = r.broker.answer(t);
                    let gen = r.cluster.generation();
                    r.cluster.handle_response(
                        t.tag.id,
                        t.version,
                        &body,
                        r.now(),
                        &mut r.net.links,
                    );
                    assert_eq!(
                        r.cluster.generation(),
                        gen,
                        "{}: stale answer applied",
                        ctx(step)
                    );
                }
            }
            10 => {
                let peer = match pick(4) {
                    0 => Peer::Bootstrap(0),
                    1 => Peer::Bootstrap(1),
                    n => Peer::Node(NodeId(n as i32 - 1)),
                };
                if !r.net.down.remove(&peer) {
                    r.net.down.insert(peer);
                }
            }
            11 => {
                // A leader moves, or a partition loses its leader for a while.
                let p = pick(2) as i32;
                r.broker.part(&tp("t", p)).leader = [1, 2, -1, 7][pick(4) as usize];
            }
            _ => {
                let next = [
                    r.cluster.poll_timeout(r.now()),
                    r.net.links.poll_timeout(r.now()),
                ]
                .into_iter()
                .flatten()
                .min();
                // Time never jumps over a timer: the loop wakes at each.
                let by = r.now() + ms(1 + pick(400) as u64);
                match next {
                    Some(t) if pick(2) == 0 || t < by => r.at(t),
                    _ => r.at(by),
                }
            }
        }
        check(
            &mut r,
            &mut outstanding,
            &mut last_sent,
            &mut waiters,
            &mut answered,
            &mut urgent,
            step,
        );
    }

    // The faults stop: every broker up and answering, every leader back.
    r.net.down.clear();
    r.broker.part(&tp("t", 0)).leader = 1;
    r.broker.part(&tp("t", 1)).leader = 2;
    let settle_until = r.now() + Duration::from_secs(30);
    let mut step = steps;
    while r.now() < settle_until {
        if let Some(t) = outstanding.take() {
            r.answer(&t);
            step += 1;
            check(
                &mut r,
                &mut outstanding,
                &mut last_sent,
                &mut waiters,
                &mut answered,
                &mut urgent,
                step,
            );
        }
        let next = [
            r.cluster.poll_timeout(r.now()),
            r.net.links.poll_timeout(r.now()),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(settle_until);
        r.at(next.min(settle_until));
        step += 1;
        check(
            &mut r,
            &mut outstanding,
            &mut last_sent,
            &mut waiters,
            &mut answered,
            &mut urgent,
            step,
        );
    }
    assert!(waiters.is_empty(), "seed {seed}: callers left unanswered");
    if let Some(t) = outstanding.take() {
        r.answer(&t);
    }
    // Idle for an hour: the only requests are the max-age refreshes, and every wake-up
    // has one.
    let start = r.now();
    let hour = Duration::from_secs(3600);
    let mut sent = 0;
    let mut wakeups = 0;
    loop {
        let next = [
            r.cluster.poll_timeout(r.now()),
            r.net.links.poll_timeout(r.now()),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { break };
        if next > start + hour {
            break;
        }
        r.at(next);
        wakeups += 1;
        r.cluster.handle_timeout(r.now(), &r.net.links);
        if let Some(t) = r.poll() {
            sent += 1;
            r.answer(&t);
        }
    }
    let age = cluster_config().metadata_max_age;
    let expected = (hour.as_secs() / age.as_secs()) as usize;
    log::info!("seed {seed}: {} callers answered, {sent} idle refreshes, {wakeups} wake-ups, generation {}", answered.len(), r.cluster.generation().0);
    assert!(
        sent + 1 >= expected && sent <= expected + 1 && wakeups <= sent + 1,
        "seed {seed}: {sent} requests and {wakeups} wake-ups in an idle hour (max age every {age:?})"
    );
}

#[test]
fn a_topics_leaders_read_through_its_view_match_each_partitions_own_look_up() {
    let mut r = Rig::new();
    r.assign(&["t", "u"]);
    r.refresh();
    for topic in ["t", "u", "never-described"] {
        let view = r.cluster.topic_leaders(topic);
        assert_eq!(view.id(), r.cluster.topic_id(topic));
        for p in -1..4 {
            assert_eq!(
                view.leader(p),
                r.cluster.leader(&tp(topic, p)),
                "{topic}-{p}"
            );
        }
    }
    assert!(matches!(
        r.cluster.topic_leaders("t").leader(1),
        Leader::Known(..)
    ));
    assert_eq!(
        r.cluster.topic_leaders("t").leader(2),
        Leader::Missing(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
        "t has two partitions"
    );
}

#[test]
fn an_answer_with_an_older_leader_epoch_keeps_the_newer_leader_and_asks_again() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.broker.part(&tp("t", 1)).epoch = 7;
    r.refresh();
    assert_eq!(
        r.cluster.leader(&tp("t", 1)),
        Leader::Known(NodeId(2), LeaderEpoch(7))
    );
    // A broker back from a pause still thinks node 1 leads at epoch 6; partition 0 moved
    // on in the meantime, at a newer epoch.
    r.broker.part(&tp("t", 1)).epoch = 6;
    r.broker.part(&tp("t", 1)).leader = 1;
    r.broker.part(&tp("t", 0)).epoch = 6;
    r.broker.part(&tp("t", 0)).leader = 2;
    r.advance(ms(1));
    r.cluster.request_update();
    let due = r.cluster.poll_timeout(r.now()).unwrap();
    r.at(due);
    r.refresh();
    assert_eq!(
        r.cluster.leader(&tp("t", 1)),
        Leader::Known(NodeId(2), LeaderEpoch(7)),
        "the older epoch is not taken"
    );
    assert_eq!(
        r.cluster.leader(&tp("t", 0)),
        Leader::Known(NodeId(2), LeaderEpoch(6)),
        "a newer epoch of another partition in the same answer is"
    );
    // Another refresh follows by itself, spaced; the caught-up view is taken.
    let due = r
        .cluster
        .poll_timeout(r.now())
        .expect("another refresh is due");
    assert!(due > r.now(), "spaced, not at once");
    r.at(due);
    r.broker.part(&tp("t", 1)).epoch = 8;
    r.broker.part(&tp("t", 1)).leader = 1;
    r.refresh();
    assert_eq!(
        r.cluster.leader(&tp("t", 1)),
        Leader::Known(NodeId(1), LeaderEpoch(8))
    );
}

#[test]
fn a_recreated_topic_starts_its_leader_epochs_afresh() {
    let mut r = Rig::new();
    r.assign(&["t"]);
    r.broker.part(&tp("t", 0)).epoch = 9;
    r.refresh();
    // Deleted and created again: a new topic id, epochs from 0.
    r.broker = SimBroker::new(&[1, 2])
        .topic("x", &[1], 1)
        .topic("t", &[2, 2], 10);
    r.broker.part(&tp("t", 0)).epoch = 0;
    r.cluster.request_update();
    let due = r.cluster.poll_timeout(r.now()).unwrap();
    r.at(due);
    r.refresh();
    assert_eq!(
        r.cluster.leader(&tp("t", 0)),
        Leader::Known(NodeId(2), LeaderEpoch(0))
    );
}
