//! Deterministic tests of the fetcher: positions, resets, fetch planning, the error policy,
//! the byte budget and its timers, against the simulated brokers of `crate::sim`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::buffer::FrameBuf;
use crate::cluster::Cluster;
use crate::link::Versions;
use crate::protocol::api::list_offsets::ListOffsetsRequest;
use crate::protocol::api::offset_for_leader_epoch::OffsetForLeaderEpochRequest;
use crate::protocol::api::Api;
use crate::sim::{
    self, batch, batch_with, cluster_config, control_route, encode_fetch, fetch_config,
    fetch_route, malformed, ms, request, response, tp, FetchAnswer, Net, SimBroker,
};
use crate::types::{ApiVersion, MetadataGeneration, RequestId};

/// A fetcher with its links, its cluster and the brokers that answer it.
pub(super) struct Rig {
    pub net: Net,
    pub cluster: Cluster,
    pub fetcher: Fetcher,
    pub broker: SimBroker,
    pub budget: Arc<Budget>,
    pub wakes: sim::Wakes,
    pub epochs: BTreeMap<TopicPartition, PositionEpoch>,
    next_epoch: u64,
    /// Metadata requests are held here instead of answered at once.
    pub hold_metadata: bool,
    pub held_metadata: Vec<Transmit>,
    /// Metadata requests sent so far.
    pub metadata_sent: usize,
    /// Links closed at the fetcher's request (their requests in flight fail).
    pub closed: Vec<Route>,
    /// The fetcher defers decoding answers, and each round decodes them after the
    /// fetcher's requests went out, as the I/O loop does (`Fetcher::set_defer_decoding`).
    pub defer: bool,
}

impl Rig {
    pub fn new(cfg: FetchConfig, broker: SimBroker) -> Rig {
        Rig::with_budget(cfg, broker, 64 * 1024 * 1024)
    }

    pub fn with_budget(cfg: FetchConfig, broker: SimBroker, cap: usize) -> Rig {
        let (budget, wakes) = sim::budget(cap);
        Rig {
            net: Net::new(),
            cluster: Cluster::new(cluster_config()),
            fetcher: Fetcher::new(cfg, Arc::clone(&budget), sim::jitter(11)),
            broker,
            budget,
            wakes,
            epochs: BTreeMap::new(),
            next_epoch: 0,
            hold_metadata: false,
            held_metadata: Vec::new(),
            metadata_sent: 0,
            closed: Vec::new(),
            defer: false,
        }
    }

    /// As [`Rig::with_budget`], decoding answers after the next round's requests.
    pub fn deferring(cfg: FetchConfig, broker: SimBroker, cap: usize) -> Rig {
        let mut r = Rig::with_budget(cfg, broker, cap);
        r.defer = true;
        r.fetcher.set_defer_decoding(true);
        r
    }

    pub fn now(&self) -> Instant {
        self.net.now()
    }

    fn new_epoch(&mut self, tp: &TopicPartition) -> PositionEpoch {
        self.next_epoch += 1;
        let e = PositionEpoch(self.next_epoch);
        self.epochs.insert(tp.clone(), e);
        e
    }

    /// Assigns exactly `list`; partitions already assigned keep their epoch and state.
    pub fn assign(&mut self, list: &[(TopicPartition, SeekTo)]) {
        let keep: BTreeSet<&TopicPartition> = list.iter().map(|(tp, _)| tp).collect();
        self.epochs.retain(|tp, _| keep.contains(tp));
        let mut out = Vec::new();
        for (tp, to) in list {
            let e = match self.epochs.get(tp) {
                Some(e) => *e,
                None => self.new_epoch(tp),
            };
            out.push((tp.clone(), e, *to));
        }
        self.fetcher.assign(out, &mut self.cluster);
    }

    /// Seeks `tp` under a new epoch (`resume`: also unpause it, as `resume()` does).
    pub fn seek(&mut self, tp: &TopicPartition, to: SeekTo, resume: bool) {
        let e = self.new_epoch(tp);
        self.fetcher.seek(tp, e, to, resume);
    }

    pub fn epoch(&self, tp: &TopicPartition) -> PositionEpoch {
        self.epochs[tp]
    }

    /// One round of the I/O loop: the requests the fetcher hands out. Metadata requests
    /// are answered by the brokers at once (unless held), wanted links connect.
    pub fn round(&mut self) -> Vec<Transmit> {
        let now = self.now();
        self.net.links.begin_round();
        let mut out = Vec::new();
        while let Some(t) = self
            .fetcher
            .poll_transmit(now, &mut self.net.links, &mut self.cluster)
        {
            self.net.sent(&t);
            out.push(t);
            assert!(out.len() < 100, "requests without end in one round");
        }
        if self.defer && self.fetcher.decode_deferred(now) {
            // As the I/O loop does: what decoding changed is planned at once.
            while let Some(t) =
                self.fetcher
                    .poll_transmit(now, &mut self.net.links, &mut self.cluster)
            {
                self.net.sent(&t);
                out.push(t);
                assert!(out.len() < 100, "requests without end in one round");
            }
        }
        while let Some(t) = self.cluster.poll_transmit(now, &mut self.net.links) {
            self.net.sent(&t);
            self.metadata_sent += 1;
            if self.hold_metadata {
                self.held_metadata.push(t);
            } else {
                self.answer_metadata(&t);
            }
        }
        for (route, why) in self.net.links.take_close_requests() {
            self.net.close(route, &why);
            self.closed.push(route);
        }
        self.net.connect_wanted();
        out
    }

    /// Rounds until the fetcher hands something out (links connect, metadata arrives in
    /// between), at most six.
    pub fn sends(&mut self) -> Vec<Transmit> {
        for _ in 0..6 {
            let t = self.round();
            if !t.is_empty() {
                return t;
            }
        }
        Vec::new()
    }

    /// The one request the fetcher hands out next.
    pub fn send(&mut self) -> Transmit {
        let mut ts = self.sends();
        assert_eq!(ts.len(), 1, "expected one request: {ts:?}");
        ts.remove(0)
    }

    pub fn answer_metadata(&mut self, t: &Transmit) {
        let body = self.broker.answer(t);
        self.net.answered(t.route);
        let now = self.now();
        self.cluster
            .handle_response(t.tag.id, t.version, &body, now, &mut self.net.links);
    }

    /// Answers the metadata requests held back.
    pub fn release_metadata(&mut self) {
        for t in std::mem::take(&mut self.held_metadata) {
            self.answer_metadata(&t);
        }
    }

    pub fn deliver(&mut self, t: &Transmit, mut body: Vec<u8>) {
        body.shrink_to_fit();
        self.net.answered(t.route);
        let now = self.now();
        self.fetcher.handle_response(
            t.tag.id,
            t.version,
            FrameBuf::from_vec(body),
            now,
            &mut self.net.links,
            &mut self.cluster,
        );
    }

    /// Answers `t` as the simulated brokers do.
    pub fn answer(&mut self, t: &Transmit) {
        let body = self.broker.answer(t);
        self.deliver(t, body);
    }

    /// Answers the Fetch `t` with the brokers' answer changed by `f`.
    pub fn answer_with(&mut self, t: &Transmit, f: impl FnOnce(&mut FetchAnswer)) {
        let mut a = self.broker.fetch(t);
        f(&mut a);
        self.deliver(t, encode_fetch(t.version.get(), &a));
    }

    /// Answers the Fetch `t` with `code` for every partition.
    pub fn answer_error(&mut self, t: &Transmit, code: ErrorCode) {
        let body = self.broker.answer_error(t, code);
        self.deliver(t, body);
    }

    /// `t` gets no answer: its link closes.
    pub fn fail(&mut self, t: &Transmit, f: Failure) {
        self.net.close(t.route, &f.to_string());
        let now = self.now();
        self.fetcher.handle_failure(t.tag.id, &f, now);
    }

    pub fn events(&mut self) -> Vec<FetchEvent> {
        std::iter::from_fn(|| self.fetcher.poll_event()).collect()
    }

    pub fn timer(&self) -> Option<Instant> {
        self.fetcher.poll_timeout(self.now())
    }

    pub fn at(&mut self, t: Instant) {
        self.net.clock.advance_to(t);
    }

    pub fn advance(&mut self, d: Duration) {
        self.net.clock.advance(d);
    }

    /// The partitions (and offsets) a Fetch names.
    pub fn fetched(&self, t: &Transmit) -> Vec<(TopicPartition, i64)> {
        assert_eq!(t.api_key, FetchRequest::KEY, "not a Fetch");
        self.broker.fetch_request(t).1
    }
}

/// The partitions and timestamps a ListOffsets asks for.
/// The partitions an OffsetForLeaderEpoch request validates.
fn validations(t: &Transmit) -> Vec<TopicPartition> {
    let req = request::<OffsetForLeaderEpochRequest>(t);
    req.topics
        .iter()
        .flat_map(|rt| {
            rt.partitions
                .iter()
                .map(|p| TopicPartition::new(rt.topic.as_str(), p.partition))
        })
        .collect()
}

fn resets(t: &Transmit) -> Vec<(TopicPartition, i64)> {
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

/// `(partition, fetch offset, next offset, record offsets)` of each chunk.
fn chunks(ev: &[FetchEvent]) -> Vec<(TopicPartition, i64, i64, Vec<i64>)> {
    ev.iter()
        .filter_map(|e| match e {
            FetchEvent::Chunk(c) => Some((
                c.tp.clone(),
                c.fetch_offset,
                c.next_offset,
                c.records.iter().map(|r| r.offset).collect(),
            )),
            _ => None,
        })
        .collect()
}

fn errors(ev: &[FetchEvent]) -> Vec<(&Error, Option<PositionEpoch>)> {
    ev.iter()
        .filter_map(|e| match e {
            FetchEvent::Error(e, epoch) => Some((e, *epoch)),
            _ => None,
        })
        .collect()
}

fn offsets(range: std::ops::Range<i64>) -> Vec<i64> {
    range.collect()
}

fn t0() -> TopicPartition {
    tp("t", 0)
}

fn t1() -> TopicPartition {
    tp("t", 1)
}

/// Brokers 1 and 2; topic `t` with partition 0 on broker 1 and partition 1 on broker 2,
/// 30 records each.
fn two_brokers() -> SimBroker {
    SimBroker::new(&[1, 2]).topic("t", &[1, 2], 30)
}

fn earliest() -> FetchConfig {
    fetch_config(OffsetReset::Earliest)
}

/// A rig whose `t-0` is being fetched from `offset` (the Fetch in flight is returned).
fn fetching_from(offset: i64) -> (Rig, Transmit) {
    let mut r = Rig::new(earliest(), two_brokers());
    r.assign(&[(t0(), SeekTo::Offset(offset))]);
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), offset)]);
    (r, t)
}

// ----- positions and resets -----------------------------------------------------------------

#[test]
fn an_assigned_partition_is_reset_on_its_leaders_control_link_then_fetched_on_its_fetch_link() {
    let mut b = two_brokers();
    b.part(&t0()).log_start = 3;
    let mut r = Rig::new(earliest(), b);
    r.assign(&[(t0(), SeekTo::Beginning)]);
    let t = r.send();
    assert_eq!(
        t.route,
        control_route(1),
        "ListOffsets to the leader's control link"
    );
    assert_eq!(resets(&t), vec![(t0(), list_offsets::EARLIEST)]);
    let q = request::<ListOffsetsRequest>(&t);
    assert_eq!(q.topics[0].partitions[0].current_leader_epoch, 5);
    r.answer(&t);
    let ev = r.events();
    assert_eq!(
        chunks(&ev),
        vec![(t0(), 3, 3, vec![])],
        "the position moves to 3"
    );

    let t = r.send();
    assert_eq!(t.route, fetch_route(1), "fetches use the fetch link");
    assert_eq!(r.fetched(&t), vec![(t0(), 3)]);
    let req = request::<FetchRequest>(&t);
    assert_eq!(req.topics[0].partitions[0].current_leader_epoch, 5);
    r.answer(&t);
    let ev = r.events();
    assert_eq!(chunks(&ev), vec![(t0(), 3, 13, offsets(3..13))]);
    let FetchEvent::Chunk(c) = ev
        .iter()
        .find(|e| matches!(e, FetchEvent::Chunk(_)))
        .unwrap()
    else {
        unreachable!()
    };
    assert_eq!(c.epoch, r.epoch(&t0()));
    assert_eq!(c.end_offset, 30);
    let first = c.records[0];
    assert_eq!(
        c.slice(&first, first.value_start, first.value_len as u32),
        b"v3"
    );
    assert!(ev.iter().any(|e| matches!(
        e,
        FetchEvent::End { tp, end_offset: 30, .. } if *tp == t0()
    )));

    let t = r.send();
    assert_eq!(
        r.fetched(&t),
        vec![(t0(), 13)],
        "the next fetch continues at 13"
    );
}

#[test]
fn seek_to_end_resets_to_the_log_end_and_seek_to_an_offset_needs_no_lookup() {
    let mut r = Rig::new(earliest(), two_brokers());
    r.assign(&[(t0(), SeekTo::End), (t1(), SeekTo::Offset(7))]);
    let ts = r.sends();
    let reset = ts
        .iter()
        .find(|t| t.api_key == ListOffsetsRequest::KEY)
        .unwrap();
    let fetch = ts.iter().find(|t| t.api_key == FetchRequest::KEY).unwrap();
    assert_eq!(resets(reset), vec![(t0(), list_offsets::LATEST)]);
    assert_eq!(fetch.route, fetch_route(2));
    assert_eq!(r.fetched(fetch), vec![(t1(), 7)]);
    r.answer(reset);
    assert_eq!(chunks(&r.events()), vec![(t0(), 30, 30, vec![])]);
}

