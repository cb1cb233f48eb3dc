//! Incremental fetch sessions (KIP-227), one per broker connection.
//!
//! The caller says partition by partition what the broker's session should hold
//! ([`FetchSession::want`], [`FetchSession::unwant`]) as things change; a request carries
//! only the difference from what the session holds. A round over a large assignment of
//! which nothing changed sends an incremental request with no partitions at all (the
//! broker then answers with the partitions that have news), and costs no more than that.
//!
//! Invariants:
//! 1. `sent` is exactly the partition state the broker's session holds once the request
//!    last planned is answered without error. Planning folds the changes into it at once:
//!    only one request is in flight per broker and nothing is planned while it is, and a
//!    request that fails throws the session away (2), so `sent` is never trusted for a
//!    request whose answer did not come.
//! 2. Any failure (error response, disconnect, timeout) makes the next request a full one
//!    that creates a new session; nothing partial is ever assumed.
//! 3. A partition the caller does not want is forgotten (removed from the session), so
//!    the broker never returns data for a paused or back-pressured partition; nor answers
//!    for a topic id the partition no longer has (a deleted and recreated topic).
//! 4. `changes` holds exactly the partitions whose wanted state differs from `sent` (the
//!    new state, or `None` to forget one): an incremental request carries these and
//!    nothing else, so planning it costs what changed, not the size of the session. A
//!    full request carries `sent` with `changes` applied: every wanted partition.
//! 5. `wanted` counts the partitions of `sent` with `changes` applied, and `unnamed` those
//!    of them without a topic id.

use std::collections::BTreeMap;

use crate::protocol::error_code::ErrorCode;
use crate::protocol::message::Uuid;
use crate::types::{PositionEpoch, TopicPartition};

/// One partition the caller wants fetched, with the state that goes on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WantedPartition {
    /// Which partition.
    pub tp: TopicPartition,
    /// Its topic id, zero if unknown.
    pub topic_id: Uuid,
    /// Where to read from.
    pub fetch_offset: i64,
    /// The leader epoch we believe current (-1 to skip the check).
    pub current_leader_epoch: i32,
    /// Per-partition byte limit.
    pub max_bytes: i32,
}

/// What a session holds for one partition: the state that goes on the wire, and the
/// position epoch it was wanted under (an answer for the partition is for that position).
/// A change of any of these goes to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPartition {
    /// Its topic id, zero if unknown.
    pub topic_id: Uuid,
    /// Where to read from.
    pub fetch_offset: i64,
    /// The position epoch the caller wants it fetched under.
    pub epoch: PositionEpoch,
    /// The leader epoch we believe current (-1 to skip the check).
    pub current_leader_epoch: i32,
}

impl SessionPartition {
    /// The partition as a request carries it.
    pub fn on_wire(&self, tp: &TopicPartition, max_bytes: i32) -> WantedPartition {
        WantedPartition {
            tp: tp.clone(),
            topic_id: self.topic_id,
            fetch_offset: self.fetch_offset,
            current_leader_epoch: self.current_leader_epoch,
            max_bytes,
        }
    }
}

/// What one fetch request carries: session fields, partitions to send, partitions to forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPlan {
    /// Session id to send.
    pub session_id: i32,
    /// Session epoch to send.
    pub session_epoch: i32,
    /// Partitions whose state goes in the request (all of them in a full request), in
    /// partition order.
    pub partitions: Vec<WantedPartition>,
    /// Partitions to remove from the session (incremental requests only), in partition
    /// order.
    pub forgotten: Vec<(TopicPartition, Uuid)>,
    /// Whether this is a full request (the response then lists every partition it covers).
    pub full: bool,
}

/// The client side of one broker's fetch session. See the module documentation.
#[derive(Debug, Default)]
pub struct FetchSession {
    id: i32,
    /// 0 = next request is full (creates a session); n >= 1 = next incremental epoch.
    epoch: i32,
    /// The broker's session as of the last request planned (invariant 1).
    sent: BTreeMap<TopicPartition, SessionPartition>,
    /// How the wanted state differs from `sent` (invariant 4).
    changes: BTreeMap<TopicPartition, Option<SessionPartition>>,
    /// A request that uses the session was planned and not answered yet.
    in_flight: bool,
    /// Partitions wanted, and those of them without a topic id (invariant 5).
    wanted: usize,
    unnamed: usize,
    /// Whether the session was built with topic ids (v13+); switching needs a new session.
    ids: bool,
}

