//! Deterministic tests of group coordinator discovery against the simulated brokers of
//! `crate::sim`.

use std::time::{Duration, Instant};

use super::*;
use crate::error::ErrorKind;
use crate::link::{Lane, Versions};
use crate::protocol::api::find_coordinator::FindCoordinatorResponse;
use crate::sim::{self, known_cluster, malformed, ms, request, response, Net, SimBroker};
use crate::types::RequestId;

/// A coordinator, its links, a cluster knowing brokers 1 to 3, and the brokers (whose
/// coordinator for group `g` is broker 2).
struct Rig {
    net: Net,
    cluster: Cluster,
    coordinator: Coordinator,
    broker: SimBroker,
    /// Whether a component wants the coordinator this round.
    wanted: bool,
}

impl Rig {
    fn new() -> Rig {
        let mut net = Net::new();
        let mut broker = SimBroker::new(&[1, 2, 3]).topic("t", &[1], 10);
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
            broker,
            wanted: true,
        }
    }

    fn now(&self) -> Instant {
        self.net.now()
    }

    /// One round of the loop: the FindCoordinator the coordinator hands out, if any.
    fn round(&mut self) -> Option<Transmit> {
        let now = self.now();
        self.net.links.begin_round();
        self.coordinator.begin_round();
        if self.wanted {
            // What the commits do when they have work.
            let _ = self.coordinator.node();
        }
        let t = self
            .coordinator
            .poll_transmit(now, &mut self.net.links, &mut self.cluster);
        if let Some(t) = &t {
            self.net.sent(t);
        }
        self.net.connect_wanted();
        t
    }

    /// Rounds until a FindCoordinator goes out (links connect in between), at most four.
    fn send(&mut self) -> Transmit {
        (0..4)
            .find_map(|_| self.round())
            .expect("a FindCoordinator goes out")
    }

    fn deliver(&mut self, t: &Transmit, body: &[u8]) {
        let now = self.now();
        self.net.answered(t.route);
        self.coordinator.handle_response(
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

    fn timer(&self) -> Option<Instant> {
        self.coordinator.poll_timeout(self.now())
    }

    fn at(&mut self, t: Instant) {
        self.net.clock.advance_to(t);
    }
}

#[test]
fn the_coordinator_is_found_on_a_control_link_when_wanted_and_its_address_learnt() {
    let mut r = Rig::new();
    assert_eq!(r.coordinator.node(), None);
    let t = r.send();
    assert_eq!(t.route.lane, Lane::Control);
    let req = request::<FindCoordinatorRequest>(&t);
    assert_eq!(t.version, ApiVersion(6));
    assert_eq!(req.coordinator_keys, vec!["g".to_owned()]);
    assert_eq!(req.key_type, KEY_TYPE_GROUP);
    r.answer(&t);
    assert_eq!(r.coordinator.node(), Some(NodeId(2)));
    let b = r.cluster.broker(NodeId(2)).expect("address known");
    assert_eq!((b.host.as_str(), b.port), ("broker-2", 9002));
    assert!(r.round().is_none(), "known: nothing more to ask");
    assert_eq!(r.timer(), None);
}

#[test]
fn nothing_is_asked_while_nobody_wants_the_coordinator() {
    let mut r = Rig::new();
    r.wanted = false;
    for _ in 0..4 {
        assert!(r.round().is_none());
    }
    assert_eq!(r.timer(), None);
}

#[test]
fn older_brokers_are_asked_with_the_single_key_layout() {
    for v in [0, 2, 3] {
        let mut r = Rig::new();
        for n in 1..=3 {
            let route = Route::node(NodeId(n), Lane::Control);
            r.net
                .links
                .on_ready(route, Versions::new([(10, 0, v), (3, 1, 13)]));
        }
        let t = r.send();
        assert_eq!(t.version, ApiVersion(v));
        assert_eq!(request::<FindCoordinatorRequest>(&t).key, "g");
        r.answer(&t);
        assert_eq!(r.coordinator.node(), Some(NodeId(2)), "v{v}");
    }
}

#[test]
fn at_most_one_find_coordinator_is_in_flight() {
    let mut r = Rig::new();
    let t = r.send();
    for _ in 0..5 {
        r.at(r.now() + Duration::from_secs(10));
        assert!(r.round().is_none());
    }
    assert_eq!(r.timer(), None);
    r.answer(&t);
    assert_eq!(r.coordinator.node(), Some(NodeId(2)));
}

#[test]
fn retriable_errors_back_off_growing_and_are_remembered_for_timeout_messages() {
    let mut r = Rig::new();
    let mut delays = Vec::new();
    for _ in 0..5 {
        let t = r.send();
        let failed_at = r.now();
        r.answer_error(&t, ErrorCode::COORDINATOR_NOT_AVAILABLE);
        assert_eq!(r.coordinator.node(), None);
        assert!(r.coordinator.fatal().is_none());
        let problem = r.coordinator.last_problem().unwrap_or_default().to_owned();
        assert!(problem.contains("COORDINATOR_NOT_AVAILABLE"), "{problem}");
        assert!(problem.contains("group g"), "{problem}");
        let again = r.timer().expect("a backoff");
        r.at(again - ms(1));
        assert!(r.round().is_none(), "asked again during the backoff");
        r.at(again);
        delays.push(again - failed_at);
    }
    for (d, base) in delays.iter().zip([100, 200, 400, 800, 1000]) {
        assert!(
            *d >= ms(base * 8 / 10) && *d <= ms(base * 12 / 10),
            "{delays:?}"
        );
    }
    // Success resets the backoff.
    let t = r.send();
    r.answer(&t);
    let now = r.now();
    r.coordinator.mark_unknown("NOT_COORDINATOR", now);
    assert!(r.timer().unwrap() <= now + ms(120));
}

#[test]
fn a_fatal_error_is_kept_as_the_reason_until_a_discovery_succeeds() {
    for code in [
        ErrorCode::GROUP_AUTHORIZATION_FAILED,
        ErrorCode::INVALID_GROUP_ID,
    ] {
        let mut r = Rig::new();
        let t = r.send();
        r.answer_error(&t, code);
        let e = r.coordinator.fatal().expect("fatal").clone();
        assert_eq!(e.kafka_code(), Some(code.code()));
        assert!(e.to_string().contains("group g"), "{e}");
        // Still asked again (an ACL may be fixed), after a backoff.
        let again = r.timer().expect("a backoff");
        assert!(r.round().is_none());
        r.at(again);
        let t = r.send();
        r.answer_error(&t, ErrorCode::COORDINATOR_NOT_AVAILABLE);
        assert!(
            r.coordinator.fatal().is_some(),
            "kept across retriable errors"
        );
        r.at(r.timer().unwrap());
        let t = r.send();
        r.answer(&t);
        assert!(r.coordinator.fatal().is_none(), "cleared by success");
        assert_eq!(r.coordinator.node(), Some(NodeId(2)));
    }
}

#[test]
fn a_broker_without_find_coordinator_is_a_fatal_reason() {
    let mut r = Rig::new();
    for n in 1..=3 {
        let route = Route::node(NodeId(n), Lane::Control);
        r.net.links.on_ready(route, Versions::new([(3, 1, 13)]));
    }
    for _ in 0..3 {
        assert!(r.round().is_none());
    }
    let e = r.coordinator.fatal().expect("fatal");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(r.timer().is_some(), "asked again after a backoff");
}

#[test]
fn mark_unknown_finds_the_coordinator_again_after_a_backoff() {
    let mut r = Rig::new();
    let t = r.send();
    r.answer(&t);
    let mut delays = Vec::new();
    for _ in 0..3 {
        let now = r.now();
        r.coordinator
            .mark_unknown("OffsetCommit: NOT_COORDINATOR", now);
        assert_eq!(r.coordinator.node(), None);
        assert_eq!(
            r.coordinator.last_problem(),
            Some("OffsetCommit: NOT_COORDINATOR")
        );
        assert!(r.round().is_none(), "not at once");
        let again = r.timer().unwrap();
        delays.push(again - now);
        r.at(again);
        // Meanwhile the coordinator moved.
        r.broker.coordinator = 3;
        let t = r.send();
        r.answer(&t);
        assert_eq!(r.coordinator.node(), Some(NodeId(3)));
    }
    // Each rediscovery succeeded, so each waits the first backoff again (the request that
    // met NOT_COORDINATOR backs off on its own, growing).
    assert!(
        delays.iter().all(|d| *d >= ms(80) && *d <= ms(120)),
        "{delays:?}"
    );
}

#[test]
fn mark_unknown_during_a_discovery_changes_nothing_but_the_reason() {
    let mut r = Rig::new();
    let t = r.send();
    let now = r.now();
    r.coordinator.mark_unknown("link closed", now);
    assert_eq!(r.coordinator.last_problem(), Some("link closed"));
    r.answer(&t);
    assert_eq!(
        r.coordinator.node(),
        Some(NodeId(2)),
        "the answer still counts"
    );
}

#[test]
fn a_failed_request_backs_off_and_its_late_answer_is_ignored() {
    let mut r = Rig::new();
    let t = r.send();
    let now = r.now();
    r.net.close(t.route, "reset");
    r.coordinator
        .handle_failure(t.tag.id, &Failure::TimedOut, now);
    assert!(r
        .coordinator
        .last_problem()
        .unwrap()
        .contains("request.timeout.ms"));
    assert!(r.timer().is_some());
    r.answer(&t);
    assert_eq!(
        r.coordinator.node(),
        None,
        "the answer to a failed request is stale"
    );
    // An answer with an id never sent is ignored too.
    let t2 = {
        r.at(r.timer().unwrap());
        r.send()
    };
    let body = r.broker.answer(&t2);
    r.coordinator.handle_response(
        RequestId(t2.tag.id.0 + 100),
        t2.version,
        &body,
        r.now(),
        &mut r.net.links,
        &mut r.cluster,
    );
    assert_eq!(r.coordinator.node(), None);
    r.answer(&t2);
    assert_eq!(r.coordinator.node(), Some(NodeId(2)));
}

#[test]
fn a_malformed_answer_closes_the_link_and_backs_off() {
    let mut r = Rig::new();
    let t = r.send();
    r.deliver(&t, &malformed());
    assert_eq!(r.net.links.take_close_requests().len(), 1);
    assert!(r.coordinator.last_problem().unwrap().contains("malformed"));
    assert!(r.timer().is_some());
}

#[test]
fn an_unusable_address_or_a_missing_entry_is_a_retriable_problem() {
    let mut r = Rig::new();
    let t = r.send();
    let mut resp = r.broker.find_coordinator(&t, 0);
    resp.coordinators[0].port = 0;
    r.deliver(&t, &response::<FindCoordinatorRequest>(&t, &resp));
    assert_eq!(r.coordinator.node(), None);
    assert!(r
        .coordinator
        .last_problem()
        .unwrap()
        .contains("unusable address"));
    assert!(r.coordinator.fatal().is_none());
    r.at(r.timer().unwrap());
    let t = r.send();
    let resp = FindCoordinatorResponse::default();
    r.deliver(&t, &response::<FindCoordinatorRequest>(&t, &resp));
    assert_eq!(r.coordinator.node(), None);
    assert!(r.timer().is_some());
}

#[test]
fn a_throttled_answer_throttles_the_link() {
    let mut r = Rig::new();
    let t = r.send();
    let mut resp = r.broker.find_coordinator(&t, 0);
    resp.throttle_time_ms = 400;
    r.deliver(&t, &response::<FindCoordinatorRequest>(&t, &resp));
    r.net.links.begin_round();
    assert!(r.net.links.ready(t.route, r.now()).is_none());
}

#[test]
fn poll_timeout_is_only_while_wanted_and_unknown_and_never_passed() {
    let mut r = Rig::new();
    let t = r.send();
    r.answer_error(&t, ErrorCode::COORDINATOR_NOT_AVAILABLE);
    let again = r.timer().expect("wanted: the backoff is a timer");
    assert!(again > r.now());
    assert_eq!(r.coordinator.poll_timeout(again), None, "not once passed");
    r.wanted = false;
    r.round();
    assert_eq!(r.timer(), None, "not wanted: no timer");
}