#[test]
fn an_answer_made_for_an_older_position_epoch_is_ignored() {
    let (mut r, t) = fetching_from(0);
    r.seek(&t0(), SeekTo::Offset(20), false);
    assert!(
        r.round().is_empty(),
        "the partition is still in a request: no second one"
    );
    r.answer(&t);
    let ev = r.events();
    assert!(ev.is_empty(), "stale data delivered: {ev:?}");
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 20)]);
    r.answer(&t);
    assert_eq!(chunks(&r.events()), vec![(t0(), 20, 30, offsets(20..30))]);
}

#[test]
fn a_position_lookup_answered_after_a_seek_is_ignored() {
    let mut r = Rig::new(earliest(), two_brokers());
    r.assign(&[(t0(), SeekTo::Beginning)]);
    let t = r.send();
    r.seek(&t0(), SeekTo::End, false);
    r.answer(&t);
    assert!(r.events().is_empty());
    let t = r.send();
    assert_eq!(resets(&t), vec![(t0(), list_offsets::LATEST)]);
    r.answer(&t);
    let ev = r.events();
    assert_eq!(chunks(&ev), vec![(t0(), 30, 30, vec![])]);
    assert!(ev.iter().all(|e| match e {
        FetchEvent::Chunk(c) => c.epoch == r.epoch(&t0()),
        _ => true,
    }));
}

#[test]
fn at_most_one_fetch_is_in_flight_per_broker() {
    let b = SimBroker::new(&[1, 2]).topic("t", &[1, 1, 2], 100);
    let mut r = Rig::new(earliest(), b);
    r.assign(&[
        (tp("t", 0), SeekTo::Offset(0)),
        (tp("t", 1), SeekTo::Offset(0)),
        (tp("t", 2), SeekTo::Offset(0)),
    ]);
    let ts = r.sends();
    assert_eq!(ts.len(), 2, "one fetch per broker: {ts:?}");
    let one = ts.iter().find(|t| t.route == fetch_route(1)).unwrap();
    let two = ts.iter().find(|t| t.route == fetch_route(2)).unwrap();
    let mut on_one = r.fetched(one);
    on_one.sort();
    assert_eq!(on_one, vec![(tp("t", 0), 0), (tp("t", 1), 0)]);
    assert_eq!(r.fetched(two), vec![(tp("t", 2), 0)]);
    for _ in 0..5 {
        r.advance(Duration::from_secs(10));
        assert!(
            r.round().is_empty(),
            "a second fetch while one is in flight"
        );
    }
    assert_eq!(
        r.timer(),
        None,
        "nothing to wake for while both are in flight"
    );
    r.answer(one);
    let ts = r.round();
    assert_eq!(ts.len(), 1);
    assert_eq!(ts[0].route, fetch_route(1));
}

#[test]
fn partitions_are_rotated_so_that_each_comes_first_in_turn() {
    let b = SimBroker::new(&[1]).topic("t", &[1, 1, 1], 1_000);
    let mut r = Rig::new(earliest(), b);
    r.assign(&[
        (tp("t", 0), SeekTo::Offset(0)),
        (tp("t", 1), SeekTo::Offset(0)),
        (tp("t", 2), SeekTo::Offset(0)),
    ]);
    let mut orders = Vec::new();
    for _ in 0..4 {
        let t = r.send();
        orders.push(
            r.fetched(&t)
                .iter()
                .map(|(tp, _)| tp.partition())
                .collect::<Vec<_>>(),
        );
        r.answer(&t);
        drop(r.events());
    }
    assert_eq!(
        orders,
        vec![vec![0, 1, 2], vec![1, 2, 0], vec![2, 0, 1], vec![0, 1, 2]]
    );
}

// ----- pause and resume ------------------------------------------------------------------------

#[test]
fn a_paused_partition_is_never_fetched_a_seek_keeps_it_paused_and_resume_unpauses_it() {
    let b = SimBroker::new(&[1]).topic("t", &[1, 1], 100);
    let mut r = Rig::new(earliest(), b);
    r.assign(&[(t0(), SeekTo::Offset(0)), (t1(), SeekTo::Offset(0))]);
    r.fetcher.pause(&[t0()]);
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t1(), 0)]);
    r.answer(&t);
    drop(r.events());

    r.seek(&t0(), SeekTo::Offset(5), false);
    for _ in 0..3 {
        let t = r.send();
        assert!(
            r.fetched(&t).iter().all(|(tp, _)| *tp != t0()),
            "a seek does not resume"
        );
        r.answer(&t);
        drop(r.events());
    }
    r.seek(&t0(), SeekTo::Offset(5), true);
    let t = r.send();
    assert!(r.fetched(&t).contains(&(t0(), 5)), "resumed from 5");
}

#[test]
fn a_paused_partition_is_also_never_reset() {
    let mut r = Rig::new(earliest(), two_brokers());
    r.assign(&[(t0(), SeekTo::Beginning)]);
    r.fetcher.pause(&[t0()]);
    assert!(r.sends().is_empty());
    assert_eq!(r.timer(), None);
    r.seek(&t0(), SeekTo::Beginning, true);
    assert_eq!(r.send().api_key, ListOffsetsRequest::KEY);
}

#[test]
fn pausing_a_partition_removes_it_from_the_fetch_session() {
    let mut b = SimBroker::new(&[1]).topic("t", &[1, 1], 1_000);
    b.sessions = true;
    let mut r = Rig::new(earliest(), b);
    r.assign(&[(t0(), SeekTo::Offset(0)), (t1(), SeekTo::Offset(0))]);
    let t = r.send();
    assert_eq!(
        request::<FetchRequest>(&t).session_epoch,
        0,
        "the first fetch opens a session"
    );
    r.answer(&t);
    drop(r.events());
    r.fetcher.pause(&[t0()]);
    let t = r.send();
    let (req, asked) = r.broker.fetch_request(&t);
    assert!(req.session_epoch > 0, "incremental");
    assert!(asked.iter().all(|(tp, _)| *tp != t0()));
    assert_eq!(
        r.broker.forgotten(&t, &req),
        vec![t0()],
        "the broker forgets it"
    );
    let a = r.broker.fetch(&t);
    assert!(
        a.parts.iter().all(|p| p.tp != t0()),
        "and returns no data for it"
    );
}

// ----- the error policy ------------------------------------------------------------------------

#[test]
fn errors_that_mean_stale_metadata_back_off_and_wait_for_newer_metadata() {
    for code in [
        ErrorCode::NOT_LEADER_OR_FOLLOWER,
        ErrorCode::LEADER_NOT_AVAILABLE,
        ErrorCode::REPLICA_NOT_AVAILABLE,
        ErrorCode::KAFKA_STORAGE_ERROR,
        ErrorCode::FENCED_LEADER_EPOCH,
        ErrorCode::OFFSET_NOT_AVAILABLE,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::UNKNOWN_TOPIC_ID,
        ErrorCode::INCONSISTENT_TOPIC_ID,
        ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE,
    ] {
        let (mut r, t) = fetching_from(4);
        r.hold_metadata = true;
        r.answer_error(&t, code);
        assert!(r.events().is_empty(), "{code}: retriable, not reported");
        // Long after the backoff, still no fetch: the metadata did not change yet.
        r.advance(Duration::from_secs(5));
        for _ in 0..3 {
            assert!(
                r.round().is_empty(),
                "{code}: fetched before newer metadata"
            );
        }
        assert!(
            !r.held_metadata.is_empty(),
            "{code}: a refresh was asked for"
        );
        // The leader moved to broker 2 (epoch 6).
        let p = r.broker.part(&t0());
        p.leader = 2;
        p.epoch = 6;
        r.release_metadata();
        let t = r.send();
        assert_eq!(t.route, fetch_route(2), "{code}");
        assert_eq!(
            r.fetched(&t),
            vec![(t0(), 4)],
            "{code}: from the same position"
        );
        let req = request::<FetchRequest>(&t);
        assert_eq!(req.topics[0].partitions[0].current_leader_epoch, 6);
    }
}

#[test]
fn a_stale_leader_error_still_waits_out_its_backoff_once_new_metadata_is_there() {
    let (mut r, t) = fetching_from(0);
    r.advance(Duration::from_secs(1));
    let failed_at = r.now();
    r.answer_error(&t, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    let backoff_end = r.timer().expect("a backoff");
    assert!(backoff_end >= failed_at + ms(80) && backoff_end <= failed_at + ms(120));
    // Newer metadata arrives before the backoff ends (same leader).
    r.at(failed_at + ms(60));
    r.cluster.request_update();
    assert!(r.round().is_empty());
    r.at(backoff_end - ms(1));
    assert!(r.round().is_empty(), "fetched during the backoff");
    r.at(backoff_end);
    assert_eq!(r.round().len(), 1);
}

#[test]
fn offset_out_of_range_resets_per_auto_offset_reset() {
    for (reset, ts, to) in [
        (OffsetReset::Earliest, list_offsets::EARLIEST, 0),
        (OffsetReset::Latest, list_offsets::LATEST, 30),
    ] {
        let mut r = Rig::new(fetch_config(reset), two_brokers());
        r.assign(&[(t0(), SeekTo::Offset(50))]);
        let t = r.send();
        r.answer(&t);
        assert!(errors(&r.events()).is_empty(), "{reset:?}: not an error");
        let t = r.send();
        assert_eq!(resets(&t), vec![(t0(), ts)], "{reset:?}");
        r.answer(&t);
        assert_eq!(
            chunks(&r.events()),
            vec![(t0(), 50, to, vec![])],
            "{reset:?}: the move is from the old position"
        );
        let t = r.send();
        assert_eq!(r.fetched(&t), vec![(t0(), to)]);
    }
}

#[test]
fn offset_out_of_range_with_reset_none_reports_once_and_stops_fetching_until_a_seek() {
    let mut r = Rig::new(fetch_config(OffsetReset::None), two_brokers());
    r.assign(&[(t0(), SeekTo::Offset(50))]);
    let t = r.send();
    r.answer(&t);
    let ev = r.events();
    let errs = errors(&ev);
    assert_eq!(errs.len(), 1, "{ev:?}");
    let (e, epoch) = errs[0];
    assert_eq!(e.kind(), ErrorKind::OffsetOutOfRange);
    assert_eq!(e.partition(), Some(&t0()));
    assert_eq!(e.offset(), Some(50));
    assert_eq!(epoch, Some(r.epoch(&t0())));
    drop(ev);
    for _ in 0..10 {
        r.advance(Duration::from_secs(60));
        assert!(r.round().is_empty(), "a stuck partition is fetched");
        assert!(r.events().is_empty(), "reported again");
    }
    assert_eq!(r.timer(), None, "nothing to wake for");
    r.seek(&t0(), SeekTo::Offset(3), false);
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 3)]);
}

#[test]
fn no_position_with_reset_none_is_reported_and_waits_for_a_seek() {
    let mut r = Rig::new(fetch_config(OffsetReset::None), two_brokers());
    r.assign(&[(t0(), SeekTo::Default)]);
    let ev = r.events();
    let errs = errors(&ev);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].0.kind(), ErrorKind::NoOffset);
    assert_eq!(errs[0].0.partition(), Some(&t0()));
    assert!(r.sends().is_empty());
}

#[test]
fn a_non_retriable_fetch_error_is_reported_with_partition_and_offset_and_retried_later() {
    for code in [
        ErrorCode::UNKNOWN_SERVER_ERROR,
        ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        ErrorCode::Other(1234),
    ] {
        let (mut r, t) = fetching_from(6);
        let failed_at = r.now();
        r.answer_error(&t, code);
        let ev = r.events();
        let errs = errors(&ev);
        assert_eq!(errs.len(), 1, "{code}: {ev:?}");
        let (e, epoch) = errs[0];
        assert_eq!(e.partition(), Some(&t0()), "{code}");
        assert_eq!(e.offset(), Some(6), "{code}");
        assert_eq!(e.kafka_code(), Some(code.code()));
        assert!(e.to_string().contains("t-0"), "{e}");
        assert_eq!(epoch, Some(r.epoch(&t0())));
        let again = r.timer().expect("retried after a backoff");
        assert!(again >= failed_at + ms(80) && again <= failed_at + ms(120));
        assert!(r.round().is_empty());
        r.at(again);
        let t = r.send();
        assert_eq!(r.fetched(&t), vec![(t0(), 6)]);
    }
}

#[test]
fn a_retriable_fetch_error_backs_off_without_a_report() {
    let (mut r, t) = fetching_from(0);
    r.answer_error(&t, ErrorCode::CORRUPT_MESSAGE);
    assert!(r.events().is_empty());
    assert!(r.round().is_empty());
    let again = r.timer().unwrap();
    r.at(again);
    assert_eq!(r.round().len(), 1);
}