impl FetchSession {
    /// The session is to hold `tp` with state `s` (a change goes in the next request).
    pub fn want(&mut self, tp: &TopicPartition, s: SessionPartition) {
        self.count(tp, Some(&s));
        if self.sent.get(tp) == Some(&s) {
            self.changes.remove(tp);
        } else if let Some(c) = self.changes.get_mut(tp) {
            *c = Some(s);
        } else {
            self.changes.insert(tp.clone(), Some(s));
        }
    }

    /// The session is not to hold `tp` (it is forgotten by the next request).
    pub fn unwant(&mut self, tp: &TopicPartition) {
        self.count(tp, None);
        if self.sent.contains_key(tp) {
            self.changes.insert(tp.clone(), None);
        } else {
            self.changes.remove(tp);
        }
    }

    /// The state the caller last wanted for `tp` (`None`: not wanted).
    pub fn wanted_state(&self, tp: &TopicPartition) -> Option<&SessionPartition> {
        match self.changes.get(tp) {
            Some(c) => c.as_ref(),
            None => self.sent.get(tp),
        }
    }

    /// How many partitions the next request covers.
    pub fn wanted(&self) -> usize {
        self.wanted
    }

    /// Whether every wanted partition has a topic id (a request may name topics by id).
    pub fn ids_known(&self) -> bool {
        self.unnamed == 0
    }

    /// The position epoch and fetch offset the broker's session holds for `tp`: those an
    /// answer to the request last planned is for.
    pub fn fetched_at(&self, tp: &TopicPartition) -> Option<(PositionEpoch, i64)> {
        self.sent.get(tp).map(|s| (s.epoch, s.fetch_offset))
    }

    /// The partitions the caller wants, with their state, in partition order (what a full
    /// request would carry; for tests and checks).
    #[cfg(test)]
    pub fn wanted_partitions(&self) -> Vec<(TopicPartition, SessionPartition)> {
        let mut out: BTreeMap<&TopicPartition, SessionPartition> =
            self.sent.iter().map(|(tp, s)| (tp, *s)).collect();
        for (tp, c) in &self.changes {
            match c {
                Some(s) => out.insert(tp, *s),
                None => out.remove(tp),
            };
        }
        out.into_iter().map(|(tp, s)| (tp.clone(), s)).collect()
    }

    /// Keeps the counts of invariant 5 as `tp` goes from its wanted state to `new`.
    fn count(&mut self, tp: &TopicPartition, new: Option<&SessionPartition>) {
        let old = self.wanted_state(tp).map(|s| s.topic_id.is_zero());
        let new = new.map(|s| s.topic_id.is_zero());
        if let Some(unnamed) = old {
            self.wanted -= 1;
            self.unnamed -= usize::from(unnamed);
        }
        if let Some(unnamed) = new {
            self.wanted += 1;
            self.unnamed += usize::from(unnamed);
        }
    }

    /// Plans the next request. `sessions` is false for Fetch versions before 7 (no
    /// sessions: every request is full and sessionless). `use_ids` says whether the
    /// request will name topics by id (v13+). `max_bytes` is each partition's limit. An
    /// incremental request costs what changed since the last one (invariant 4).
    pub fn plan(&mut self, sessions: bool, use_ids: bool, max_bytes: i32) -> FetchPlan {
        if use_ids != self.ids {
            self.reset();
            self.ids = use_ids;
        }
        let full = !sessions || self.epoch == 0;
        let mut partitions = Vec::new();
        let mut forgotten = Vec::new();
        let changes = std::mem::take(&mut self.changes);
        let mut record = |tp: &TopicPartition,
                          old: Option<&SessionPartition>,
                          new: Option<&SessionPartition>| {
            if full {
                return;
            }
            match (old, new) {
                (Some(o), Some(n)) => {
                    // A topic recreated under a new id: the old one is forgotten, the
                    // partition sent again with the new one (KIP-516).
                    if use_ids
                        && !o.topic_id.is_zero()
                        && !n.topic_id.is_zero()
                        && o.topic_id != n.topic_id
                    {
                        forgotten.push((tp.clone(), o.topic_id));
                    }
                    partitions.push(n.on_wire(tp, max_bytes));
                }
                (None, Some(n)) => partitions.push(n.on_wire(tp, max_bytes)),
                (Some(o), None) => forgotten.push((tp.clone(), o.topic_id)),
                (None, None) => {}
            }
        };
        if changes.len() >= self.sent.len() / 4 {
            // Many changes (a first request, a new assignment): one merge of the two
            // sorted maps, building the new one packed, beats a look-up each.
            let old = std::mem::take(&mut self.sent);
            self.sent = merge(old, changes, &mut record);
        } else {
            for (tp, c) in changes {
                match c {
                    Some(s) => {
                        let old = self.sent.insert(tp.clone(), s);
                        record(&tp, old.as_ref(), Some(&s));
                    }
                    None => {
                        if let Some(old) = self.sent.remove(&tp) {
                            record(&tp, Some(&old), None);
                        }
                    }
                }
            }
        }
        if full {
            partitions = self
                .sent
                .iter()
                .map(|(tp, s)| s.on_wire(tp, max_bytes))
                .collect();
        }
        self.in_flight = sessions;
        FetchPlan {
            session_id: if sessions { self.id } else { 0 },
            session_epoch: if sessions { self.epoch } else { -1 },
            partitions,
            forgotten,
            full,
        }
    }

