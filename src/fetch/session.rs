//! Incremental fetch sessions (KIP-227), one per broker connection.
//!
//! Invariants:
//! 1. `sent` is exactly the partition state the broker's session holds. It changes only
//!    when a response to the request that carried the change arrives without error.
//! 2. Any failure (error response, disconnect, timeout) makes the next request a full one
//!    that creates a new session; nothing partial is ever assumed.
//! 3. A partition the caller does not ask for is forgotten (removed from the session), so
//!    the broker never returns data for a paused or back-pressured partition; nor answers
//!    for a topic id the partition no longer has (a deleted and recreated topic).

use crate::protocol::error_code::ErrorCode;
use crate::protocol::message::Uuid;
use crate::types::TopicPartition;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    fetch_offset: i64,
    current_leader_epoch: i32,
    max_bytes: i32,
}

/// What one fetch request carries: session fields, partitions to send, partitions to forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPlan {
    /// Session id to send.
    pub session_id: i32,
    /// Session epoch to send.
    pub session_epoch: i32,
    /// Partitions whose state goes in the request (all of them in a full request).
    pub partitions: Vec<WantedPartition>,
    /// Partitions to remove from the session (incremental requests only).
    pub forgotten: Vec<(TopicPartition, Uuid)>,
    /// Whether this is a full request (the response then lists every partition it covers).
    pub full: bool,
}

/// What the broker's session holds for one partition, in partition order.
type Entry = (TopicPartition, Uuid, Sent);

/// The client side of one broker's fetch session.
///
/// The session's partitions are kept sorted by partition, and [`FetchSession::plan`]
/// takes the wanted partitions sorted the same way (the fetcher walks its partitions in
/// that order): the changes are one merge of the two lists, with no hashing and no map
/// built per request, so a request over a large, mostly idle assignment costs little
/// beyond walking it.
#[derive(Debug, Default)]
pub struct FetchSession {
    id: i32,
    /// 0 = next request is full (creates a session); n >= 1 = next incremental epoch.
    epoch: i32,
    sent: Vec<Entry>,
    pending: Option<Vec<Entry>>,
    /// Whether the session was built with topic ids (v13+); switching needs a new session.
    ids: bool,
}

impl FetchSession {
    /// Plans the next request. `sessions` is false for Fetch versions before 7 (no sessions:
    /// every request is full and sessionless). `use_ids` says whether the request will name
    /// topics by id (v13+). `wanted` lists each partition once; in partition order it
    /// costs one merge, else it is sorted first.
    pub fn plan(
        &mut self,
        mut wanted: Vec<WantedPartition>,
        sessions: bool,
        use_ids: bool,
    ) -> FetchPlan {
        if use_ids != self.ids {
            self.reset();
            self.ids = use_ids;
        }
        if !wanted.windows(2).all(|w| w[0].tp <= w[1].tp) {
            wanted.sort_by(|a, b| a.tp.cmp(&b.tp));
        }
        let entry = |w: &WantedPartition| -> Entry {
            let s = Sent {
                fetch_offset: w.fetch_offset,
                current_leader_epoch: w.current_leader_epoch,
                max_bytes: w.max_bytes,
            };
            (w.tp.clone(), w.topic_id, s)
        };
        if !sessions {
            self.pending = None;
            return FetchPlan {
                session_id: 0,
                session_epoch: -1,
                partitions: wanted,
                forgotten: Vec::new(),
                full: true,
            };
        }
        let next: Vec<Entry> = wanted.iter().map(entry).collect();
        if self.epoch == 0 {
            self.pending = Some(next);
            return FetchPlan {
                session_id: self.id,
                session_epoch: 0,
                partitions: wanted,
                forgotten: Vec::new(),
                full: true,
            };
        }
        // One merge of the session's partitions with the wanted ones: the changed ones go
        // in the request; the ones no longer wanted are forgotten, and (by id) those whose
        // topic was recreated under a new id, which are sent again with the new one
        // (KIP-516).
        let mut changed: Vec<WantedPartition> = Vec::new();
        let mut forgotten: Vec<(TopicPartition, Uuid)> = Vec::new();
        let mut old = self.sent.iter().peekable();
        for (w, (_, id, s)) in wanted.into_iter().zip(&next) {
            while let Some((tp, old_id, _)) = old.next_if(|(tp, _, _)| *tp < w.tp) {
                forgotten.push((tp.clone(), *old_id));
            }
            match old.next_if(|(tp, _, _)| *tp == w.tp) {
                Some((_, old_id, old_s)) if old_id == id && old_s == s => {}
                Some((tp, old_id, _)) => {
                    if use_ids && !old_id.is_zero() && !id.is_zero() && old_id != id {
                        forgotten.push((tp.clone(), *old_id));
                    }
                    changed.push(w);
                }
                None => changed.push(w),
            }
        }
        forgotten.extend(old.map(|(tp, id, _)| (tp.clone(), *id)));
        forgotten.sort();
        self.pending = Some(next);
        FetchPlan {
            session_id: self.id,
            session_epoch: self.epoch,
            partitions: changed,
            forgotten,
            full: false,
        }
    }