#[test]
fn the_partition_backoff_grows_with_consecutive_failures_and_resets_on_success() {
    let (mut r, mut t) = fetching_from(0);
    let mut delays = Vec::new();
    for _ in 0..6 {
        let failed_at = r.now();
        r.answer_error(&t, ErrorCode::CORRUPT_MESSAGE);
        let again = r.timer().unwrap();
        r.at(again - ms(1));
        assert!(r.round().is_empty(), "retried before its backoff");
        r.at(again);
        t = r.send();
        delays.push(again - failed_at);
    }
    for (d, base) in delays.iter().zip([100, 200, 400, 800, 1000, 1000]) {
        assert!(
            *d >= ms(base * 8 / 10) && *d <= ms(base * 12 / 10),
            "{delays:?}: doubling from retry.backoff.ms to retry.backoff.max.ms"
        );
    }
    r.answer(&t);
    assert_eq!(chunks(&r.events()).len(), 1);
    let t = r.send();
    let failed_at = r.now();
    r.answer_error(&t, ErrorCode::CORRUPT_MESSAGE);
    assert!(
        r.timer().unwrap() <= failed_at + ms(120),
        "reset by the success"
    );
}

#[test]
fn answers_that_do_not_move_the_position_back_off_growing_and_are_reported_after_four() {
    let (mut r, mut t) = fetching_from(0);
    let mut reports = 0;
    let mut delays = Vec::new();
    for i in 1..=6 {
        let cut = batch(0, 10);
        let at = r.now();
        r.answer_with(&t, |a| {
            a.part(&t0()).records = cut[..cut.len() - 4].to_vec()
        });
        let ev = r.events();
        assert!(chunks(&ev).is_empty());
        for (e, _) in errors(&ev) {
            reports += 1;
            assert_eq!(i, 4, "reported after the fourth, once");
            assert_eq!(e.kind(), ErrorKind::Protocol);
            assert_eq!(e.partition(), Some(&t0()));
            assert_eq!(e.offset(), Some(0));
        }
        let again = r.timer().expect("a backoff");
        delays.push(again - at);
        r.at(again);
        t = r.send();
        assert_eq!(r.fetched(&t), vec![(t0(), 0)]);
    }
    assert_eq!(reports, 1);
    assert!(delays.windows(2).take(3).all(|w| w[1] > w[0]), "{delays:?}");
}

#[test]
fn a_position_lookup_answered_with_offset_minus_one_backs_off_growing_and_is_reported_once() {
    let mut r = Rig::new(earliest(), two_brokers());
    r.assign(&[(t0(), SeekTo::Beginning)]);
    let mut delays = Vec::new();
    let mut reports = 0;
    for _ in 0..6 {
        let t = r.send();
        let mut resp = r
            .broker
            .list_offsets(&t, &request::<ListOffsetsRequest>(&t));
        resp.topics[0].partitions[0].offset = -1;
        let at = r.now();
        r.deliver(&t, response::<ListOffsetsRequest>(&t, &resp));
        let ev = r.events();
        assert!(chunks(&ev).is_empty(), "no position from -1");
        reports += errors(&ev).len();
        let again = r.timer().expect("backing off");
        delays.push(again - at);
        r.at(again);
    }
    assert_eq!(reports, 1, "said once");
    assert!(delays.windows(2).take(3).all(|w| w[1] > w[0]), "{delays:?}");
}

#[test]
fn a_position_lookup_error_is_retried_and_a_non_retriable_one_reported_once() {
    let mut r = Rig::new(earliest(), two_brokers());
    r.assign(&[(t0(), SeekTo::Beginning)]);
    let mut reports = 0;
    for _ in 0..3 {
        let t = r.send();
        assert_eq!(t.api_key, ListOffsetsRequest::KEY);
        let body = r
            .broker
            .answer_error(&t, ErrorCode::TOPIC_AUTHORIZATION_FAILED);
        r.deliver(&t, body);
        let ev = r.events();
        for (e, _) in errors(&ev) {
            assert_eq!(e.kafka_code(), Some(29));
            assert_eq!(e.partition(), Some(&t0()));
            reports += 1;
        }
        let again = r.timer().unwrap();
        r.at(again);
    }
    assert_eq!(reports, 1);
    // A stale leader: wait for newer metadata.
    let t = r.send();
    r.hold_metadata = true;
    let body = r.broker.answer_error(&t, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    r.deliver(&t, body);
    r.advance(Duration::from_secs(5));
    assert!(r.round().is_empty());
    r.release_metadata();
    assert_eq!(r.send().api_key, ListOffsetsRequest::KEY);
}

#[test]
fn a_failed_position_lookup_is_retried_after_a_backoff() {
    let mut r = Rig::new(earliest(), two_brokers());
    r.assign(&[(t0(), SeekTo::Beginning)]);
    let t = r.send();
    r.fail(&t, Failure::TimedOut);
    let again = r.timer().expect("backoff");
    assert!(again > r.now());
    r.at(again + Duration::from_secs(1));
    assert_eq!(resets(&r.send()), vec![(t0(), list_offsets::EARLIEST)]);
}

#[test]
fn a_malformed_position_lookup_answer_closes_the_link_and_backs_off() {
    let mut r = Rig::new(earliest(), two_brokers());
    r.assign(&[(t0(), SeekTo::Beginning)]);
    let t = r.send();
    r.deliver(&t, malformed());
    assert_eq!(r.net.links.take_close_requests().len(), 1);
    assert!(r.timer().is_some());
}

#[test]
fn a_top_level_session_error_makes_the_next_fetch_a_full_one_after_a_broker_backoff() {
    for code in [
        ErrorCode::FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode::INVALID_FETCH_SESSION_EPOCH,
    ] {
        let mut b = two_brokers();
        b.sessions = true;
        let mut r = Rig::new(earliest(), b);
        r.assign(&[(t0(), SeekTo::Offset(0)), (t1(), SeekTo::Offset(0))]);
        let ts = r.sends();
        assert_eq!(ts.len(), 2);
        for t in &ts {
            r.answer(t);
        }
        drop(r.events());
        let ts = r.sends();
        let on_one = ts.iter().find(|t| t.route == fetch_route(1)).unwrap();
        let on_two = ts.iter().find(|t| t.route == fetch_route(2)).unwrap();
        assert!(
            request::<FetchRequest>(on_one).session_epoch > 0,
            "incremental"
        );
        let failed_at = r.now();
        r.answer_with(on_one, |a| {
            a.error_code = code.code();
            a.parts.clear();
        });
        assert!(r.events().is_empty(), "{code}: retriable");
        r.answer(on_two);
        drop(r.events());
        let ts = r.round();
        assert!(
            ts.iter().all(|t| t.route != fetch_route(1)),
            "{code}: broker 1 backs off"
        );
        assert!(
            ts.iter().any(|t| t.route == fetch_route(2)),
            "broker 2 is unaffected"
        );
        let again = r.timer().expect("the broker's backoff is a timer");
        assert!(
            again >= failed_at + ms(80) && again <= failed_at + ms(120),
            "{code}"
        );
        r.at(again);
        let t = r
            .round()
            .into_iter()
            .find(|t| t.route == fetch_route(1))
            .unwrap();
        let req = request::<FetchRequest>(&t);
        assert_eq!(req.session_epoch, 0, "{code}: a full request");
        assert_eq!(r.fetched(&t), vec![(t0(), 10)]);
    }
}

#[test]
fn a_non_retriable_top_level_fetch_error_is_reported_without_a_partition() {
    let (mut r, t) = fetching_from(0);
    r.answer_with(&t, |a| {
        a.error_code = ErrorCode::UNKNOWN_SERVER_ERROR.code();
        a.parts.clear();
    });
    let ev = r.events();
    let errs = errors(&ev);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].1, None);
    assert!(r.timer().is_some());
}

#[test]
fn the_broker_backoff_grows_with_consecutive_top_level_errors_and_resets_on_success() {
    let (mut r, mut t) = fetching_from(0);
    let mut delays = Vec::new();
    for _ in 0..4 {
        let at = r.now();
        r.answer_with(&t, |a| {
            a.error_code = ErrorCode::FETCH_SESSION_ID_NOT_FOUND.code();
            a.parts.clear();
        });
        let again = r.timer().unwrap();
        delays.push(again - at);
        r.at(again);
        t = r.send();
    }
    assert!(delays.windows(2).all(|w| w[1] > w[0]), "{delays:?}");
    r.answer(&t);
    drop(r.events());
    let t = r.send();
    let at = r.now();
    r.answer_with(&t, |a| {
        a.error_code = ErrorCode::FETCH_SESSION_ID_NOT_FOUND.code();
        a.parts.clear();
    });
    assert!(r.timer().unwrap() <= at + ms(120));
}

#[test]
fn a_malformed_fetch_answer_is_reported_closes_the_link_and_backs_off_the_broker() {
    let (mut r, t) = fetching_from(0);
    r.deliver(&t, malformed());
    let ev = r.events();
    let errs = errors(&ev);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].0.kind(), ErrorKind::Protocol);
    let closes = r.net.links.take_close_requests();
    assert_eq!(
        closes.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![fetch_route(1)]
    );
    assert!(r.timer().is_some());
}

#[test]
fn a_lost_fetch_makes_the_next_one_full_on_a_new_connection() {
    let mut b = two_brokers();
    b.sessions = true;
    let mut r = Rig::new(earliest(), b);
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    let t = r.send();
    r.answer(&t);
    drop(r.events());
    let t = r.send();
    assert!(request::<FetchRequest>(&t).session_epoch > 0);
    r.fail(&t, Failure::Disconnected("reset".into()));
    assert!(r.round().is_empty(), "the link backs off");
    let reconnect = r.net.links.poll_timeout(r.now()).expect("reconnect timer");
    r.at(reconnect);
    let t = r.send();
    let req = request::<FetchRequest>(&t);
    assert_eq!((req.session_id, req.session_epoch), (0, 0), "a new session");
    assert_eq!(r.fetched(&t), vec![(t0(), 10)]);
}

#[test]
fn a_missing_topic_is_reported_once_and_fetched_once_it_exists() {
    let mut r = Rig::new(earliest(), two_brokers());
    let g = tp("g", 0);
    r.assign(&[(g.clone(), SeekTo::Offset(0))]);
    let mut reports = 0;
    for _ in 0..20 {
        assert!(r.round().is_empty());
        let ev = r.events();
        for (e, epoch) in errors(&ev) {
            assert_eq!(e.kind(), ErrorKind::UnknownTopicOrPartition);
            assert_eq!(e.partition(), Some(&g));
            assert_eq!(epoch, Some(r.epoch(&g)));
            reports += 1;
        }
        r.advance(ms(300));
    }
    assert_eq!(reports, 1);
    r.broker = r.broker.clone().topic("g", &[2], 5);
    r.advance(Duration::from_secs(2));
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(g, 0)]);
}

#[test]
fn a_broker_without_a_fetch_version_is_reported_once() {
    let mut r = Rig::new(earliest(), two_brokers());
    r.net
        .links
        .on_ready(fetch_route(1), Versions::new([(3, 1, 13)]));
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    let mut reports = 0;
    for _ in 0..5 {
        assert!(r.round().is_empty());
        let ev = r.events();
        for (e, _) in errors(&ev) {
            assert_eq!(e.kind(), ErrorKind::Unsupported);
            reports += 1;
        }
    }
    assert_eq!(reports, 1);
}

// ----- leader epochs and truncation (KIP-320) ---------------------------------------------

/// A rig whose `t-0` read offsets 0..10 (leader epoch 5) from broker 1, whose leader then
/// moved to broker 2 at epoch 6 and whose Fetch got NOT_LEADER_OR_FOLLOWER: the next
/// request goes out once the new metadata is in.
fn leader_moved_after_reading_ten(epoch_end: Option<(i32, i64)>) -> Rig {
    let (mut r, t) = fetching_from(0);
    r.answer(&t);
    assert_eq!(chunks(&r.events())[0].2, 10);
    let p = r.broker.part(&t0());
    p.leader = 2;
    p.epoch = 6;
    p.epoch_end = epoch_end;
    let t = r.send();
    r.answer_error(&t, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    r.advance(Duration::from_secs(1));
    r
}

/// The partitions an OffsetForLeaderEpoch request asks about, with the current leader
/// epoch and the epoch asked for.
fn validated(t: &Transmit) -> Vec<(TopicPartition, i32, i32)> {
    let req = request::<OffsetForLeaderEpochRequest>(t);
    assert_eq!(req.replica_id, -1, "a consumer's request");
    req.topics
        .iter()
        .flat_map(|rt| {
            rt.partitions.iter().map(|p| {
                (
                    TopicPartition::new(rt.topic.as_str(), p.partition),
                    p.current_leader_epoch,
                    p.leader_epoch,
                )
            })
        })
        .collect()
}

/// A truncation as a test reads it: the partition, the fetch position and the divergence.
type Truncation = (TopicPartition, i64, Option<(i64, LeaderEpoch)>);

fn truncations(ev: &[FetchEvent]) -> Vec<Truncation> {
    ev.iter()
        .filter_map(|e| match e {
            FetchEvent::Truncated {
                tp,
                fetch_offset,
                divergent,
                ..
            } => Some((tp.clone(), *fetch_offset, *divergent)),
            _ => None,
        })
        .collect()
}

#[test]
fn at_to_validate_when_the_leader_moves_and_to_at_when_the_new_leader_holds_the_epoch() {
    let mut r = leader_moved_after_reading_ten(None);
    let v = r.send();
    assert_eq!(v.route, control_route(2), "asked of the new leader");
    assert_eq!(validated(&v), vec![(t0(), 6, 5)]);
    r.answer(&v);
    assert!(truncations(&r.events()).is_empty());
    let t = r.send();
    assert_eq!(t.route, fetch_route(2));
    assert_eq!(r.fetched(&t), vec![(t0(), 10)], "from where it was");
}

#[test]
fn validate_to_stuck_when_the_new_leaders_log_ends_the_epoch_below_the_position() {
    let mut r = leader_moved_after_reading_ten(Some((5, 7)));
    let v = r.send();
    r.answer(&v);
    let ev = r.events();
    assert_eq!(
        truncations(&ev),
        vec![(t0(), 10, Some((7, LeaderEpoch(5))))],
        "diverges at 7"
    );
    assert!(chunks(&ev).is_empty(), "nothing read past the divergence");
    r.advance(Duration::from_secs(5));
    for _ in 0..3 {
        assert!(r.round().is_empty(), "stopped until a seek");
    }
    assert_eq!(r.timer(), None, "idle meanwhile");
    r.seek(&t0(), SeekTo::Offset(7), false);
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 7)]);
}

