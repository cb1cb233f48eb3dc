//! Deterministic tests of the application's offset lookups against the simulated brokers of
//! `crate::sim`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::*;
use crate::backoff::XorShift;
use crate::error::ErrorKind;
use crate::link::Peer;
use crate::protocol::api::metadata::MetadataRequest;
use crate::protocol::error_code::ErrorCode;
use crate::sim::{
    self, cluster_config, control_route, lookup_config, malformed, ms, request, tp, Net, SimBroker,
};
use crate::types::{ApiVersion, CallId, NodeId, RequestId};

/// Lookups with their links, cluster and brokers.
struct Rig {
    net: Net,
    cluster: Cluster,
    lookups: Lookups,
    broker: SimBroker,
    /// Metadata requests sent, by the topics they asked for.
    metadata: Vec<Vec<String>>,
}

impl Rig {
    /// Brokers 1 and 2; topic `t`: partitions 0 and 2 on broker 1, 1 on broker 2; logs
    /// from 5 to 50.
    fn new() -> Rig {
        let mut broker = SimBroker::new(&[1, 2]).topic("t", &[1, 2, 1], 50);
        for p in 0..3 {
            broker.part(&tp("t", p)).log_start = 5;
        }
        Rig {
            net: Net::new(),
            cluster: Cluster::new(cluster_config()),
            lookups: Lookups::new(lookup_config(), sim::jitter(5)),
            broker,
            metadata: Vec::new(),
        }
    }

    fn now(&self) -> Instant {
        self.net.now()
    }

    fn start(&mut self, id: u64, query: &[(TopicPartition, i64)], timeout: Duration) {
        let deadline = self.now() + timeout;
        self.lookups
            .start(CallId(id), query.to_vec(), deadline, &mut self.cluster);
    }

