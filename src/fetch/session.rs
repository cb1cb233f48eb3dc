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

use std::collections::HashMap;

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

/// The client side of one broker's fetch session.
#[derive(Debug, Default)]
pub struct FetchSession {
    id: i32,
    /// 0 = next request is full (creates a session); n >= 1 = next incremental epoch.
    epoch: i32,
    sent: HashMap<TopicPartition, (Uuid, Sent)>,
    pending: Option<HashMap<TopicPartition, (Uuid, Sent)>>,
    /// Whether the session was built with topic ids (v13+); switching needs a new session.
    ids: bool,
}

impl FetchSession {
    /// Plans the next request. `sessions` is false for Fetch versions before 7 (no sessions:
    /// every request is full and sessionless). `use_ids` says whether the request will name
    /// topics by id (v13+).
    pub fn plan(
        &mut self,
        wanted: Vec<WantedPartition>,
        sessions: bool,
        use_ids: bool,
    ) -> FetchPlan {
        if use_ids != self.ids {
            self.reset();
            self.ids = use_ids;
        }
        let next: HashMap<TopicPartition, (Uuid, Sent)> = wanted
            .iter()
            .map(|w| {
                let s = Sent {
                    fetch_offset: w.fetch_offset,
                    current_leader_epoch: w.current_leader_epoch,
                    max_bytes: w.max_bytes,
                };
                (w.tp.clone(), (w.topic_id, s))
            })
            .collect();
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
        let changed: Vec<WantedPartition> = wanted
            .into_iter()
            .filter(|w| {
                self.sent.get(&w.tp).map(|(id, s)| (*id, *s))
                    != Some((
                        w.topic_id,
                        Sent {
                            fetch_offset: w.fetch_offset,
                            current_leader_epoch: w.current_leader_epoch,
                            max_bytes: w.max_bytes,
                        },
                    ))
            })
            .collect();
        // Forgotten: partitions no longer wanted, and (by id) partitions whose topic was
        // recreated under a new id, which are sent again with the new one (KIP-516).
        let mut forgotten: Vec<(TopicPartition, Uuid)> = self
            .sent
            .iter()
            .filter(|(tp, (id, _))| match next.get(*tp) {
                None => true,
                Some((new_id, _)) => use_ids && !id.is_zero() && !new_id.is_zero() && id != new_id,
            })
            .map(|(tp, (id, _))| (tp.clone(), *id))
            .collect();
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