#[test]
fn validate_to_stuck_with_an_unknown_divergence_when_the_leader_has_no_offsets_for_the_epoch() {
    let mut r = leader_moved_after_reading_ten(Some((-1, -1)));
    let v = r.send();
    r.answer(&v);
    assert_eq!(truncations(&r.events()), vec![(t0(), 10, None)]);
    assert!(r.round().is_empty());
}

#[test]
fn validate_waits_for_newer_metadata_after_fenced_leader_epoch_and_asks_again() {
    let mut r = leader_moved_after_reading_ten(None);
    let v = r.send();
    r.hold_metadata = true;
    r.deliver(
        &v,
        r.broker
            .clone()
            .answer_error(&v, ErrorCode::FENCED_LEADER_EPOCH),
    );
    assert!(r.events().is_empty(), "retriable: not reported");
    r.advance(Duration::from_secs(5));
    assert!(
        r.round().is_empty(),
        "not asked again before newer metadata"
    );
    assert!(!r.held_metadata.is_empty(), "a refresh was asked for");
    r.release_metadata();
    let v = r.send();
    assert_eq!(validated(&v), vec![(t0(), 6, 5)], "validated again");
}

#[test]
fn validate_backs_off_after_unknown_leader_epoch_and_asks_again() {
    let mut r = leader_moved_after_reading_ten(None);
    let v = r.send();
    let at = r.now();
    r.deliver(
        &v,
        r.broker
            .clone()
            .answer_error(&v, ErrorCode::UNKNOWN_LEADER_EPOCH),
    );
    assert!(r.round().is_empty(), "not at once");
    let retry = r.timer().expect("a backoff");
    assert!(retry >= at + ms(80), "waits a backoff");
    r.at(retry);
    let v = r.send();
    assert_eq!(validated(&v), vec![(t0(), 6, 5)]);
}

#[test]
fn a_leader_without_offset_for_leader_epoch_v3_is_fetched_from_without_validation() {
    let mut r = leader_moved_after_reading_ten(Some((5, 7)));
    let mut versions: Vec<(i16, i16, i16)> = vec![(1, 4, 18), (2, 1, 11), (3, 1, 13)];
    versions.push((23, 2, 2));
    r.net
        .links
        .on_ready(control_route(2), Versions::new(versions));
    let t = r.send();
    assert_eq!(t.route, fetch_route(2), "as the Java client: no validation");
    assert_eq!(r.fetched(&t), vec![(t0(), 10)]);
}

#[test]
fn skipping_validation_fetches_in_the_same_round_rather_than_at_a_wakeup_that_may_never_come() {
    let mut r = leader_moved_after_reading_ten(Some((5, 7)));
    let versions = || Versions::new(vec![(1, 4, 18), (2, 1, 11), (3, 1, 13), (23, 2, 2)]);
    r.net.links.on_ready(control_route(2), versions());
    r.net.links.on_ready(fetch_route(2), versions());
    for _ in 0..6 {
        let out = r.round();
        let seen = r.fetcher.parts[&t0()].leader_seen;
        if out.is_empty() {
            // Nothing would wake the I/O loop again: the partition would sit unfetched.
            assert_ne!(
                seen.map(|(n, _)| n),
                Some(NodeId(2)),
                "validation on node 2 was skipped, but that round fetched nothing"
            );
            continue;
        }
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].route, fetch_route(2));
        assert_eq!(r.fetched(&out[0]), vec![(t0(), 10)]);
        return;
    }
    panic!("no fetch from node 2 within six rounds");
}

#[test]
fn a_position_without_a_leader_epoch_is_not_validated_when_the_leader_moves() {
    let (mut r, t) = fetching_from(4);
    let p = r.broker.part(&t0());
    p.leader = 2;
    p.epoch = 6;
    r.answer_error(&t, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    r.advance(Duration::from_secs(1));
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 4)], "a seek carries no epoch");
}

#[test]
fn a_leader_epoch_bump_on_the_same_leader_validates_too() {
    let (mut r, t) = fetching_from(0);
    r.answer(&t);
    r.events();
    r.broker.part(&t0()).epoch = 6;
    let t = r.send();
    r.answer_error(&t, ErrorCode::FENCED_LEADER_EPOCH);
    r.advance(Duration::from_secs(1));
    let v = r.send();
    assert_eq!(v.route, control_route(1));
    assert_eq!(validated(&v), vec![(t0(), 6, 5)]);
}

// ----- throttling and replicas -------------------------------------------------------------------

#[test]
fn throttle_time_in_an_answer_throttles_the_link() {
    let (mut r, t) = fetching_from(0);
    r.answer_with(&t, |a| a.throttle_time_ms = 300);
    drop(r.events());
    let answered = r.now();
    assert!(r.round().is_empty(), "throttled");
    assert_eq!(r.net.links.poll_timeout(r.now()), Some(answered + ms(300)));
    r.at(answered + ms(299));
    assert!(r.round().is_empty());
    r.at(answered + ms(300));
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 10)]);
}

#[test]
fn a_preferred_read_replica_is_followed_until_its_lease_ends() {
    let mut b = two_brokers();
    b.part(&t0()).follower = 2;
    b.part(&t0()).redirect = true;
    let mut r = Rig::new(earliest(), b);
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    let t = r.send();
    assert_eq!(t.route, fetch_route(1));
    r.answer(&t);
    assert!(chunks(&r.events()).is_empty());
    let t = r.send();
    assert_eq!(t.route, fetch_route(2), "to the preferred replica");
    r.answer(&t);
    assert_eq!(chunks(&r.events()), vec![(t0(), 0, 10, offsets(0..10))]);
    let t = r.send();
    assert_eq!(t.route, fetch_route(2), "and again");
    r.answer(&t);
    drop(r.events());
    // The lease (metadata.max.age) ends: back to the leader.
    r.advance(Duration::from_secs(301));
    let t = r
        .sends()
        .into_iter()
        .find(|t| t.api_key == FetchRequest::KEY)
        .unwrap();
    assert_eq!(t.route, fetch_route(1));
}

#[test]
fn an_error_from_the_preferred_replica_sends_the_partition_back_to_the_leader() {
    let mut b = two_brokers();
    b.part(&t0()).follower = 2;
    b.part(&t0()).redirect = true;
    let mut r = Rig::new(earliest(), b);
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    let t = r.send();
    r.answer(&t);
    drop(r.events());
    let t = r.send();
    assert_eq!(t.route, fetch_route(2));
    r.broker.part(&t0()).redirect = false;
    r.answer_error(&t, ErrorCode::UNKNOWN_SERVER_ERROR);
    assert!(r.events().is_empty(), "not reported: the leader is asked");
    let again = r.timer().expect("a backoff");
    r.at(again);
    let t = r.send();
    assert_eq!(t.route, fetch_route(1));
}

#[test]
fn a_preferred_replica_the_metadata_does_not_list_waits_for_newer_metadata() {
    let mut b = two_brokers();
    b.part(&t0()).follower = 9; // not a broker the metadata lists (yet)
    b.part(&t0()).redirect = true;
    let mut r = Rig::new(earliest(), b);
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    let t = r.send();
    r.hold_metadata = true;
    r.answer(&t);
    // Until the metadata says where broker 9 is, the leader is not asked again and again.
    for _ in 0..10 {
        let ts = r.round();
        assert!(ts.is_empty(), "the leader redirects again at once: {ts:?}");
        r.advance(ms(50));
    }
    assert!(!r.held_metadata.is_empty(), "a refresh was asked for");
    r.broker.brokers.insert(9);
    r.release_metadata();
    let t = r.send();
    assert_eq!(
        t.route,
        fetch_route(9),
        "the replica, once the metadata lists it"
    );
}

#[test]
fn a_preferred_replica_the_metadata_never_lists_costs_one_fetch_per_metadata_refresh() {
    let mut b = two_brokers();
    b.part(&t0()).follower = 9;
    b.part(&t0()).redirect = true;
    let mut r = Rig::new(earliest(), b);
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    let t = r.send();
    r.answer(&t);
    let start = r.now();
    let mut fetches = 1;
    let mut steps = 0;
    let mut idle = 0;
    while r.now() < start + Duration::from_secs(10) {
        steps += 1;
        assert!(
            steps < 1_000,
            "{fetches} fetches in {:?}: a busy loop",
            r.now() - start
        );
        let ts = r.round();
        for t in &ts {
            fetches += 1;
            assert_eq!(t.route, fetch_route(1));
            r.answer(t);
        }
        drop(r.events());
        // The loop drives again at once after an answer (and until links and metadata
        // settle); it sleeps until the next timer only when nothing happens.
        idle = if ts.is_empty() { idle + 1 } else { 0 };
        if idle < 2 {
            continue;
        }
        idle = 0;
        let next = [
            r.timer(),
            r.cluster.poll_timeout(r.now()),
            r.net.links.poll_timeout(r.now()),
        ]
        .into_iter()
        .flatten()
        .min();
        if let Some(next) = next {
            r.at(next);
        }
    }
    assert!((1..=20).contains(&fetches), "{fetches} redirects in 10 s");
}

// ----- the byte budget ---------------------------------------------------------------------------

#[test]
fn no_fetch_goes_out_while_the_budget_is_full_and_freeing_memory_wakes_the_loop() {
    let mut r = Rig::with_budget(earliest(), two_brokers(), 100_000);
    let held = r.budget.try_charge(100_000).unwrap();
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    for _ in 0..6 {
        assert!(r.round().is_empty(), "fetched with a full budget");
    }
    assert!(r.budget.is_starved());
    assert_eq!(r.timer(), None, "no timer: the release wakes the loop");
    let woken = r.wakes.count();
    drop(held);
    assert_eq!(r.wakes.count(), woken + 1);
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 0)]);
}

#[test]
fn a_fetch_asks_for_at_most_half_the_room_left_in_the_budget() {
    let mut r = Rig::with_budget(earliest(), two_brokers(), 1_000_000);
    let _held = r.budget.try_charge(600_000).unwrap();
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    let t = r.send();
    assert_eq!(request::<FetchRequest>(&t).max_bytes, 200_000);
    let mut cfg = earliest();
    cfg.fetch_max_bytes = 1_000;
    let mut r = Rig::with_budget(cfg, two_brokers(), 1_000_000);
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    let t = r.send();
    assert_eq!(
        request::<FetchRequest>(&t).max_bytes,
        1_000,
        "fetch.max.bytes caps it"
    );
}

#[test]
fn fetches_in_flight_and_held_bytes_never_exceed_the_budget() {
    let b = SimBroker::new(&[1, 2, 3]).topic("t", &[1, 2, 3], 100);
    let mut r = Rig::with_budget(earliest(), b, 1_000_000);
    let _held = r.budget.try_charge(200_000).unwrap();
    r.assign(&[
        (tp("t", 0), SeekTo::Offset(0)),
        (tp("t", 1), SeekTo::Offset(0)),
        (tp("t", 2), SeekTo::Offset(0)),
    ]);
    let mut asked = 0usize;
    for _ in 0..6 {
        for t in r.round() {
            asked += request::<FetchRequest>(&t).max_bytes as usize;
        }
    }
    assert!(asked > 0);
    assert!(
        asked + r.budget.used() <= 1_000_000,
        "{asked} asked beside 200000 held"
    );
}

/// An answer whose one batch of `n` small records needs about 56 bytes of record index per
/// record beside its frame.
fn big_batch(n: i32) -> Vec<u8> {
    batch(0, n)
}