    /// One round of the loop: the requests the lookups hand out (metadata is answered at
    /// once, links connect).
    fn round(&mut self) -> Vec<Transmit> {
        let now = self.now();
        self.lookups
            .handle_timeout(now, &self.net.links, &mut self.cluster);
        self.net.links.begin_round();
        let mut out = Vec::new();
        while let Some(t) = self
            .lookups
            .poll_transmit(now, &mut self.net.links, &mut self.cluster)
        {
            self.net.sent(&t);
            out.push(t);
            assert!(out.len() < 100, "requests without end in one round");
        }
        while let Some(t) = self.cluster.poll_transmit(now, &mut self.net.links) {
            self.net.sent(&t);
            let asked = request::<MetadataRequest>(&t)
                .topics
                .unwrap_or_default()
                .into_iter()
                .filter_map(|t| t.name)
                .collect();
            self.metadata.push(asked);
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

    fn sends(&mut self) -> Vec<Transmit> {
        for _ in 0..6 {
            let t = self.round();
            if !t.is_empty() {
                return t;
            }
        }
        Vec::new()
    }

    fn deliver(&mut self, t: &Transmit, body: &[u8]) {
        let now = self.now();
        self.net.answered(t.route);
        self.lookups.handle_response(
            t.tag.id,
            t.version,
            body,
            now,
            &mut self.net.links,
            &mut self.cluster,
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

    fn events(&mut self) -> Vec<(CallId, LookupResult)> {
        std::iter::from_fn(|| self.lookups.poll_event())
            .map(|LookupEvent::Done { id, result }| (id, result))
            .collect()
    }

    fn at(&mut self, t: Instant) {
        self.net.clock.advance_to(t);
    }

    /// When the loop wakes next.
    fn next_timer(&self) -> Option<Instant> {
        let now = self.now();
        [
            self.lookups.poll_timeout(now),
            self.cluster.poll_timeout(now),
            self.net.links.poll_timeout(now),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

fn asked(t: &Transmit) -> Vec<(TopicPartition, i64)> {
    let req = request::<ListOffsetsRequest>(t);
    req.topics
        .iter()
        .flat_map(|rt| {
            rt.partitions.iter().map(|p| {
                (
                    TopicPartition::new(rt.name.as_str(), p.partition_index),
                    p.timestamp,
                )
            })
        })
        .collect()
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn a_lookup_asks_each_leader_once_for_its_partitions_on_the_control_link() {
    let mut r = Rig::new();
    r.start(
        1,
        &[(tp("t", 0), -2), (tp("t", 1), -1), (tp("t", 2), 120)],
        secs(60),
    );
    let mut ts = r.sends();
    ts.sort_by_key(|t| t.route);
    assert_eq!(ts.len(), 2, "one request per leader");
    assert_eq!(ts[0].route, control_route(1));
    assert_eq!(asked(&ts[0]), vec![(tp("t", 0), -2), (tp("t", 2), 120)]);
    assert_eq!(ts[1].route, control_route(2));
    assert_eq!(asked(&ts[1]), vec![(tp("t", 1), -1)]);
    let q = request::<ListOffsetsRequest>(&ts[0]);
    assert_eq!(q.topics[0].partitions[0].current_leader_epoch, 5);
}

#[test]
fn a_lookup_finishes_once_every_partition_is_answered() {
    let mut r = Rig::new();
    r.start(
        1,
        &[
            (tp("t", 0), -2),
            (tp("t", 1), -1),
            (tp("t", 2), 120),
            (tp("t", 2), 9_999),
        ],
        secs(60),
    );
    let mut ts = r.sends();
    ts.sort_by_key(|t| t.route);
    r.answer(&ts[0]);
    assert!(
        r.events().is_empty(),
        "not before every partition is answered"
    );
    r.answer(&ts[1]);
    let ev = r.events();
    let [(CallId(1), Ok(found))] = &ev[..] else {
        panic!("{ev:?}")
    };
    let want: HashMap<TopicPartition, Option<(i64, i64)>> = [
        (tp("t", 0), Some((5, -1))),
        (tp("t", 1), Some((50, -1))),
        // The last timestamp asked for a partition counts: 9999 is after the last record.
        (tp("t", 2), None),
    ]
    .into_iter()
    .collect();
    assert_eq!(found, &want);
    assert!(r.round().is_empty());
    assert_eq!(
        r.lookups.poll_timeout(r.now()),
        None,
        "nothing left to wake for"
    );
}

#[test]
fn an_offset_for_a_time_is_the_first_record_at_or_after_it() {
    let mut r = Rig::new();
    r.start(4, &[(tp("t", 0), 121)], secs(60));
    let t = r.send_one();
    r.answer(&t);
    let ev = r.events();
    let [(CallId(4), Ok(found))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(found[&tp("t", 0)], Some((13, 130)));
}

impl Rig {
    fn send_one(&mut self) -> Transmit {
        let mut ts = self.sends();
        assert_eq!(ts.len(), 1, "{ts:?}");
        ts.remove(0)
    }
}

#[test]
fn an_empty_lookup_finishes_at_once() {
    let mut r = Rig::new();
    r.start(2, &[], secs(1));
    let ev = r.events();
    assert!(
        matches!(&ev[..], [(CallId(2), Ok(m))] if m.is_empty()),
        "{ev:?}"
    );
    assert!(r.sends().is_empty());
}

#[test]
fn a_partition_of_a_missing_topic_fails_the_lookup_naming_it() {
    let mut r = Rig::new();
    r.start(3, &[(tp("t", 0), -1), (tp("gone", 4), -1)], secs(60));
    for _ in 0..4 {
        r.round();
    }
    let ev = r.events();
    let [(CallId(3), Err(e))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::UnknownTopicOrPartition);
    assert_eq!(e.partition(), Some(&tp("gone", 4)));
    assert!(e.to_string().contains("gone-4"), "{e}");
    r.at(r.now() + secs(100));
    assert!(r.round().is_empty());
    assert!(r.events().is_empty(), "exactly one event");
}

#[test]
fn a_partition_the_topic_does_not_have_fails_the_lookup() {
    let mut r = Rig::new();
    r.start(3, &[(tp("t", 7), -1)], secs(60));
    for _ in 0..4 {
        r.round();
    }
    let ev = r.events();
    let [(CallId(3), Err(e))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(e.partition(), Some(&tp("t", 7)));
}

#[test]
fn retriable_errors_are_retried_after_a_growing_backoff_for_the_partitions_still_missing() {
    let mut r = Rig::new();
    r.start(1, &[(tp("t", 0), -2), (tp("t", 2), -1)], secs(60));
    let t = r.send_one();
    // t-0 fails (retriable), t-2 is answered.
    let mut resp = r
        .broker
        .list_offsets(&t, &request::<ListOffsetsRequest>(&t));
    resp.topics[0].partitions[0].error_code = ErrorCode::REQUEST_TIMED_OUT.code();
    let mut delays = Vec::new();
    let failed_at = r.now();
    r.deliver(&t, &sim::response::<ListOffsetsRequest>(&t, &resp));
    assert!(r.events().is_empty());
    let again = r.lookups.poll_timeout(r.now()).expect("backoff");
    delays.push(again - failed_at);
    r.at(again - ms(1));
    assert!(r.round().is_empty(), "retried during the backoff");
    r.at(again);
    let mut t = r.send_one();
    assert_eq!(asked(&t), vec![(tp("t", 0), -2)], "only what is missing");
    for _ in 0..3 {
        let failed_at = r.now();
        r.answer_error(&t, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
        let again = r.lookups.poll_timeout(r.now()).unwrap();
        delays.push(again - failed_at);
        r.at(again);
        t = r.send_one();
    }
    assert!(delays.windows(2).all(|w| w[1] > w[0]), "{delays:?}");
    r.answer(&t);
    let ev = r.events();
    let [(CallId(1), Ok(found))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(found.len(), 2);
}

#[test]
fn a_stale_leader_asks_for_a_metadata_refresh_and_the_new_leader_is_asked() {
    let mut r = Rig::new();
    r.start(1, &[(tp("t", 0), -1)], secs(60));
    let t = r.send_one();
    r.broker.part(&tp("t", 0)).leader = 2;
    let refreshes = r.metadata.len();
    r.answer(&t); // broker 1 answers NOT_LEADER_OR_FOLLOWER
    assert!(r.events().is_empty());
    // The refresh comes first (its spacing ends before the lookup's backoff, or in the
    // same round); at worst one retry still meets the old leader.
    let mut routes = Vec::new();
    while routes.len() < 3 {
        let next = r.next_timer().expect("a timer");
        r.at(next);
        // Links that connect wake the loop again at once.
        for _ in 0..3 {
            for t in r.round() {
                routes.push(t.route);
                r.answer(&t);
            }
        }
        let ev = r.events();
        if !ev.is_empty() {
            assert!(matches!(&ev[..], [(CallId(1), Ok(_))]), "{ev:?}");
            break;
        }
    }
    assert!(r.metadata.len() > refreshes, "metadata refreshed");
    assert_eq!(routes.last(), Some(&control_route(2)), "{routes:?}");
    assert!(routes.len() <= 2, "{routes:?}");
}

#[test]
fn a_non_retriable_error_fails_the_lookup_naming_the_partition() {
    let mut r = Rig::new();
    r.start(1, &[(tp("t", 0), -1), (tp("t", 1), -1)], secs(60));
    let mut ts = r.sends();
    ts.sort_by_key(|t| t.route);
    r.answer_error(&ts[0], ErrorCode::TOPIC_AUTHORIZATION_FAILED);
    let ev = r.events();
    let [(CallId(1), Err(e))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind_code(), (ErrorKind::Broker, Some(29)));
    assert_eq!(e.partition(), Some(&tp("t", 0)));
    r.answer(&ts[1]);
    assert!(r.events().is_empty(), "exactly one event");
}

trait KindCode {
    fn kind_code(&self) -> (ErrorKind, Option<i16>);
}

impl KindCode for Error {
    fn kind_code(&self) -> (ErrorKind, Option<i16>) {
        (self.kind(), self.kafka_code())
    }
}

#[test]
fn a_failed_request_is_retried_after_a_backoff() {
    let mut r = Rig::new();
    r.start(1, &[(tp("t", 0), -1)], secs(60));
    let t = r.send_one();
    let now = r.now();
    r.net.close(t.route, "reset");
    r.lookups
        .handle_failure(t.tag.id, &Failure::Disconnected("reset".into()), now);
    assert!(r.events().is_empty());
    let again = r.lookups.poll_timeout(r.now()).unwrap();
    assert!(again > r.now());
    r.at(again + secs(1));
    let t = r.send_one();
    r.answer(&t);
    assert!(matches!(&r.events()[..], [(CallId(1), Ok(_))]));
}

#[test]
fn a_malformed_answer_fails_the_lookup_and_closes_the_link() {
    let mut r = Rig::new();
    r.start(1, &[(tp("t", 0), -1)], secs(60));
    let t = r.send_one();
    r.deliver(&t, &malformed());
    let ev = r.events();
    let [(CallId(1), Err(e))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Protocol);
    assert_eq!(r.net.links.take_close_requests().len(), 1);
}

#[test]
fn the_deadline_ends_a_lookup_with_one_timeout_saying_what_was_missing() {
    let mut r = Rig::new();
    r.net.down.insert(Peer::Node(NodeId(2)));
    r.start(1, &[(tp("t", 0), -1), (tp("t", 1), -1)], secs(5));
    let deadline = r.now() + secs(5);
    let t = r.send_one();
    assert_eq!(t.route, control_route(1));
    r.answer(&t);
    while r.now() < deadline {
        assert!(r.round().is_empty());
        assert!(r.events().is_empty(), "before the deadline");
        let next = [
            r.lookups.poll_timeout(r.now()),
            r.net.links.poll_timeout(r.now()),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap();
        assert!(next <= deadline, "the deadline is a timer");
        r.at(next);
    }
    r.round();
    let ev = r.events();
    let [(CallId(1), Err(e))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Timeout);
    let text = e.to_string();
    assert!(text.contains("1 of 2"), "{text}");
    assert!(
        text.contains("t-1"),
        "names the partition without an answer: {text}"
    );
    assert!(text.contains("connection refused"), "says why: {text}");
    r.at(r.now() + secs(60));
    assert!(r.round().is_empty());
    assert!(r.events().is_empty(), "exactly one event");
    assert_eq!(r.lookups.poll_timeout(r.now()), None);
}

#[test]
fn an_answer_after_the_deadline_is_ignored() {
    let mut r = Rig::new();
    r.start(1, &[(tp("t", 0), -1)], secs(5));
    let t = r.send_one();
    r.at(r.now() + secs(5));
    r.round();
    let ev = r.events();
    assert!(
        matches!(&ev[..], [(CallId(1), Err(e))] if e.kind() == ErrorKind::Timeout),
        "{ev:?}"
    );
    r.answer(&t);
    assert!(r.events().is_empty());
}

#[test]
fn a_cancelled_lookup_sends_nothing_more_reports_nothing_and_drops_its_interest() {
    let mut r = Rig::new();
    r.broker = r.broker.clone().topic("u", &[1], 3);
    r.start(1, &[(tp("u", 0), -1), (tp("t", 1), -1)], secs(60));
    let ts = r.sends();
    assert_eq!(ts.len(), 2);
    r.lookups.cancel(CallId(1), &mut r.cluster);
    for t in &ts {
        r.answer(t);
    }
    assert!(r.events().is_empty());
    r.at(r.now() + secs(120));
    assert!(r.round().is_empty());
    assert_eq!(r.lookups.poll_timeout(r.now()), None);
    // The next refresh no longer asks for the lookup's topics.
    r.cluster.request_update();
    r.round();
    assert_eq!(r.metadata.last(), Some(&vec![]), "{:?}", r.metadata);
}

#[test]
fn an_unknown_leader_waits_for_metadata() {
    let mut r = Rig::new();
    r.broker.part(&tp("t", 0)).leader = -1;
    r.start(1, &[(tp("t", 0), -1)], secs(60));
    for _ in 0..4 {
        assert!(r.round().is_empty());
    }
    r.broker.part(&tp("t", 0)).leader = 1;
    r.at(r.now() + secs(1));
    let t = r.send_one();
    assert_eq!(t.route, control_route(1));
}

#[test]
fn a_throttled_answer_throttles_the_link() {
    let mut r = Rig::new();
    r.start(1, &[(tp("t", 0), -1)], secs(60));
    let t = r.send_one();
    let mut resp = r
        .broker
        .list_offsets(&t, &request::<ListOffsetsRequest>(&t));
    resp.throttle_time_ms = 250;
    r.deliver(&t, &sim::response::<ListOffsetsRequest>(&t, &resp));
    r.start(2, &[(tp("t", 2), -1)], secs(60));
    assert!(r.round().is_empty(), "throttled");
    assert_eq!(r.net.links.poll_timeout(r.now()), Some(r.now() + ms(250)));
}

#[test]
fn a_broker_too_old_for_a_timestamp_fails_the_lookup() {
    let mut r = Rig::new();
    r.net.links.on_ready(
        control_route(1),
        crate::link::Versions::new([(2, 1, 6), (3, 1, 13)]),
    );
    r.start(1, &[(tp("t", 0), list_offsets::MAX_TIMESTAMP)], secs(60));
    for _ in 0..4 {
        r.round();
    }
    let ev = r.events();
    let [(CallId(1), Err(e))] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(e.kind(), ErrorKind::Unsupported);
}

// ----- metadata from the cache ----------------------------------------------------------------

#[test]
fn lookups_on_known_topics_use_the_cached_leaders_and_send_no_metadata_request() {
    let mut r = Rig::new();
    let all = [(tp("t", 0), -2), (tp("t", 1), -2), (tp("t", 2), -2)];
    r.start(1, &all, secs(60));
    for t in r.sends() {
        r.answer(&t);
    }
    assert!(matches!(&r.events()[..], [(CallId(1), Ok(_))]));
    assert_eq!(r.metadata.len(), 1, "t was unknown: one request");
    for id in 2..22u64 {
        r.at(r.now() + ms(3));
        let ts = if id % 2 == 0 { -2 } else { -1 };
        let query: Vec<(TopicPartition, i64)> =
            all.iter().map(|(tp, _)| (tp.clone(), ts)).collect();
        r.start(id, &query, secs(60));
        let sent = r.round();
        assert_eq!(
            sent.len(),
            2,
            "lookup {id}: one request per leader, in the first round"
        );
        for t in &sent {
            r.answer(t);
        }
        let ev = r.events();
        assert!(
            matches!(&ev[..], [(CallId(i), Ok(found))] if *i == id && found.len() == 3),
            "{ev:?}"
        );
    }
    assert_eq!(r.metadata.len(), 1, "no Metadata request: {:?}", r.metadata);
}

#[test]
fn a_lookup_on_a_new_topic_does_not_wait_behind_another_lookups_metadata_backoff() {
    let mut r = Rig::new();
    r.broker = r.broker.clone().topic("u", &[2], 7);
    // Lookup 1 waits for a leader of t-0: refreshes that bring nothing new, spaced ever
    // further apart.
    r.broker.part(&tp("t", 0)).leader = -1;
    r.start(1, &[(tp("t", 0), -1)], secs(60));
    // The first round connects the bootstrap link, the second asks for t at once.
    for _ in 0..3 {
        if r.metadata.is_empty() {
            assert!(r.round().is_empty());
        }
    }
    assert_eq!(r.metadata.len(), 1);
    while r.metadata.len() < 5 {
        let next = r.next_timer().expect("a timer");
        r.at(next);
        assert!(r.round().is_empty());
    }
    let spacing = r.cluster.poll_timeout(r.now()).expect("spaced") - r.now();
    assert_eq!(spacing, ms(1000), "grown to retry.backoff.max.ms");
    r.at(r.now() + ms(1));
    r.start(2, &[(tp("u", 0), -1)], secs(60));
    assert!(r.round().is_empty(), "u's leader is not known yet");
    assert_eq!(r.metadata.len(), 6, "u's metadata asked at once");
    assert!(r.metadata[5].contains(&"u".to_owned()), "{:?}", r.metadata);
    // Then the ListOffsets, once broker 2's control link is up: no time passes.
    let at = r.now();
    let sent = r.sends();
    assert_eq!(r.now(), at);
    assert_eq!(sent.len(), 1);
    assert_eq!(asked(&sent[0]), vec![(tp("u", 0), -1)]);
    r.answer(&sent[0]);
    let ev = r.events();
    assert!(
        matches!(&ev[..], [(CallId(2), Ok(found))] if found[&tp("u", 0)] == Some((7, -1))),
        "{ev:?}"
    );
}

#[test]
fn a_lookup_does_not_wait_behind_another_lookups_retry_backoff() {
    let mut r = Rig::new();
    r.start(1, &[(tp("t", 0), -1)], secs(60));
    let t = r.send_one();
    r.answer_error(&t, ErrorCode::REQUEST_TIMED_OUT);
    assert!(r.lookups.poll_timeout(r.now()).is_some_and(|t| t > r.now()));
    r.start(2, &[(tp("t", 0), -2)], secs(60));
    let sent = r.round();
    assert_eq!(sent.len(), 1, "lookup 2 goes out at once");
    assert_eq!(asked(&sent[0]), vec![(tp("t", 0), -2)]);
    r.answer(&sent[0]);
    assert!(matches!(&r.events()[..], [(CallId(2), Ok(_))]));
}

#[test]
fn a_lookup_on_a_topic_that_did_not_exist_asks_afresh_and_sees_it_created() {
    let mut r = Rig::new();
    r.start(1, &[(tp("late", 0), -1)], secs(60));
    for _ in 0..3 {
        r.round();
    }
    let ev = r.events();
    assert!(
        matches!(&ev[..], [(CallId(1), Err(e))] if e.kind() == ErrorKind::UnknownTopicOrPartition),
        "{ev:?}"
    );
    r.broker = r.broker.clone().topic("late", &[1], 4);
    r.at(r.now() + ms(5));
    r.start(2, &[(tp("late", 0), -1)], secs(60));
    let t = r.send_one();
    assert_eq!(
        r.metadata.len(),
        2,
        "a fresh Metadata request, not the cached failure"
    );
    r.answer(&t);
    let ev = r.events();
    assert!(
        matches!(&ev[..], [(CallId(2), Ok(found))] if found[&tp("late", 0)] == Some((4, -1))),
        "{ev:?}"
    );
}

// ----- randomized --------------------------------------------------------------------------

/// Random lookups, cancels, answers (good, retriable and fatal errors, malformed, stale),
/// failures, leader moves, refused connects and time. After every step: every lookup ends
/// with exactly one event (none once cancelled), by its deadline; a partition is in at
/// most one request; requests only for lookups under way; answers are what the brokers
/// said; timers in the future. At the end everything is finished and nothing wakes.
#[test]
fn randomized_interleavings_keep_the_invariants_and_end_quiet() {
    for seed in 1..=4u32 {
        run_random(seed, 1_500);
    }
}

use crate::protocol::api::list_offsets;

fn run_random(seed: u32, steps: usize) {
    let mut rng = XorShift::new(seed.wrapping_mul(40_503));
    let mut pick = move |n: u32| crate::backoff::Jitter::next_u32(&mut rng) % n.max(1);
    let mut r = Rig::new();
    r.broker = r.broker.clone().topic("u", &[2, 1], 30);
    let all = [
        tp("t", 0),
        tp("t", 1),
        tp("t", 2),
        tp("u", 0),
        tp("u", 1),
        tp("gone", 0),
    ];
    let mut pending: Vec<Transmit> = Vec::new();
    let mut old: Vec<(RequestId, ApiVersion, Vec<u8>)> = Vec::new();
    // Lookups under way: deadline; finished or cancelled ones.
    let mut open: BTreeMap<CallId, Instant> = BTreeMap::new();
    let mut closed: BTreeSet<CallId> = BTreeSet::new();
    // What the brokers answered, per lookup and partition.
    let mut said: BTreeMap<(u64, TopicPartition), Option<(i64, i64)>> = BTreeMap::new();
    let mut next_id = 1u64;
    let mut done = 0;
    let mut ok = 0;
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for step in 0..steps {
        let ctx = format!("seed {seed} step {step}");
        match pick(20) {
            0..=2 => {
                let mut query: Vec<(TopicPartition, i64)> = Vec::new();
                let with_gone = pick(10) == 0;
                for tp in all.iter().filter(|tp| with_gone || tp.topic() != "gone") {
                    if pick(2) == 0 {
                        query.push((tp.clone(), [-2, -1, 0, 77, 1_000][pick(5) as usize]));
                    }
                }
                let timeout = ms(100 + pick(10_000) as u64);
                r.start(next_id, &query, timeout);
                open.insert(CallId(next_id), r.now() + timeout);
                next_id += 1;
            }
            3 => {
                if let Some((&id, _)) = open.iter().nth(pick(open.len() as u32 + 1) as usize) {
                    r.lookups.cancel(id, &mut r.cluster);
                    open.remove(&id);
                    closed.insert(id);
                }
            }
            4..=9 => {
                if !pending.is_empty() {
                    let t = pending.remove(pick(pending.len() as u32) as usize);
                    let lookup = r.lookups.sent.get(&t.tag.id).map(|s| s.0);
                    let body = match pick(30) {
                        0 => malformed(),
                        1 => r
                            .broker
                            .answer_error(&t, ErrorCode::TOPIC_AUTHORIZATION_FAILED),
                        2..=5 => r.broker.answer_error(&t, ErrorCode::LEADER_NOT_AVAILABLE),
                        6 | 7 => r.broker.answer_error(&t, ErrorCode::REQUEST_TIMED_OUT),
                        _ => {
                            let resp = r
                                .broker
                                .list_offsets(&t, &request::<ListOffsetsRequest>(&t));
                            if let Some(id) = lookup {
                                for rt in &resp.topics {
                                    for p in &rt.partitions {
                                        if p.error_code == 0 {
                                            let found =
                                                (p.offset >= 0).then_some((p.offset, p.timestamp));
                                            said.insert(
                                                (
                                                    id.0,
                                                    TopicPartition::new(
                                                        rt.name.as_str(),
                                                        p.partition_index,
                                                    ),
                                                ),
                                                found,
                                            );
                                        }
                                    }
                                }
                            }
                            sim::response::<ListOffsetsRequest>(&t, &resp)
                        }
                    };
                    r.deliver(&t, &body);
                    old.push((t.tag.id, t.version, body));
                }
            }
            10 => {
                if !pending.is_empty() {
                    let t = pending.remove(pick(pending.len() as u32) as usize);
                    let now = r.now();
                    r.net.close(t.route, "lost");
                    let f = if pick(2) == 0 {
                        Failure::TimedOut
                    } else {
                        Failure::Disconnected("reset".into())
                    };
                    r.lookups.handle_failure(t.tag.id, &f, now);
                    // Everything else on that link fails too.
                    let mut i = 0;
                    while i < pending.len() {
                        if pending[i].route == t.route {
                            let u = pending.remove(i);
                            r.lookups.handle_failure(
                                u.tag.id,
                                &Failure::Disconnected("reset".into()),
                                now,
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
                    r.lookups
                        .handle_response(id, v, &body, now, &mut r.net.links, &mut r.cluster);
                    assert!(
                        r.lookups.poll_event().is_none(),
                        "{ctx}: a stale answer counted"
                    );
                }
            }
            12 => {
                let p = pick(3) as i32;
                r.broker.part(&tp("t", p)).leader = [1, 2, 1, 2, -1][pick(5) as usize];
            }
            13 => {
                let peer = Peer::Node(NodeId(1 + pick(2) as i32));
                if !r.net.down.remove(&peer) {
                    r.net.down.insert(peer);
                }
            }
            _ => {
                if pick(10) == 0 {
                    r.net.down.clear();
                }
                let now = r.now();
                let next = [
                    r.lookups.poll_timeout(now),
                    r.net.links.poll_timeout(now),
                    r.cluster.poll_timeout(now),
                ]
                .into_iter()
                .flatten()
                .min();
                let by = now + ms(1 + pick(500) as u64);
                r.at(next.map_or(by, |n| n.min(by)));
            }
        }
        // The loop: timers, then requests.
        let ts = r.round();
        for t in ts {
            let (id, _, tps) = r.lookups.sent[&t.tag.id].clone();
            assert!(
                open.contains_key(&id),
                "{ctx}: a request for finished lookup {id}"
            );
            for tp in &tps {
                assert!(
                    !pending.iter().any(|p| r
                        .lookups
                        .sent
                        .get(&p.tag.id)
                        .is_some_and(|s| s.0 == id && s.2.contains(tp))),
                    "{ctx}: {tp} of lookup {id} in two requests"
                );
            }
            pending.push(t);
        }
        let now = r.now();
        for (id, result) in r.events() {
            assert!(
                !closed.contains(&id),
                "{ctx}: lookup {id} ended twice (or after a cancel)"
            );
            let deadline = open
                .remove(&id)
                .unwrap_or_else(|| panic!("{ctx}: unknown lookup {id}"));
            assert!(
                now <= deadline,
                "{ctx}: lookup {id} ended after its deadline"
            );
            closed.insert(id);
            done += 1;
            *kinds
                .entry(match &result {
                    Ok(_) => "ok".to_string(),
                    Err(e) => format!("{:?}", e.kind()),
                })
                .or_insert(0) += 1;
            if let Ok(found) = result {
                ok += found.len();
                for (tp, v) in found {
                    assert_eq!(
                        said.get(&(id.0, tp.clone())),
                        Some(&v),
                        "{ctx}: lookup {id} {tp}"
                    );
                }
            }
        }
        for (id, d) in &open {
            assert!(*d > now, "{ctx}: lookup {id} still open at its deadline");
        }
        if let Some(t) = r.lookups.poll_timeout(now) {
            assert!(t > now, "{ctx}: timer in the past");
        }
    }
    // Let every deadline pass: nothing stays open, nothing wakes.
    while let Some(t) = r.lookups.poll_timeout(r.now()) {
        r.at(t);
        r.round();
        for (id, _) in r.events() {
            assert!(
                open.remove(&id).is_some(),
                "seed {seed}: lookup {id} ended twice"
            );
            done += 1;
        }
    }
    assert!(
        open.is_empty(),
        "seed {seed}: lookups never ended: {open:?}"
    );
    log::info!("seed {seed}: {done} lookups ended, {ok} partitions found {kinds:?}");
    assert!(
        done > 50 && kinds.get("ok").is_some_and(|n| *n > 20) && ok > 20,
        "seed {seed}: only {done} lookups ended, {ok} partitions found"
    );
    r.at(r.now() + secs(600));
    assert!(
        r.round().is_empty(),
        "seed {seed}: requests after every lookup ended"
    );
    assert_eq!(r.lookups.poll_timeout(r.now()), None);
}