    /// Records the answer to the last planned request: its top-level error and session id.
    /// Returns whether the session had to be reset.
    pub fn handle_response(&mut self, error: ErrorCode, session_id: i32) -> bool {
        let Some(pending) = self.pending.take() else {
            return false;
        };
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
        self.sent = pending;
        false
    }

    /// Forgets everything: the next request is full and creates a new session (closing the
    /// old one on the broker if it still exists).
    pub fn reset(&mut self) {
        self.epoch = 0;
        self.sent.clear();
        self.pending = None;
    }

    /// Drops the session entirely, as when the connection is lost.
    pub fn disconnected(&mut self) {
        self.reset();
        self.id = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(p: i32, off: i64) -> WantedPartition {
        WantedPartition {
            tp: TopicPartition::new("t", p),
            topic_id: Uuid([1; 16]),
            fetch_offset: off,
            current_leader_epoch: 0,
            max_bytes: 100,
        }
    }

    #[test]
    fn first_request_is_full_then_only_changes_are_sent() {
        let mut s = FetchSession::default();
        let p = s.plan(vec![want(0, 0), want(1, 0)], true, true);
        assert!(p.full);
        assert_eq!((p.session_id, p.session_epoch), (0, 0));
        assert_eq!(p.partitions.len(), 2);
        assert!(!s.handle_response(ErrorCode::None, 42));

        let p = s.plan(vec![want(0, 10), want(1, 0)], true, true);
        assert!(!p.full);
        assert_eq!((p.session_id, p.session_epoch), (42, 1));
        assert_eq!(p.partitions, vec![want(0, 10)]);
        assert!(p.forgotten.is_empty());
        s.handle_response(ErrorCode::None, 42);

        let p = s.plan(vec![want(0, 10)], true, true);
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
        s.plan(vec![want(0, 0)], true, true);
        s.handle_response(ErrorCode::None, 7);
        s.plan(vec![want(0, 5)], true, true);
        assert!(s.handle_response(ErrorCode::INVALID_FETCH_SESSION_EPOCH, 0));
        let p = s.plan(vec![want(0, 5)], true, true);
        assert!(p.full);
        assert_eq!((p.session_id, p.session_epoch), (7, 0));
        assert_eq!(p.partitions, vec![want(0, 5)]);
    }

    #[test]
    fn a_lost_response_does_not_commit_the_change() {
        let mut s = FetchSession::default();
        s.plan(vec![want(0, 0)], true, true);
        s.handle_response(ErrorCode::None, 7);
        s.plan(vec![want(0, 5)], true, true);
        s.disconnected();
        let p = s.plan(vec![want(0, 5)], true, true);
        assert!(p.full);
        assert_eq!((p.session_id, p.session_epoch), (0, 0));
    }

    #[test]
    fn broker_without_session_slots_gets_full_requests() {
        let mut s = FetchSession::default();
        s.plan(vec![want(0, 0)], true, true);
        s.handle_response(ErrorCode::None, 0);
        let p = s.plan(vec![want(0, 0)], true, true);
        assert!(p.full);
        assert_eq!((p.session_id, p.session_epoch), (0, 0));
    }

    #[test]
    fn old_versions_are_sessionless() {
        let mut s = FetchSession::default();
        let p = s.plan(vec![want(0, 0)], false, false);
        assert_eq!((p.session_id, p.session_epoch, p.full), (0, -1, true));
    }

    #[test]
    fn switching_to_topic_ids_starts_a_new_session() {
        let mut s = FetchSession::default();
        s.plan(vec![want(0, 0)], true, false);
        s.handle_response(ErrorCode::None, 3);
        let p = s.plan(vec![want(0, 0)], true, true);
        assert!(p.full);
    }

    #[test]
    fn a_recreated_topic_forgets_the_old_topic_id_and_sends_the_new_one() {
        let mut s = FetchSession::default();
        s.plan(vec![want(0, 5)], true, true);
        s.handle_response(ErrorCode::None, 3);
        let mut recreated = want(0, 5);
        recreated.topic_id = Uuid([2; 16]);
        let p = s.plan(vec![recreated.clone()], true, true);
        assert!(!p.full);
        assert_eq!(p.partitions, vec![recreated.clone()]);
        assert_eq!(
            p.forgotten,
            vec![(TopicPartition::new("t", 0), Uuid([1; 16]))]
        );
        s.handle_response(ErrorCode::None, 3);
        let p = s.plan(vec![recreated], true, true);
        assert!(p.partitions.is_empty() && p.forgotten.is_empty());
    }

    #[test]
    fn an_idle_session_of_many_partitions_sends_only_what_changed() {
        let mut s = FetchSession::default();
        let all = |moved: &[(i32, i64)]| -> Vec<WantedPartition> {
            (0..100_000)
                .map(|p| {
                    let off = moved.iter().find(|m| m.0 == p).map_or(0, |m| m.1);
                    want(p, off)
                })
                .collect()
        };
        let p = s.plan(all(&[]), true, true);
        assert!(p.full);
        assert_eq!(p.partitions.len(), 100_000);
        s.handle_response(ErrorCode::None, 9);
        let p = s.plan(all(&[]), true, true);
        assert!(!p.full && p.partitions.is_empty() && p.forgotten.is_empty());
        s.handle_response(ErrorCode::None, 9);
        let p = s.plan(all(&[(0, 5), (99_999, 7)]), true, true);
        assert_eq!(p.partitions, vec![want(0, 5), want(99_999, 7)]);
        assert!(p.forgotten.is_empty());
    }

    #[test]
    fn wanted_partitions_in_any_order_are_matched_to_the_session() {
        let mut s = FetchSession::default();
        s.plan(vec![want(2, 0), want(0, 0), want(1, 0)], true, true);
        s.handle_response(ErrorCode::None, 4);
        let p = s.plan(vec![want(1, 3), want(0, 0)], true, true);
        assert_eq!(p.partitions, vec![want(1, 3)]);
        assert_eq!(
            p.forgotten,
            vec![(TopicPartition::new("t", 2), Uuid([1; 16]))]
        );
        s.handle_response(ErrorCode::None, 4);
        let p = s.plan(vec![want(0, 0), want(3, 0), want(1, 3)], true, true);
        assert_eq!(p.partitions, vec![want(3, 0)]);
        assert!(p.forgotten.is_empty());
    }

    #[test]
    fn epoch_wraps_to_one() {
        let mut s = FetchSession::default();
        s.plan(vec![want(0, 0)], true, true);
        s.handle_response(ErrorCode::None, 3);
        s.epoch = i32::MAX;
        s.plan(vec![want(0, 0)], true, true);
        s.handle_response(ErrorCode::None, 3);
        assert_eq!(s.epoch, 1);
    }
}