#[test]
fn a_batch_that_does_not_fit_beside_what_the_application_holds_waits_for_memory() {
    let b = SimBroker::new(&[1, 2]).topic("t", &[1, 2], 2_000);
    // What the application holds: a chunk of t-1 with a large frame.
    let mut r = Rig::with_budget(earliest(), b, 90_000);
    r.assign(&[(t1(), SeekTo::Offset(0))]);
    let t = r.send();
    r.answer_with(&t, |a| a.part(&t1()).records = batch_with(0, 10, 3_000, 5));
    let held = r.events();
    assert_eq!(chunks(&held).len(), 1);
    let held_bytes = r.budget.used();
    assert!(held_bytes > 30_000);
    r.fetcher.pause(&[t1()]);

    // t-0's next batch: 1000 records, a frame of ~12 KB and an index of ~56 KB: it fits in
    // the budget alone, not beside the held chunk. v-0 (broker 2) keeps long-polling.
    let v0 = tp("v", 0);
    r.broker = r.broker.clone().topic("v", &[2], 0);
    r.assign(&[
        (t0(), SeekTo::Offset(0)),
        (t1(), SeekTo::Offset(10)),
        (v0.clone(), SeekTo::Offset(0)),
    ]);
    let mut ts = r.sends();
    let i = ts
        .iter()
        .position(|t| t.route == fetch_route(1))
        .expect("t-0 fetched");
    let t = ts.remove(i);
    assert_eq!(r.fetched(&t), vec![(t0(), 0)]);
    r.answer_with(&t, |a| a.part(&t0()).records = big_batch(1_000));
    let ev = r.events();
    assert!(chunks(&ev).is_empty() && errors(&ev).is_empty(), "{ev:?}");
    assert_eq!(
        r.budget.used(),
        held_bytes,
        "the answer's frame was given back"
    );
    for _ in 0..5 {
        // Other answers come and go (the fetcher gives their frames back itself).
        for t in std::mem::take(&mut ts) {
            r.answer(&t);
        }
        r.advance(Duration::from_secs(1));
        ts = r.sends();
        assert!(!ts.is_empty(), "v-0 long-polls all along");
        for t in &ts {
            assert_eq!(
                r.fetched(t),
                vec![(v0.clone(), 0)],
                "fetched again before the application freed memory"
            );
        }
    }
    for t in std::mem::take(&mut ts) {
        r.answer(&t);
    }
    let woken = r.wakes.count();
    drop(held);
    assert_eq!(
        r.wakes.count(),
        woken + 1,
        "the application freeing memory wakes the loop"
    );
    let t = r
        .sends()
        .into_iter()
        .find(|t| t.route == fetch_route(1))
        .expect("t-0 fetched again");
    assert_eq!(r.fetched(&t), vec![(t0(), 0)]);
    r.answer_with(&t, |a| a.part(&t0()).records = big_batch(1_000));
    assert_eq!(
        chunks(&r.events()),
        vec![(t0(), 0, 1_000, offsets(0..1_000))]
    );
}

#[test]
fn a_batch_that_does_not_fit_beside_the_rest_of_its_answer_is_fetched_alone() {
    let b = SimBroker::new(&[1]).topic("t", &[1, 1], 2_000);
    let mut r = Rig::with_budget(earliest(), b, 90_000);
    r.assign(&[(t0(), SeekTo::Offset(0)), (t1(), SeekTo::Offset(0))]);
    let t = r.send();
    // t-0's big batch comes first; the answer's frame (t-1's large records) leaves no room
    // for its index, although nothing else is held.
    r.answer_with(&t, |a| {
        a.part(&t0()).records = big_batch(1_000);
        a.part(&t1()).records = batch_with(0, 10, 2_500, 5);
    });
    let ev = r.events();
    assert_eq!(chunks(&ev).len(), 1, "t-1 delivered");
    drop(ev);
    let t = r.send();
    let req = request::<FetchRequest>(&t);
    assert_eq!(r.fetched(&t), vec![(t0(), 0)], "t-0 alone");
    assert_eq!(req.max_bytes, 1, "for one batch (KIP-74 returns it whole)");
    r.answer_with(&t, |a| a.part(&t0()).records = big_batch(1_000));
    assert_eq!(
        chunks(&r.events()),
        vec![(t0(), 0, 1_000, offsets(0..1_000))]
    );
    let t = r.send();
    assert_eq!(r.fetched(&t).len(), 2, "back to normal fetches");
}

#[test]
fn a_batch_larger_than_the_whole_budget_is_reported_with_where_to_skip_to() {
    let b = SimBroker::new(&[1]).topic("t", &[1], 2_000);
    let mut r = Rig::with_budget(earliest(), b, 40_000);
    r.assign(&[(t0(), SeekTo::Offset(0))]);
    for _ in 0..2 {
        let t = r.send();
        r.answer_with(&t, |a| {
            let mut set = big_batch(1_000);
            set.extend(batch(1_000, 5));
            a.part(&t0()).records = set;
        });
        let ev = r.events();
        let errs = errors(&ev);
        if let Some((e, _)) = errs.first() {
            assert_eq!(e.kind(), ErrorKind::RecordTooLarge);
            assert_eq!(e.partition(), Some(&t0()));
            assert_eq!(e.offset(), Some(0));
            assert!(e.to_string().contains("seek to 1000"), "{e}");
            return;
        }
    }
    panic!("never reported");
}

// ----- committed offsets --------------------------------------------------------------------------

fn with_group() -> FetchConfig {
    FetchConfig {
        use_committed: true,
        ..earliest()
    }
}

#[test]
fn an_unpositioned_partition_waits_for_its_committed_offset_validates_it_and_starts_there() {
    let mut r = Rig::new(with_group(), two_brokers());
    r.assign(&[(t0(), SeekTo::Default)]);
    assert!(
        r.sends().is_empty(),
        "not fetched before its committed offset is known"
    );
    assert_eq!(r.timer(), None);
    let now = r.now();
    let wanted = r.fetcher.take_committed_wanted(now);
    assert_eq!(wanted, vec![(t0(), r.epoch(&t0()))]);
    assert!(
        r.fetcher.take_committed_wanted(now).is_empty(),
        "asked once"
    );
    r.fetcher
        .apply_committed(&t0(), r.epoch(&t0()), Some((17, LeaderEpoch(5))));
    // The committed offset carries a leader epoch: the leader confirms it first (KIP-320).
    let v = r.send();
    assert_eq!(validations(&v), vec![t0()]);
    r.answer(&v);
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 17)]);
}

#[test]
fn a_committed_offset_without_a_leader_epoch_is_fetched_at_once() {
    let mut r = Rig::new(with_group(), two_brokers());
    r.assign(&[(t0(), SeekTo::Default)]);
    let now = r.now();
    let e = r.fetcher.take_committed_wanted(now)[0].1;
    r.fetcher
        .apply_committed(&t0(), e, Some((17, LeaderEpoch::UNKNOWN)));
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 17)]);
}

#[test]
fn nothing_committed_resets_per_auto_offset_reset() {
    let mut r = Rig::new(with_group(), two_brokers());
    r.assign(&[(t0(), SeekTo::Default)]);
    let now = r.now();
    let e = r.fetcher.take_committed_wanted(now)[0].1;
    r.fetcher.apply_committed(&t0(), e, None);
    assert_eq!(resets(&r.send()), vec![(t0(), list_offsets::EARLIEST)]);
}

#[test]
fn a_failed_committed_offset_lookup_is_asked_again_after_a_growing_backoff() {
    let mut r = Rig::new(with_group(), two_brokers());
    r.assign(&[(t0(), SeekTo::Default)]);
    let mut delays = Vec::new();
    for _ in 0..4 {
        let now = r.now();
        let wanted = r.fetcher.take_committed_wanted(now);
        assert_eq!(wanted.len(), 1);
        r.fetcher.committed_failed(&t0(), wanted[0].1, now);
        assert!(
            r.fetcher.take_committed_wanted(now).is_empty(),
            "during the backoff"
        );
        assert!(r.sends().is_empty());
        let again = r.timer().expect("the backoff is a timer");
        delays.push(again - now);
        r.at(again);
    }
    assert!(delays.windows(2).all(|w| w[1] > w[0]), "{delays:?}");
}

#[test]
fn a_committed_offset_for_an_older_epoch_is_ignored() {
    let mut r = Rig::new(with_group(), two_brokers());
    r.assign(&[(t0(), SeekTo::Default)]);
    let now = r.now();
    let old = r.fetcher.take_committed_wanted(now)[0].1;
    r.seek(&t0(), SeekTo::Default, false);
    r.fetcher
        .apply_committed(&t0(), old, Some((17, LeaderEpoch(5))));
    r.fetcher.committed_failed(&t0(), old, now);
    assert!(r.sends().is_empty());
    let wanted = r.fetcher.take_committed_wanted(now);
    assert_eq!(wanted, vec![(t0(), r.epoch(&t0()))], "asked again, at once");
}

#[test]
fn a_paused_partition_does_not_ask_for_its_committed_offset() {
    let mut r = Rig::new(with_group(), two_brokers());
    r.assign(&[(t0(), SeekTo::Default)]);
    r.fetcher.pause(&[t0()]);
    let now = r.now();
    assert!(r.fetcher.take_committed_wanted(now).is_empty());
}

#[test]
fn committed_offsets_are_asked_once_per_wait_for_exactly_the_unpaused_waiting_partitions() {
    let mut r = Rig::new(with_group(), two_brokers());
    let (a, b) = (t0(), t1());
    r.assign(&[(a.clone(), SeekTo::Default), (b.clone(), SeekTo::Offset(3))]);
    let now = r.now();
    assert_eq!(
        r.fetcher.take_committed_wanted(now),
        vec![(a.clone(), r.epoch(&a))],
        "only the unpositioned one"
    );
    assert!(
        r.fetcher.take_committed_wanted(now).is_empty(),
        "asked once"
    );
    // A failed answer asks again after its backoff, not before.
    r.fetcher.committed_failed(&a, r.epoch(&a), now);
    assert!(r.fetcher.take_committed_wanted(now).is_empty());
    let again = r.timer().unwrap();
    r.at(again);
    assert_eq!(
        r.fetcher.take_committed_wanted(again),
        vec![(a.clone(), r.epoch(&a))]
    );
    // A seek to the default while paused waits for the resume; a seek to an offset
    // leaves nothing to ask.
    r.fetcher.pause(std::slice::from_ref(&b));
    r.seek(&b, SeekTo::Default, false);
    assert!(r.fetcher.take_committed_wanted(again).is_empty(), "paused");
    r.seek(&b, SeekTo::Default, true);
    r.seek(&a, SeekTo::Default, false);
    r.seek(&a, SeekTo::Offset(0), false);
    assert_eq!(
        r.fetcher.take_committed_wanted(again),
        vec![(b.clone(), r.epoch(&b))]
    );
    // An unassigned partition is not asked for.
    r.assign(&[(a.clone(), SeekTo::Default)]);
    r.seek(&a, SeekTo::Default, false);
    r.assign(&[]);
    assert!(r.fetcher.take_committed_wanted(again).is_empty());
}

// ----- timers -------------------------------------------------------------------------------------

#[test]
fn poll_timeout_is_only_for_partitions_that_will_be_fetchable_and_never_passed() {
    let (mut r, t) = fetching_from(0);
    assert_eq!(r.timer(), None, "in flight");
    r.answer_error(&t, ErrorCode::CORRUPT_MESSAGE);
    let again = r.timer().unwrap();
    assert!(again > r.now());
    r.fetcher.pause(&[t0()]);
    assert_eq!(r.timer(), None, "paused: it will not be fetchable");
    r.seek(&t0(), SeekTo::Offset(0), true);
    assert_eq!(r.timer(), None, "a seek starts afresh: fetchable now");
    let t = r.send();
    r.answer_error(&t, ErrorCode::CORRUPT_MESSAGE);
    let again = r.timer().unwrap();
    assert_eq!(
        r.fetcher.poll_timeout(again),
        None,
        "a passed instant is never returned"
    );
}

#[test]
fn poll_timeout_finds_the_earliest_backoff_among_many_partitions_as_they_change() {
    // 30 partitions per topic, led by three brokers in turn: three fetches fail all their
    // partitions, each partition's backoff ending at its own (jittered) instant.
    let leaders: Vec<i32> = (0..30).map(|i| 1 + i % 3).collect();
    let b = SimBroker::new(&[1, 2, 3])
        .topic("t", &leaders, 30)
        .topic("u", &leaders, 30);
    let mut r = Rig::new(earliest(), b);
    let all: Vec<TopicPartition> = (0..30)
        .flat_map(|p| [TopicPartition::new("t", p), TopicPartition::new("u", p)])
        .collect();
    let list: Vec<_> = all
        .iter()
        .map(|tp| (tp.clone(), SeekTo::Offset(0)))
        .collect();
    r.assign(&list);
    let ts = r.sends();
    assert_eq!(ts.len(), 3);
    for t in ts {
        r.answer_error(&t, ErrorCode::CORRUPT_MESSAGE);
        r.advance(ms(3));
    }
    // The backoffs' ends, earliest first.
    let mut ends: Vec<(Instant, TopicPartition)> = all
        .iter()
        .map(|tp| (r.fetcher.parts[tp].not_before.unwrap(), tp.clone()))
        .collect();
    ends.sort();
    assert!(ends[0].0 > r.now());
    assert_eq!(r.timer(), Some(ends[0].0));
    // Pausing, unassigning or seeking the partition of the earliest backoff moves the
    // timer to the next one.
    r.fetcher.pause(&[ends[0].1.clone()]);
    assert_eq!(r.timer(), Some(ends[1].0), "a paused one is not waited for");
    let rest: Vec<_> = list
        .iter()
        .filter(|(tp, _)| *tp != ends[1].1)
        .cloned()
        .collect();
    r.assign(&rest);
    assert_eq!(
        r.timer(),
        Some(ends[2].0),
        "an unassigned one is not waited for"
    );
    r.seek(&ends[2].1, SeekTo::Offset(0), false);
    assert_eq!(r.timer(), Some(ends[3].0), "a seek starts afresh");
    assert_eq!(r.timer(), r.fetcher.poll_timeout_by_walking(r.now()));
    // Once an instant passes, the next one is reported; none passed is.
    r.at(ends[3].0);
    let next = ends[4..].iter().map(|(t, _)| *t).find(|t| *t > ends[3].0);
    assert_eq!(r.timer(), next);
    // The partitions whose backoff ended are fetched again, and the timer still shows
    // the backoffs of those still waiting.
    let ts = r.sends();
    let refetched: usize = ts.iter().map(|t| r.fetched(t).len()).sum();
    assert!(refetched >= 1, "{ts:?}");
    assert_eq!(r.timer(), r.fetcher.poll_timeout_by_walking(r.now()));
}