    /// Records the answer to the last planned request: its top-level error and session id.
    /// Returns whether the session had to be reset.
    pub fn handle_response(&mut self, error: ErrorCode, session_id: i32) -> bool {
        if !std::mem::take(&mut self.in_flight) {
            return false;
        }
        if error.is_err() {
            log::debug!("fetch session {} reset after {error}", self.id);
            self.reset();
            return true;
        }
        if self.epoch == 0 {
            self.id = session_id;
            // A zero id means the broker created no session: keep sending full requests.
            self.epoch = if session_id == 0 { 0 } else { 1 };
        } else {
            self.epoch = if self.epoch == i32::MAX {
                1
            } else {
                self.epoch + 1
            };
        }
        false
    }

    /// Forgets the broker's session: the next request is full and creates a new one
    /// (closing the old one on the broker if it still exists). What is wanted stays.
    pub fn reset(&mut self) {
        self.epoch = 0;
        self.in_flight = false;
    }

    /// Drops the session entirely, as when the connection is lost.
    pub fn disconnected(&mut self) {
        self.reset();
        self.id = 0;
    }
}

/// `old` with `changes` applied, built in one pass over both (sorted) maps; `record` hears
/// of each partition whose state changed, with its old and new state.
fn merge(
    old: BTreeMap<TopicPartition, SessionPartition>,
    changes: BTreeMap<TopicPartition, Option<SessionPartition>>,
    record: &mut impl FnMut(&TopicPartition, Option<&SessionPartition>, Option<&SessionPartition>),
) -> BTreeMap<TopicPartition, SessionPartition> {
    let mut old = old.into_iter().peekable();
    let mut changes = changes.into_iter().peekable();
    std::iter::from_fn(|| loop {
        let take_old = match (old.peek(), changes.peek()) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((a, _)), Some((b, _))) => a < b,
        };
        if take_old {
            return old.next();
        }
        let (tp, c) = changes.next()?;
        let before = old.next_if(|(a, _)| *a == tp).map(|(_, s)| s);
        record(&tp, before.as_ref(), c.as_ref());
        if let Some(s) = c {
            return Some((tp, s));
        }
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::{Jitter, XorShift};

    fn state(off: i64) -> SessionPartition {
        SessionPartition {
            topic_id: Uuid([1; 16]),
            fetch_offset: off,
            epoch: PositionEpoch(1),
            current_leader_epoch: 0,
        }
    }

    fn want(p: i32, off: i64) -> WantedPartition {
        state(off).on_wire(&TopicPartition::new("t", p), 100)
    }

    /// Wants exactly `list` (partition, offset) of topic `t`, as the fetcher would by
    /// telling the session of each change.
    fn set(s: &mut FetchSession, list: &[(i32, i64)]) {
        let now: Vec<TopicPartition> = s.wanted_partitions().into_iter().map(|e| e.0).collect();
        for tp in now {
            if !list.iter().any(|(p, _)| *p == tp.partition()) {
                s.unwant(&tp);
            }
        }
        for (p, off) in list {
            s.want(&TopicPartition::new("t", *p), state(*off));
        }
    }

    fn plan(s: &mut FetchSession, sessions: bool, use_ids: bool) -> FetchPlan {
        s.plan(sessions, use_ids, 100)
    }

    #[test]
    fn first_request_is_full_then_only_changes_are_sent() {
        let mut s = FetchSession::default();
        set(&mut s, &[(0, 0), (1, 0)]);
        let p = plan(&mut s, true, true);
        assert!(p.full);
        assert_eq!((p.session_id, p.session_epoch), (0, 0));
        assert_eq!(p.partitions.len(), 2);
        assert!(!s.handle_response(ErrorCode::None, 42));

        set(&mut s, &[(0, 10), (1, 0)]);
        let p = plan(&mut s, true, true);
        assert!(!p.full);
        assert_eq!((p.session_id, p.session_epoch), (42, 1));
        assert_eq!(p.partitions, vec![want(0, 10)]);
        assert!(p.forgotten.is_empty());
        s.handle_response(ErrorCode::None, 42);

        set(&mut s, &[(0, 10)]);
        let p = plan(&mut s, true, true);
        assert_eq!(p.session_epoch, 2);
        assert!(p.partitions.is_empty());
        assert_eq!(
            p.forgotten,
            vec![(TopicPartition::new("t", 1), Uuid([1; 16]))]
        );
    }

    #[test]
    fn an_error_makes_the_next_request_full_on_a_new_session() {
        let mut s = FetchSession::default();
        set(&mut s, &[(0, 0)]);
        plan(&mut s, true, true);
        s.handle_response(ErrorCode::None, 7);
        set(&mut s, &[(0, 5)]);
        plan(&mut s, true, true);
        assert!(s.handle_response(ErrorCode::INVALID_FETCH_SESSION_EPOCH, 0));
        let p = plan(&mut s, true, true);
        assert!(p.full);
        assert_eq!((p.session_id, p.session_epoch), (7, 0));
        assert_eq!(p.partitions, vec![want(0, 5)]);
    }

    #[test]
    fn a_lost_response_does_not_commit_the_change() {
        let mut s = FetchSession::default();
        set(&mut s, &[(0, 0)]);
        plan(&mut s, true, true);
        s.handle_response(ErrorCode::None, 7);
        set(&mut s, &[(0, 5)]);
        plan(&mut s, true, true);
        s.disconnected();
        let p = plan(&mut s, true, true);
        assert!(p.full);
        assert_eq!((p.session_id, p.session_epoch), (0, 0));
        assert_eq!(p.partitions, vec![want(0, 5)]);
    }

    #[test]
    fn broker_without_session_slots_gets_full_requests() {
        let mut s = FetchSession::default();
        set(&mut s, &[(0, 0)]);
        plan(&mut s, true, true);
        s.handle_response(ErrorCode::None, 0);
        let p = plan(&mut s, true, true);
        assert!(p.full);
        assert_eq!((p.session_id, p.session_epoch), (0, 0));
        assert_eq!(p.partitions, vec![want(0, 0)]);
    }

    #[test]
    fn old_versions_are_sessionless() {
        let mut s = FetchSession::default();
        set(&mut s, &[(0, 0)]);
        let p = plan(&mut s, false, false);
        assert_eq!((p.session_id, p.session_epoch, p.full), (0, -1, true));
        assert!(!s.handle_response(ErrorCode::None, 0));
        let p = plan(&mut s, false, false);
        assert_eq!(p.partitions, vec![want(0, 0)], "every request is full");
    }

    #[test]
    fn switching_to_topic_ids_starts_a_new_session() {
        let mut s = FetchSession::default();
        set(&mut s, &[(0, 0)]);
        plan(&mut s, true, false);
        s.handle_response(ErrorCode::None, 3);
        let p = plan(&mut s, true, true);
        assert!(p.full);
    }

    #[test]
    fn a_recreated_topic_forgets_the_old_topic_id_and_sends_the_new_one() {
        let mut s = FetchSession::default();
        set(&mut s, &[(0, 5)]);
        plan(&mut s, true, true);
        s.handle_response(ErrorCode::None, 3);
        let tp = TopicPartition::new("t", 0);
        let recreated = SessionPartition {
            topic_id: Uuid([2; 16]),
            ..state(5)
        };
        s.want(&tp, recreated);
        let p = plan(&mut s, true, true);
        assert!(!p.full);
        assert_eq!(p.partitions, vec![recreated.on_wire(&tp, 100)]);
        assert_eq!(p.forgotten, vec![(tp.clone(), Uuid([1; 16]))]);
        s.handle_response(ErrorCode::None, 3);
        s.want(&tp, recreated);
        let p = plan(&mut s, true, true);
        assert!(p.partitions.is_empty() && p.forgotten.is_empty());
    }

    #[test]
    fn an_idle_session_of_many_partitions_sends_nothing_then_only_what_changed() {
        let mut s = FetchSession::default();
        let all: Vec<(i32, i64)> = (0..100_000).map(|p| (p, 0)).collect();
        set(&mut s, &all);
        let p = plan(&mut s, true, true);
        assert!(p.full);
        assert_eq!(p.partitions.len(), 100_000);
        s.handle_response(ErrorCode::None, 9);
        let p = plan(&mut s, true, true);
        assert!(!p.full && p.partitions.is_empty() && p.forgotten.is_empty());
        s.handle_response(ErrorCode::None, 9);
        s.want(&TopicPartition::new("t", 0), state(5));
        s.want(&TopicPartition::new("t", 99_999), state(7));
        let p = plan(&mut s, true, true);
        assert_eq!(p.partitions, vec![want(0, 5), want(99_999, 7)]);
        assert!(p.forgotten.is_empty());
        assert_eq!(s.wanted(), 100_000);
    }

    #[test]
    fn a_change_undone_before_the_next_request_is_not_sent() {
        let mut s = FetchSession::default();
        set(&mut s, &[(0, 0), (1, 0)]);
        plan(&mut s, true, true);
        s.handle_response(ErrorCode::None, 4);
        set(&mut s, &[(0, 3)]);
        set(&mut s, &[(0, 0), (1, 0)]);
        let p = plan(&mut s, true, true);
        assert!(p.partitions.is_empty() && p.forgotten.is_empty());
        assert_eq!(s.wanted(), 2);
    }

    #[test]
    fn a_new_position_epoch_alone_is_sent_and_answers_are_matched_to_it() {
        let mut s = FetchSession::default();
        let tp = TopicPartition::new("t", 0);
        s.want(&tp, state(4));
        plan(&mut s, true, true);
        s.handle_response(ErrorCode::None, 4);
        assert_eq!(s.fetched_at(&tp), Some((PositionEpoch(1), 4)));
        let again = SessionPartition {
            epoch: PositionEpoch(2),
            ..state(4)
        };
        s.want(&tp, again);
        assert_eq!(
            s.fetched_at(&tp),
            Some((PositionEpoch(1), 4)),
            "the session holds the old one until a request carries the new"
        );
        let p = plan(&mut s, true, true);
        assert_eq!(p.partitions, vec![want(0, 4)]);
        assert_eq!(s.fetched_at(&tp), Some((PositionEpoch(2), 4)));
    }

    #[test]
    fn epoch_wraps_to_one() {
        let mut s = FetchSession::default();
        set(&mut s, &[(0, 0)]);
        plan(&mut s, true, true);
        s.handle_response(ErrorCode::None, 3);
        s.epoch = i32::MAX;
        plan(&mut s, true, true);
        s.handle_response(ErrorCode::None, 3);
        assert_eq!(s.epoch, 1);
    }

    /// What a request carries, worked out from scratch as the session did before it kept
    /// its changes: one merge of the broker's partitions with every wanted one.
    fn from_scratch(
        broker: &BTreeMap<TopicPartition, SessionPartition>,
        wanted: &BTreeMap<TopicPartition, SessionPartition>,
        use_ids: bool,
    ) -> (Vec<WantedPartition>, Vec<(TopicPartition, Uuid)>) {
        let mut changed = Vec::new();
        let mut forgotten = Vec::new();
        for (tp, w) in wanted {
            match broker.get(tp) {
                Some(old) if old == w => {}
                Some(old) => {
                    if use_ids
                        && !old.topic_id.is_zero()
                        && !w.topic_id.is_zero()
                        && old.topic_id != w.topic_id
                    {
                        forgotten.push((tp.clone(), old.topic_id));
                    }
                    changed.push(w.on_wire(tp, 100));
                }
                None => changed.push(w.on_wire(tp, 100)),
            }
        }
        for (tp, old) in broker {
            if !wanted.contains_key(tp) {
                forgotten.push((tp.clone(), old.topic_id));
            }
        }
        forgotten.sort();
        (changed, forgotten)
    }

    /// Random wants, unwants, answers, errors and disconnects: after every step the counts
    /// and the wanted state match the wanted set kept aside, and every request carries
    /// exactly what a merge of the whole wanted set with the broker's session gives (all of
    /// it when full); the broker's session, kept as a broker would, matches `sent`.
    #[test]
    fn randomized_changes_send_exactly_what_a_merge_of_everything_would() {
        for seed in 1..=20u32 {
            let mut rng = XorShift::new(seed.wrapping_mul(2_654_435_761));
            let mut pick = move |n: u32| rng.next_u32() % n.max(1);
            let mut s = FetchSession::default();
            let mut wanted: BTreeMap<TopicPartition, SessionPartition> = BTreeMap::new();
            // The broker's session, and the one a request in flight will make it.
            let mut broker: BTreeMap<TopicPartition, SessionPartition> = BTreeMap::new();
            let mut after: Option<(BTreeMap<TopicPartition, SessionPartition>, bool)> = None;
            let mut broker_epoch = 0;
            let sessions = seed % 5 != 0;
            for step in 0..600 {
                let ctx = format!("seed {seed} step {step}");
                match pick(10) {
                    0..=4 => {
                        let many = pick(8) == 0;
                        for _ in 0..1 + pick(if many { 300 } else { 4 }) {
                            let topic = ["t", "u"][pick(2) as usize];
                            let tp = TopicPartition::new(topic, pick(200) as i32);
                            if pick(3) == 0 {
                                s.unwant(&tp);
                                wanted.remove(&tp);
                            } else {
                                let st = SessionPartition {
                                    topic_id: Uuid([pick(3) as u8; 16]),
                                    fetch_offset: pick(4) as i64,
                                    epoch: PositionEpoch(pick(2) as u64),
                                    current_leader_epoch: pick(2) as i32,
                                };
                                s.want(&tp, st);
                                wanted.insert(tp, st);
                            }
                        }
                    }
                    5 | 6 if after.is_none() => {
                        let use_ids = pick(6) != 0;
                        let p = s.plan(sessions, use_ids, 100);
                        if p.full {
                            let all: Vec<WantedPartition> =
                                wanted.iter().map(|(tp, w)| w.on_wire(tp, 100)).collect();
                            assert_eq!(p.partitions, all, "{ctx}: a full request");
                            assert!(p.forgotten.is_empty(), "{ctx}");
                        } else {
                            assert_eq!(p.session_epoch, broker_epoch, "{ctx}");
                            let (changed, forgotten) = from_scratch(&broker, &wanted, use_ids);
                            assert_eq!(p.partitions, changed, "{ctx}: partitions");
                            assert_eq!(p.forgotten, forgotten, "{ctx}: forgotten");
                        }
                        after = Some((wanted.clone(), p.full));
                    }
                    5 | 6 => {}
                    7 | 8 => {
                        if let Some((next, full)) = after.take() {
                            if sessions && pick(8) == 0 {
                                s.handle_response(ErrorCode::FETCH_SESSION_ID_NOT_FOUND, 0);
                                broker_epoch = 0;
                            } else {
                                s.handle_response(ErrorCode::None, 5);
                                broker = next;
                                broker_epoch = match (sessions, full) {
                                    (false, _) => 0,
                                    (true, true) => 1,
                                    (true, false) => broker_epoch + 1,
                                };
                            }
                        }
                    }
                    _ => {
                        if after.take().is_some() || pick(2) == 0 {
                            s.disconnected();
                            broker_epoch = 0;
                        }
                    }
                }
                if after.is_none() && broker_epoch > 0 {
                    for (tp, w) in &broker {
                        assert_eq!(
                            s.fetched_at(tp),
                            Some((w.epoch, w.fetch_offset)),
                            "{ctx}: the session's view of {tp}"
                        );
                    }
                }
                assert_eq!(s.wanted(), wanted.len(), "{ctx}: wanted count");
                let unnamed = wanted.values().filter(|w| w.topic_id.is_zero()).count();
                assert_eq!(s.ids_known(), unnamed == 0, "{ctx}: unnamed count");
                let kept: Vec<(TopicPartition, SessionPartition)> =
                    wanted.iter().map(|(tp, w)| (tp.clone(), *w)).collect();
                assert_eq!(s.wanted_partitions(), kept, "{ctx}: wanted state");
            }
        }
    }
}