// ----- randomized --------------------------------------------------------------------------------

/// A request the simulated brokers received and have not answered yet.
struct Pending {
    t: Transmit,
    /// The Fetch answer, worked out when the broker received the request.
    fetch: Option<FetchAnswer>,
    /// When the broker answers (an empty Fetch waits `fetch.max.wait.ms`).
    due: Instant,
    /// The partitions the request covers (for a Fetch: the broker's session after it).
    covers: Vec<TopicPartition>,
    /// Their position epochs when it was sent.
    epochs: BTreeMap<TopicPartition, PositionEpoch>,
}

/// What the application knows about one partition.
#[derive(Debug, Clone, Default)]
struct UserPart {
    position: Option<i64>,
    target: Option<SeekTo>,
    paused: bool,
    /// Reported as needing a seek (no offset / out of range with `auto.offset.reset=none`).
    stuck: bool,
}

/// The simulated consumer: the fetcher, the brokers answering it, the application holding
/// chunks, and the invariants checked after every step.
struct World {
    r: Rig,
    seed: u32,
    step: usize,
    cap: usize,
    users: BTreeMap<TopicPartition, UserPart>,
    pending: Vec<Pending>,
    /// Requests answered or failed already, as `(route, id, version, answer)`: their
    /// answers arrive again as stale ones.
    old: Vec<(Route, RequestId, ApiVersion, Vec<u8>)>,
    held: std::collections::VecDeque<Chunk>,
    committed_wanted: Vec<(TopicPartition, PositionEpoch)>,
    faults: bool,
    fetches_sent: usize,
    resets_sent: usize,
    /// How often the application freed memory.
    frees: u64,
    /// Partitions whose last answer carried news (records, an error, a redirect) and
    /// produced nothing: `(broker, when, metadata generation, frees)` then. Fetching such a
    /// partition from the same broker again before anything changed is a busy loop.
    unproductive: BTreeMap<TopicPartition, (i32, Instant, MetadataGeneration, u64)>,
    /// Partitions named in events since the last look.
    named: BTreeSet<TopicPartition>,
}

const ALL: [(&str, i32); 6] = [("t", 0), ("t", 1), ("t", 2), ("t", 3), ("u", 0), ("u", 1)];

impl World {
    fn ctx(&self) -> String {
        format!("seed {} step {}", self.seed, self.step)
    }

    fn now(&self) -> Instant {
        self.r.now()
    }

    /// One round of the loop, with the invariants every request must keep.
    fn drive(&mut self) {
        let ts = self.r.round();
        for route in std::mem::take(&mut self.r.closed) {
            self.fail_route(route, None);
        }
        for t in ts {
            self.received(t);
        }
        if self.r.fetcher.cfg.use_committed {
            let now = self.now();
            let wanted = self.r.fetcher.take_committed_wanted(now);
            for (tp, _) in &wanted {
                assert!(
                    !self.users[tp].paused,
                    "{}: committed offset of paused {tp}",
                    self.ctx()
                );
            }
            self.committed_wanted.extend(wanted);
        }
        self.check_events();
        self.check_timers();
        self.check_placements();
    }

    /// The brokers receive `t`.
    fn received(&mut self, t: Transmit) {
        let now = self.now();
        let ctx = self.ctx();
        let (covers, fetch, due) = if t.api_key == FetchRequest::KEY {
            self.fetches_sent += 1;
            let node = sim::node_of(t.route);
            assert!(
                !self
                    .pending
                    .iter()
                    .any(|p| p.t.api_key == FetchRequest::KEY && sim::node_of(p.t.route) == node),
                "{ctx}: two fetches in flight to broker {node}"
            );
            let max_bytes = request::<FetchRequest>(&t).max_bytes as usize;
            let reserved: usize = self
                .pending
                .iter()
                .filter(|p| p.t.api_key == FetchRequest::KEY)
                .map(|p| request::<FetchRequest>(&p.t).max_bytes as usize)
                .sum();
            assert!(
                reserved + max_bytes + self.r.budget.used() <= self.cap,
                "{ctx}: {reserved} + {max_bytes} asked beside {} held, budget {}",
                self.r.budget.used(),
                self.cap
            );
            let asked: Vec<TopicPartition> =
                self.r.fetched(&t).into_iter().map(|(tp, _)| tp).collect();

            let now_state = (node, now, self.r.cluster.generation(), self.frees);
            for tp in &asked {
                // One batch fetched alone (max_bytes 1) after it did not fit is no loop.
                if self.unproductive.remove(tp) == Some(now_state) && max_bytes > 1 {
                    panic!("{ctx}: {tp} fetched again at once from broker {node} after an answer that changed nothing");
                }
            }
            let a = self.r.broker.fetch(&t);
            let mut covers: Vec<TopicPartition> = a.parts.iter().map(|p| p.tp.clone()).collect();
            covers.extend(asked);
            covers.sort();
            covers.dedup();
            let due = if a.has_news() {
                now
            } else {
                now + self.r.fetcher.cfg.fetch_max_wait
            };
            (covers, Some(a), due)
        } else if t.api_key == OffsetForLeaderEpochRequest::KEY {
            (validations(&t), None, now)
        } else {
            assert_eq!(t.api_key, ListOffsetsRequest::KEY, "{ctx}");
            self.resets_sent += 1;
            (
                resets(&t).into_iter().map(|(tp, _)| tp).collect(),
                None,
                now,
            )
        };
        for tp in &covers {
            let u = self
                .users
                .get(tp)
                .unwrap_or_else(|| panic!("{ctx}: request for unassigned {tp}"));
            assert!(!u.paused, "{ctx}: request for paused {tp}: {t:?}");
            assert!(
                !self.pending.iter().any(|p| p.covers.contains(tp)),
                "{ctx}: {tp} in two requests"
            );
        }
        let epochs = covers
            .iter()
            .filter_map(|tp| Some((tp.clone(), *self.r.epochs.get(tp)?)))
            .collect();
        self.pending.push(Pending {
            t,
            fetch,
            due,
            covers,
            epochs,
        });
    }

    fn check_events(&mut self) {
        let ctx = self.ctx();
        while let Some(e) = self.r.fetcher.poll_event() {
            match e {
                FetchEvent::Chunk(c) => {
                    let epoch = self.r.epochs.get(&c.tp).copied();
                    assert_eq!(
                        Some(c.epoch),
                        epoch,
                        "{ctx}: chunk of {} for a stale epoch",
                        c.tp
                    );
                    let u = self.users.get_mut(&c.tp).unwrap();
                    if let Some(p) = u.position {
                        assert_eq!(c.fetch_offset, p, "{ctx}: {} jumped", c.tp);
                    }
                    assert!(
                        c.next_offset >= c.fetch_offset || c.records.is_empty(),
                        "{ctx}"
                    );
                    if let (Some(first), Some(last)) = (c.records.first(), c.records.last()) {
                        assert_eq!(
                            first.offset, c.fetch_offset,
                            "{ctx}: {} skipped records",
                            c.tp
                        );
                        assert_eq!(last.offset + 1, c.next_offset, "{ctx}");
                        assert_eq!(
                            c.records.len() as i64,
                            c.next_offset - c.fetch_offset,
                            "{ctx}: a gap"
                        );
                        let v = c.slice(first, first.value_start, first.value_len as u32);
                        let want = format!("v{}", first.offset);
                        assert_eq!(&v[..want.len()], want.as_bytes(), "{ctx}");
                    }
                    if !u.paused {
                        u.position = Some(c.next_offset);
                    }
                    self.named.insert(c.tp.clone());
                    self.unproductive.remove(&c.tp);
                    self.held.push_back(c);
                }
                FetchEvent::End { tp, epoch, .. } => {
                    assert_eq!(
                        Some(&epoch),
                        self.r.epochs.get(&tp),
                        "{ctx}: end of {tp} for a stale epoch"
                    );
                }
                FetchEvent::Error(e, Some(epoch)) => {
                    let tp = e
                        .partition()
                        .cloned()
                        .unwrap_or_else(|| panic!("{ctx}: {e}"));
                    assert_eq!(
                        Some(&epoch),
                        self.r.epochs.get(&tp),
                        "{ctx}: error for a stale epoch: {e}"
                    );
                    self.named.insert(tp.clone());
                    self.unproductive.remove(&tp);
                    if matches!(e.kind(), ErrorKind::NoOffset | ErrorKind::OffsetOutOfRange) {
                        self.users.get_mut(&tp).unwrap().stuck = true;
                    }
                }
                FetchEvent::Error(_, None) => {}
                FetchEvent::Truncated { tp, .. } => {
                    panic!("{ctx}: {tp} reported truncated, but no simulated log ever is")
                }
            }
        }
    }

    fn check_timers(&self) {
        let now = self.now();
        if let Some(t) = self.r.timer() {
            assert!(t > now, "{}: fetcher timer not in the future", self.ctx());
        }
        assert_eq!(
            self.r.timer(),
            self.r.fetcher.poll_timeout_by_walking(now),
            "{}: the timers disagree with the partitions' backoffs",
            self.ctx()
        );
        if let Some(t) = self.r.net.links.poll_timeout(now) {
            assert!(t > now, "{}: link timer not in the future", self.ctx());
        }
    }

    /// Invariants 9 and 10: after a round, every partition that is neither marked for the
    /// next one nor held by a request in flight is placed where a plan over the whole
    /// assignment, from scratch, would place it (and waits for metadata exactly when that
    /// plan says so); the brokers' sessions hold exactly the partitions placed with them.
    fn check_placements(&self) {
        let (f, cluster, ctx) = (&self.r.fetcher, &self.r.cluster, self.ctx());
        for (n, nf) in &f.nodes {
            let wanted = nf.session.wanted_partitions();
            assert_eq!(nf.session.wanted(), wanted.len(), "{ctx}: count at {n}");
            for (tp, _) in &wanted {
                assert_eq!(
                    f.parts.get(tp).and_then(|p| p.fetch_node),
                    Some(*n),
                    "{ctx}: {tp} in the session of broker {n} but not placed there"
                );
            }
        }
        if f.all_dirty
            || f.planned_generation != Some(cluster.generation())
            || f.room_seen != self.r.budget.app_frees()
        {
            // Newer metadata (answered after the fetcher's turn in the round), or memory
            // freed: everything is planned again next round.
            return;
        }
        let now = self.now();
        for (tp, p) in &f.parts {
            let placed = p.fetch_node.map(|n| {
                let s = f.nodes[&n].session.wanted_state(tp);
                (
                    n,
                    *s.unwrap_or_else(|| panic!("{ctx}: {tp} placed at {n}, not in its session")),
                )
            });
            if f.held(p) || f.dirty.contains(tp) {
                continue;
            }
            let (expected, waits) =
                placement_from_scratch(cluster, tp, p, now, self.r.budget.app_frees());
            assert_eq!(
                placed, expected,
                "{ctx}: {tp} is placed otherwise than a plan from scratch would place it: {p:?}"
            );
            assert_eq!(
                f.metadata_waiters.contains(tp),
                waits,
                "{ctx}: {tp} waiting for metadata: {p:?}"
            );
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        let now = self.now();
        [
            self.r.timer(),
            self.r.net.links.poll_timeout(now),
            self.r.cluster.poll_timeout(now),
            self.pending
                .iter()
                .map(|p| p.due)
                .filter(|d| *d > now)
                .min(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn new_user(&mut self, tp: &TopicPartition, to: SeekTo) {
        self.users.insert(
            tp.clone(),
            UserPart {
                position: match to {
                    SeekTo::Offset(o) => Some(o),
                    _ => None,
                },
                target: Some(to),
                ..UserPart::default()
            },
        );
    }

    fn assign(&mut self, list: Vec<(TopicPartition, SeekTo)>) {
        let keep: BTreeSet<TopicPartition> = list.iter().map(|(tp, _)| tp.clone()).collect();
        self.users.retain(|tp, _| keep.contains(tp));
        self.unproductive.retain(|tp, _| keep.contains(tp));
        // Requests for partitions no longer assigned no longer count as theirs.
        for p in &mut self.pending {
            p.covers.retain(|tp| keep.contains(tp));
        }
        for (tp, to) in &list {
            if !self.users.contains_key(tp) {
                self.new_user(tp, *to);
            }
        }
        self.r.assign(&list);
    }

    fn free_all(&mut self) {
        self.frees += self.held.len() as u64;
        self.held.clear();
    }

    fn seek(&mut self, tp: &TopicPartition, to: SeekTo, resume: bool) {
        self.unproductive.remove(tp);
        let paused = self.users[tp].paused && !resume;
        self.new_user(tp, to);
        self.users.get_mut(tp).unwrap().paused = paused;
        self.r.seek(tp, to, resume);
    }

    fn resume(&mut self, tp: &TopicPartition) {
        let u = &self.users[tp];
        let to = u
            .position
            .map_or(u.target.unwrap_or(SeekTo::Beginning), SeekTo::Offset);
        self.seek(tp, to, true);
    }

    /// Answers pending request `i` (with a fault now and then).
    fn deliver(&mut self, i: usize, pick: &mut dyn FnMut(u32) -> u32) {
        let p = self.pending.remove(i);
        let t = &p.t;
        let body = match p.fetch {
            Some(mut a) => {
                if self.faults {
                    match pick(20) {
                        0 => {
                            let codes = [
                                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                                ErrorCode::OFFSET_OUT_OF_RANGE,
                                ErrorCode::UNKNOWN_SERVER_ERROR,
                                ErrorCode::CORRUPT_MESSAGE,
                                ErrorCode::FENCED_LEADER_EPOCH,
                                ErrorCode::UNKNOWN_TOPIC_ID,
                                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                                ErrorCode::REPLICA_NOT_AVAILABLE,
                            ];
                            if !a.parts.is_empty() {
                                let k = pick(a.parts.len() as u32) as usize;
                                let code = codes[pick(codes.len() as u32) as usize];
                                a.parts[k].error_code = code.code();
                                a.parts[k].records.clear();
                            }
                        }
                        1 => {
                            let codes = [
                                ErrorCode::FETCH_SESSION_ID_NOT_FOUND,
                                ErrorCode::INVALID_FETCH_SESSION_EPOCH,
                                ErrorCode::UNKNOWN_SERVER_ERROR,
                            ];
                            a.error_code = codes[pick(3) as usize].code();
                            a.parts.clear();
                        }
                        2 => a.throttle_time_ms = 1 + pick(500) as i32,
                        3 => {
                            // A batch cut short (a limit, or a lying broker).
                            if let Some(part) = a.parts.iter_mut().find(|p| p.records.len() > 10) {
                                let n = part.records.len();
                                part.records.truncate(n - 1 - pick(9) as usize);
                            }
                        }
                        _ => {}
                    }
                }
                if self.faults && pick(40) == 0 {
                    malformed()
                } else {
                    encode_fetch(t.version.get(), &a)
                }
            }
            None => {
                if self.faults && pick(8) == 0 {
                    let codes = [
                        ErrorCode::NOT_LEADER_OR_FOLLOWER,
                        ErrorCode::UNKNOWN_SERVER_ERROR,
                        ErrorCode::OFFSET_NOT_AVAILABLE,
                        ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                    ];
                    self.r.broker.answer_error(t, codes[pick(4) as usize])
                } else if self.faults && pick(40) == 0 {
                    malformed()
                } else {
                    self.r.broker.answer(t)
                }
            }
        };
        self.check_events();
        self.named.clear();
        self.r.deliver(t, body.clone());
        self.check_events();
        if t.api_key == FetchRequest::KEY {
            let state = (
                sim::node_of(t.route),
                self.now(),
                self.r.cluster.generation(),
                self.frees,
            );
            let decoded =
                crate::protocol::frame::decode_response::<FetchRequest>(&body, t.version.get());
            for (rt, pd) in decoded.iter().flat_map(|r| {
                r.responses
                    .iter()
                    .flat_map(|rt| rt.partitions.iter().map(move |pd| (rt, pd)))
            }) {
                let name = if t.version >= ApiVersion(13) {
                    match self
                        .r
                        .broker
                        .topics
                        .iter()
                        .find(|(_, x)| x.id == rt.topic_id)
                    {
                        Some((n, _)) => n.clone(),
                        None => continue,
                    }
                } else {
                    rt.topic.clone()
                };
                let tp = TopicPartition::new(name.as_str(), pd.partition_index);
                if p.epochs.get(&tp) != self.r.epochs.get(&tp) {
                    // Made for an older position: stale, rightly ignored.
                    self.unproductive.remove(&tp);
                    continue;
                }
                let news =
                    pd.records.len > 0 || pd.error_code != 0 || pd.preferred_read_replica >= 0;
                // Records whose decoding was deferred come out with the next round, which
                // also fetches from where their batch headers end.
                let deferred = self
                    .r
                    .fetcher
                    .deferred
                    .iter()
                    .any(|d| d.parts.iter().any(|dp| dp.tp == tp));
                if news && !deferred && !self.named.contains(&tp) {
                    self.unproductive.insert(tp, state);
                } else {
                    self.unproductive.remove(&tp);
                }
            }
        }
        self.old.push((t.route, t.tag.id, t.version, body));
        if self.old.len() > 50 {
            self.old.remove(0);
        }
    }

    /// Every request on `route` fails (its link closed); `timed_out`: that one timed out.
    fn fail_route(&mut self, route: Route, timed_out: Option<RequestId>) {
        let now = self.now();
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].t.route != route {
                i += 1;
                continue;
            }
            let p = self.pending.remove(i);
            let f = if timed_out == Some(p.t.tag.id) {
                Failure::TimedOut
            } else {
                Failure::Disconnected("connection reset".into())
            };
            if p.t.api_key == FetchRequest::KEY {
                // A failed fetch is news: every partition that followed that broker as its
                // preferred replica goes back to its leader at once, by design.
                self.unproductive.clear();
            }
            self.r.fetcher.handle_failure(p.t.tag.id, &f, now);
            self.old
                .push((p.t.route, p.t.tag.id, p.t.version, malformed()));
        }
    }
}

/// Where a plan over every partition, from scratch and without changing anything, places
/// `tp`: the broker whose fetch session it belongs in with its state (`None`: none), and
/// whether it waits for metadata. The rules of `Planner::placement`, written out again.
fn placement_from_scratch(
    cluster: &Cluster,
    tp: &TopicPartition,
    p: &Part,
    now: Instant,
    frees: u64,
) -> (Option<(NodeId, SessionPartition)>, bool) {
    let waiting =
        p.paused || p.not_before.is_some_and(|t| now < t) || p.waiting_for_room() == Some(frees);
    if waiting {
        return (None, false);
    }
    if p.awaiting_metadata() == Some(cluster.generation()) {
        return (None, true);
    }
    if !matches!(
        p.position,
        Position::At { .. } | Position::Reset { .. } | Position::Validate { .. }
    ) {
        return (None, false);
    }
    let (leader, leader_epoch) = match cluster.leader(tp) {
        Leader::Known(n, e) => (n, e),
        Leader::Unknown | Leader::Missing(_) => return (None, true),
    };
    let Position::At {
        offset,
        leader_epoch: last,
    } = p.position
    else {
        return (None, false);
    };
    let moved = p
        .leader_seen
        .is_some_and(|seen| seen != (leader, leader_epoch));
    if moved && last.known().is_some() && leader_epoch.known().is_some() {
        return (None, false);
    }
    let node = match p.replica() {
        Some((r, until)) if now < until && cluster.broker(r).is_some() => r,
        _ => leader,
    };
    let s = SessionPartition {
        topic_id: cluster.topic_id(tp.topic()),
        fetch_offset: offset,
        epoch: p.epoch,
        current_leader_epoch: leader_epoch.0,
    };
    (Some((node, s)), false)
}

/// Random interleavings of assign, seek, pause and resume, answers (good, partition and
/// top-level errors, throttles, cut batches, malformed bytes, stale answers), broker
/// changes (leaders moving, logs growing and shrinking, preferred replicas), lost links,
/// refused connects, the application holding and freeing memory, committed offsets, and
/// time. After every step: at most one fetch per broker, no request for a paused or
/// unassigned partition nor for a partition already in one, requests within the byte
/// budget, no event for a stale epoch, chunks continuous and dense, timers in the future.
/// Then the faults stop: every partition catches up, long polls are paced, and once
/// everything is paused the fetcher is silent (only the metadata max-age refresh remains).
#[test]
fn randomized_interleavings_keep_the_invariants_catch_up_and_end_quiet() {
    for seed in 1..=8u32 {
        run_random(seed, 2_500, false);
    }
}

/// The same with answers decoded after the next requests went out, as the I/O loop has
/// the fetcher do (`Fetcher::set_defer_decoding`).
#[test]
fn randomized_interleavings_keep_the_invariants_with_deferred_decoding() {
    for seed in 1..=8u32 {
        run_random(seed, 2_500, true);
    }
}

fn run_random(seed: u32, steps: usize, defer: bool) {
    let mut rng = crate::backoff::XorShift::new(seed.wrapping_mul(2_654_435_761));
    let mut pick = move |n: u32| crate::backoff::Jitter::next_u32(&mut rng) % n.max(1);
    let reset = [
        OffsetReset::Earliest,
        OffsetReset::Latest,
        OffsetReset::None,
    ][seed as usize % 3];
    let mut cfg = fetch_config(reset);
    cfg.use_committed = seed % 4 == 3;
    let cap = if seed % 2 == 0 {
        24 * 1024
    } else {
        4 * 1024 * 1024
    };
    let mut broker = SimBroker::new(&[1, 2, 3])
        .topic("t", &[1, 2, 3, 1], 200)
        .topic("u", &[2, 3], 60);
    broker.sessions = seed % 2 == 1;
    broker.max_records = 20;
    broker.pad = if seed % 2 == 0 { 150 } else { 0 };
    let mut w = World {
        r: if defer {
            Rig::deferring(cfg, broker, cap)
        } else {
            Rig::with_budget(cfg, broker, cap)
        },
        seed,
        step: 0,
        cap,
        users: BTreeMap::new(),
        pending: Vec::new(),
        old: Vec::new(),
        held: Default::default(),
        committed_wanted: Vec::new(),
        faults: true,
        fetches_sent: 0,
        resets_sent: 0,
        frees: 0,
        unproductive: BTreeMap::new(),
        named: BTreeSet::new(),
    };
    let all: Vec<TopicPartition> = ALL.iter().map(|(t, p)| tp(t, *p)).collect();
    let random_target = |pick: &mut dyn FnMut(u32) -> u32| match pick(5) {
        0 => SeekTo::Beginning,
        1 => SeekTo::End,
        2 => SeekTo::Default,
        _ => SeekTo::Offset(pick(230) as i64),
    };
    w.assign(all.iter().map(|tp| (tp.clone(), SeekTo::Default)).collect());
    w.drive();

    for step in 0..steps {
        w.step = step;
        match pick(24) {
            0 => {
                let mut list = Vec::new();
                for tp in &all {
                    if pick(3) != 0 {
                        list.push((tp.clone(), random_target(&mut pick)));
                    }
                }
                w.assign(list);
            }
            1 | 2 => {
                let assigned: Vec<TopicPartition> = w.users.keys().cloned().collect();
                if !assigned.is_empty() {
                    let tp = assigned[pick(assigned.len() as u32) as usize].clone();
                    let to = random_target(&mut pick);
                    w.seek(&tp, to, pick(4) == 0);
                }
            }
            3 => {
                let tps: Vec<TopicPartition> =
                    w.users.keys().filter(|_| pick(3) == 0).cloned().collect();
                for tp in &tps {
                    w.users.get_mut(tp).unwrap().paused = true;
                }
                w.r.fetcher.pause(&tps);
            }
            4 => {
                let paused: Vec<TopicPartition> = w
                    .users
                    .iter()
                    .filter(|(_, u)| u.paused)
                    .map(|(tp, _)| tp.clone())
                    .collect();
                if !paused.is_empty() {
                    let tp = paused[pick(paused.len() as u32) as usize].clone();
                    w.resume(&tp);
                }
            }
            5..=9 => {
                // The broker behind each link answers in order.
                let now = w.now();
                let due: Vec<usize> = (0..w.pending.len())
                    .filter(|i| {
                        let p = &w.pending[*i];
                        p.due <= now && !w.pending[..*i].iter().any(|q| q.t.route == p.t.route)
                    })
                    .collect();
                if !due.is_empty() {
                    let i = due[pick(due.len() as u32) as usize];
                    w.deliver(i, &mut pick);
                }
            }
            10 => {
                if !w.pending.is_empty() {
                    let p = &w.pending[pick(w.pending.len() as u32) as usize];
                    let (route, id) = (p.t.route, p.t.tag.id);
                    let timed_out = (pick(2) == 0).then_some(id);
                    w.r.net.close(route, "lost");
                    w.fail_route(route, timed_out);
                }
            }
            11 => {
                if !w.old.is_empty() {
                    let (_, id, version, body) = w.old[pick(w.old.len() as u32) as usize].clone();
                    let now = w.now();
                    w.r.fetcher.handle_response(
                        id,
                        version,
                        FrameBuf::from_vec(body),
                        now,
                        &mut w.r.net.links,
                        &mut w.r.cluster,
                    );
                    assert!(
                        w.r.fetcher.poll_event().is_none(),
                        "{}: a stale answer produced an event",
                        w.ctx()
                    );
                }
            }
            12 => {
                let tp = &all[pick(all.len() as u32) as usize];
                let p = w.r.broker.part(tp);
                match pick(5) {
                    0 => {
                        p.leader = 1 + pick(3) as i32;
                        p.epoch += 1;
                    }
                    1 => p.log_start = (p.log_start + pick(30) as i64).min(p.log_end),
                    2 => {
                        // Broker 4 is not in the metadata.
                        p.follower = 1 + pick(4) as i32;
                        p.redirect = !p.redirect;
                    }
                    _ => p.log_end += pick(40) as i64,
                }
            }
            13 => {
                let peer = crate::link::Peer::Node(NodeId(1 + pick(3) as i32));
                if !w.r.net.down.remove(&peer) {
                    w.r.net.down.insert(peer);
                }
            }
            14 | 15 => {
                for _ in 0..pick(w.held.len() as u32 + 1) {
                    w.held.pop_front();
                    w.frees += 1;
                }
            }
            16 => {
                if !w.committed_wanted.is_empty() {
                    let (tp, e) = w
                        .committed_wanted
                        .remove(pick(w.committed_wanted.len() as u32) as usize);
                    match pick(3) {
                        0 => w.r.fetcher.apply_committed(&tp, e, None),
                        1 => {
                            let now = w.now();
                            w.r.fetcher.committed_failed(&tp, e, now)
                        }
                        _ => w.r.fetcher.apply_committed(
                            &tp,
                            e,
                            Some((pick(250) as i64, LeaderEpoch::UNKNOWN)),
                        ),
                    }
                }
            }
            _ => {
                let by = w.now() + ms(1 + pick(300) as u64);
                match w.next_timer() {
                    Some(t) if t < by || pick(2) == 0 => w.r.at(t),
                    _ => w.r.at(by),
                }
            }
        }
        w.drive();
    }

    // The faults stop. The application frees what it holds and seeks what it was told to.
    w.faults = false;
    w.r.net.down.clear();
    for tp in &all {
        let p = w.r.broker.part(tp);
        if p.follower == 4 {
            p.redirect = false; // a leader only sends consumers to a live replica
        }
    }
    w.free_all();
    let stuck: Vec<TopicPartition> = w
        .users
        .iter()
        .filter(|(_, u)| u.stuck || u.paused)
        .map(|(tp, _)| tp.clone())
        .collect();
    for tp in stuck {
        w.seek(&tp, SeekTo::Beginning, true);
    }
    for tp in w.users.keys().cloned().collect::<Vec<_>>() {
        if let Some(p) = w.users.get(&tp).and_then(|u| u.position) {
            if p > w.r.broker.part(&tp).log_end || p < w.r.broker.part(&tp).log_start {
                // Out of range under reset none: the application would hear and seek.
                if reset == OffsetReset::None {
                    w.seek(&tp, SeekTo::Beginning, true);
                }
            }
        }
    }
    w.drive();
    let caught_up = |w: &mut World| {
        let users: Vec<(TopicPartition, Option<i64>)> = w
            .users
            .iter()
            .map(|(tp, u)| (tp.clone(), u.position))
            .collect();
        users
            .into_iter()
            .all(|(tp, p)| p == Some(w.r.broker.part(&tp).log_end))
    };
    let settle_until = w.now() + Duration::from_secs(120);
    let mut idle = 0;
    while !caught_up(&mut w) {
        w.step += 1;
        assert!(
            w.now() < settle_until,
            "seed {seed}: no progress after the faults stopped: {:?} vs logs {:?}; fetcher {:#?}",
            w.users,
            all.iter()
                .map(|tp| (tp.clone(), w.r.broker.part(tp).log_end))
                .collect::<Vec<_>>(),
            w.r.fetcher.parts
        );
        assert!(
            w.step < steps + 100_000,
            "seed {seed}: a busy loop after the faults stopped"
        );
        // Newly reported stuck partitions: the application seeks.
        let stuck: Vec<TopicPartition> = w
            .users
            .iter()
            .filter(|(_, u)| u.stuck)
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in stuck {
            w.seek(&tp, SeekTo::Beginning, false);
        }
        for (tp, e) in std::mem::take(&mut w.committed_wanted) {
            w.r.fetcher.apply_committed(&tp, e, None);
        }
        let now = w.now();
        let due = w
            .pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.due <= now)
            .map(|(i, _)| i)
            .next();
        let before = w.pending.len();
        if let Some(i) = due {
            w.deliver(i, &mut pick);
        }
        w.free_all();
        w.drive();
        idle = if due.is_none() && w.pending.len() <= before {
            idle + 1
        } else {
            0
        };
        if idle >= 2 {
            idle = 0;
            if let Some(t) = w.next_timer() {
                w.r.at(t);
            }
        }
    }

    // Caught up, no new data: long polls, paced by fetch.max.wait.ms.
    let start = w.now();
    let fetches = w.fetches_sent;
    let resets = w.resets_sent;
    while w.now() < start + Duration::from_secs(10) {
        w.step += 1;
        let now = w.now();
        if let Some(i) = w.pending.iter().position(|p| p.due <= now) {
            w.deliver(i, &mut pick);
            w.free_all();
            w.drive();
            continue;
        }
        w.drive();
        if let Some(t) = w.next_timer() {
            w.r.at(t);
        }
    }
    let polls = w.fetches_sent - fetches;
    assert!(
        polls <= 3 * 22,
        "seed {seed}: {polls} fetches in 10 idle seconds"
    );
    assert_eq!(w.resets_sent, resets, "seed {seed}: resets while caught up");

    // Everything paused: silence, but for the metadata max-age refresh.
    let tps: Vec<TopicPartition> = w.users.keys().cloned().collect();
    w.r.fetcher.pause(&tps);
    for u in w.users.values_mut() {
        u.paused = true;
    }
    while let Some(i) = (!w.pending.is_empty()).then_some(0) {
        let due = w.pending[i].due;
        w.r.at(due);
        w.deliver(i, &mut pick);
    }
    w.free_all();
    w.drive();
    let start = w.now();
    let hour = Duration::from_secs(3600);
    let (fetches, resets, metadata) = (w.fetches_sent, w.resets_sent, w.r.metadata_sent);
    let mut wakeups = 0;
    while let Some(t) = w.next_timer().filter(|t| *t <= start + hour) {
        w.r.at(t);
        wakeups += 1;
        w.drive();
        assert_eq!(
            w.r.timer(),
            None,
            "seed {seed}: a fetcher timer while all is paused"
        );
    }
    assert_eq!(
        (w.fetches_sent, w.resets_sent),
        (fetches, resets),
        "seed {seed}"
    );
    let refreshes = w.r.metadata_sent - metadata;
    assert!(
        refreshes <= 13 && wakeups <= refreshes + 1,
        "seed {seed}: {refreshes} refreshes and {wakeups} wake-ups in an idle hour"
    );
    log::info!(
        "seed {seed}: {} fetches, {} resets, {} metadata requests",
        w.fetches_sent,
        w.resets_sent,
        w.r.metadata_sent
    );
}

/// A large assignment (past the size where in-flight marks are set by one ordered walk):
/// every partition is in the one fetch, none goes out again while it is in flight, and
/// after the answer the next fetch is incremental, carrying only the partition that moved.
#[test]
fn a_fetch_of_many_partitions_holds_them_all_until_answered_then_sends_only_what_moved() {
    let n = 300;
    let mut b = SimBroker::new(&[1]).topic("t", &vec![1; n], 0);
    b.sessions = true;
    let mut r = Rig::new(earliest(), b);
    let list: Vec<(TopicPartition, SeekTo)> = (0..n as i32)
        .map(|p| (tp("t", p), SeekTo::Offset(0)))
        .collect();
    r.assign(&list);
    let ts = r.sends();
    assert_eq!(ts.len(), 1, "one fetch");
    let mut first = r.fetched(&ts[0]);
    first.sort();
    let all: Vec<(TopicPartition, i64)> = (0..n as i32).map(|p| (tp("t", p), 0)).collect();
    assert_eq!(first, all);
    r.advance(Duration::from_secs(10));
    assert!(
        r.round().is_empty(),
        "a second fetch while one is in flight"
    );
    r.answer(&ts[0]);
    r.seek(&tp("t", 7), SeekTo::Offset(5), false);
    let ts = r.round();
    assert_eq!(ts.len(), 1);
    assert_eq!(
        r.fetched(&ts[0]),
        vec![(tp("t", 7), 5)],
        "the next fetch is incremental"
    );
}

// ----- deferred decoding ----------------------------------------------------------------

/// A rig like [`fetching_from`]'s that decodes answers after the next round's requests.
fn deferring_from(offset: i64) -> (Rig, Transmit) {
    let mut r = Rig::deferring(earliest(), two_brokers(), 64 * 1024 * 1024);
    r.assign(&[(t0(), SeekTo::Offset(offset))]);
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), offset)]);
    (r, t)
}

#[test]
fn a_deferred_answer_is_fetched_on_from_its_batch_headers_then_decoded() {
    let (mut r, t) = deferring_from(0);
    r.answer_with(&t, |a| {
        a.part(&t0()).records = [batch(0, 10), batch(10, 5)].concat();
    });
    assert!(
        chunks(&r.events()).is_empty(),
        "decoded only once the next fetch is out"
    );
    // One round: the next fetch, from where the batch headers end, then the records.
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 15)]);
    assert_eq!(chunks(&r.events()), vec![(t0(), 0, 15, offsets(0..15))]);
    r.answer_with(&t, |a| a.part(&t0()).records = batch(15, 5));
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 20)]);
    assert_eq!(chunks(&r.events()), vec![(t0(), 15, 20, offsets(15..20))]);
}

#[test]
fn a_deferred_answer_with_a_corrupt_batch_goes_back_to_it_and_the_fetch_ahead_is_stale() {
    let (mut r, t) = deferring_from(0);
    let mut bad = batch(10, 5);
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    r.answer_with(&t, |a| a.part(&t0()).records = [batch(0, 10), bad].concat());
    // The headers say 15: that fetch goes out before the CRC check finds the second batch
    // corrupt.
    let ahead = r.send();
    assert_eq!(r.fetched(&ahead), vec![(t0(), 15)]);
    let ev = r.events();
    assert_eq!(chunks(&ev), vec![(t0(), 0, 10, offsets(0..10))]);
    let errs = errors(&ev);
    assert_eq!(errs.len(), 1, "{ev:?}");
    assert_eq!(errs[0].0.offset(), Some(10));
    // The answer from 15 is stale: nothing of it reaches the application.
    r.answer_with(&ahead, |a| a.part(&t0()).records = batch(15, 5));
    assert!(r.events().is_empty());
    // After the backoff, the corrupt batch is fetched again (and reported again).
    let again = r.timer().expect("retried after a backoff");
    r.at(again);
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 10)]);
    // Still corrupt: decoded at once this time, with no fetch ahead of it, and reported
    // again; the next fetch waits for the backoff.
    let mut bad = batch(10, 5);
    let last = bad.len() - 1;
    bad[last] ^= 0x55;
    r.answer_with(&t, |a| a.part(&t0()).records = bad);
    assert_eq!(errors(&r.events()).len(), 1);
    assert!(
        r.sends().iter().all(|t| r.fetched(t).is_empty()),
        "no fetch before the backoff"
    );
}

#[test]
fn a_deferred_answer_seeked_away_from_before_it_is_decoded_delivers_nothing() {
    let (mut r, t) = deferring_from(0);
    r.answer_with(&t, |a| a.part(&t0()).records = batch(0, 10));
    r.seek(&t0(), SeekTo::Offset(3), false);
    let ts = r.sends();
    assert!(chunks(&r.events()).is_empty(), "records of the old epoch");
    assert!(
        ts.iter().all(|t| r.fetched(t) != vec![(t0(), 10)]),
        "{ts:?}"
    );
}

#[test]
fn a_committed_offset_of_a_newer_leader_epoch_than_the_metadata_waits_for_metadata_naming_it() {
    let mut r = Rig::new(with_group(), two_brokers());
    r.assign(&[(t0(), SeekTo::Default)]);
    let now = r.now();
    let e = r.fetcher.take_committed_wanted(now)[0].1;
    // Another member read up to 17 from a leader at epoch 7; this consumer's metadata
    // still names node 1 at epoch 5 (a broker back from a pause may still think it leads).
    for _ in 0..6 {
        assert!(
            r.round().is_empty(),
            "nothing to fetch before the committed offset"
        );
    }
    assert_eq!(
        r.cluster.leader(&t0()),
        Leader::Known(NodeId(1), LeaderEpoch(5)),
        "the metadata names node 1 at epoch 5"
    );
    r.hold_metadata = true;
    r.fetcher
        .apply_committed(&t0(), e, Some((17, LeaderEpoch(7))));
    for _ in 0..3 {
        r.advance(Duration::from_secs(2));
        assert!(r.round().is_empty(), "neither validated nor fetched");
    }
    assert!(!r.held_metadata.is_empty(), "a refresh was asked for");
    r.broker.part(&t0()).epoch = 7;
    r.broker.part(&t0()).leader = 2;
    r.release_metadata();
    let v = r.send();
    assert_eq!(v.route, control_route(2));
    assert_eq!(
        validated(&v),
        vec![(t0(), 7, 7)],
        "at the leader the epoch names"
    );
    r.answer(&v);
    let t = r.send();
    assert_eq!(r.fetched(&t), vec![(t0(), 17)]);
}

#[test]
fn a_position_epoch_no_metadata_reaches_goes_on_with_the_named_leader_after_a_few_refreshes() {
    let mut r = Rig::new(with_group(), two_brokers());
    r.assign(&[(t0(), SeekTo::Default)]);
    let now = r.now();
    let e = r.fetcher.take_committed_wanted(now)[0].1;
    r.fetcher
        .apply_committed(&t0(), e, Some((17, LeaderEpoch(9))));
    let before = r.metadata_sent;
    let mut validation = None;
    for _ in 0..40 {
        r.advance(Duration::from_secs(2));
        if let Some(v) = r.round().into_iter().next() {
            validation = Some(v);
            break;
        }
    }
    let v = validation.expect("validated in the end");
    assert_eq!(validated(&v), vec![(t0(), 5, 9)]);
    let refreshes = r.metadata_sent - before;
    let waits = usize::from(METADATA_BEHIND_WAITS);
    assert!(
        (waits..=waits + 1).contains(&refreshes),
        "after {waits} refreshes, each waited for: {refreshes}"
    );
}
