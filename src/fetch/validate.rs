//! Position validation (KIP-320): before a partition is fetched from a new leader (or from
//! a committed offset that carries a leader epoch), its leader is asked with
//! OffsetForLeaderEpoch where the epoch of the last record read ended. An end below the
//! position means the log was truncated under it (an unclean leader election, or records
//! the old leader had that never reached the others): reading resumes at the end of that
//! epoch, the first offset where the logs diverge, and the application is told. Sans-IO:
//! the request is built and the answer judged here; the fetcher keeps the state.

use std::collections::HashMap;
use std::time::Duration;

use crate::link::{Route, Tag, Transmit, Versions};
use crate::protocol::api::offset_for_leader_epoch::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, OffsetForLeaderPartition,
    OffsetForLeaderTopic,
};
use crate::protocol::error_code::ErrorCode;
use crate::types::{LeaderEpoch, TopicPartition};

/// One position to validate.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    pub tp: TopicPartition,
    /// The leader epoch the metadata names (the broker fences an older or newer one).
    pub current_leader_epoch: LeaderEpoch,
    /// The epoch of the last record read before the position.
    pub leader_epoch: LeaderEpoch,
}

/// What the leader's answer says about a position at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The log still holds everything before the position.
    Valid,
    /// The log was truncated below the position: it diverges from what was read at
    /// `divergent`, the end of the last epoch both share (`leader_epoch`).
    Truncated {
        divergent: i64,
        leader_epoch: LeaderEpoch,
    },
    /// The leader knows no end for the epoch (nothing of it, or of any earlier one, is
    /// left): where the logs diverge is unknown.
    Unknown,
    /// The leader refused (or did not answer for) the partition.
    Error(ErrorCode),
}

/// The request validating `checks` (all led by the broker behind `route`), or why the
/// broker cannot be asked (it speaks no OffsetForLeaderEpoch version from v3, which a
/// consumer needs so the answer is bounded by the high watermark; the Java client then
/// skips validation too).
pub(crate) fn request(
    route: Route,
    versions: &Versions,
    checks: &[Check],
    tag: Tag,
    timeout: Duration,
) -> Result<Transmit, String> {
    let v = versions
        .pick::<OffsetForLeaderEpochRequest>()
        .ok_or_else(|| versions.unsupported::<OffsetForLeaderEpochRequest>(route.peer))?;
    let mut topics: Vec<OffsetForLeaderTopic> = Vec::new();
    for c in checks {
        let part = OffsetForLeaderPartition {
            partition: c.tp.partition(),
            current_leader_epoch: c.current_leader_epoch.0,
            leader_epoch: c.leader_epoch.0,
        };
        // Checks come grouped by topic (the fetcher's map is ordered), so the last topic is
        // the only one to look at.
        match topics.last_mut().filter(|t| t.topic == c.tp.topic()) {
            Some(t) => t.partitions.push(part),
            None => topics.push(OffsetForLeaderTopic {
                topic: c.tp.topic().to_owned(),
                partitions: vec![part],
            }),
        }
    }
    let mut req = OffsetForLeaderEpochRequest::for_consumer();
    req.topics = topics;
    Ok(Transmit::new(route, &req, v, tag, timeout))
}

/// The answers of a response, by partition. A partition asked for and missing from the
/// answer is judged `Error(UNKNOWN_SERVER_ERROR)` by [`verdict_for`].
pub(crate) fn answers(resp: &OffsetForLeaderEpochResponse) -> HashMap<(&str, i32), Answer> {
    let mut out = HashMap::new();
    for t in &resp.topics {
        for p in &t.partitions {
            out.insert(
                (t.topic.as_str(), p.partition),
                Answer {
                    error: ErrorCode::from_code(p.error_code),
                    leader_epoch: LeaderEpoch(p.leader_epoch),
                    end_offset: p.end_offset,
                },
            );
        }
    }
    out
}

/// One partition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    pub error: ErrorCode,
    pub leader_epoch: LeaderEpoch,
    pub end_offset: i64,
}

/// The verdict on `tp`'s position at `offset`, from `answers`.
pub(crate) fn verdict_for(
    answers: &HashMap<(&str, i32), Answer>,
    tp: &TopicPartition,
    offset: i64,
) -> Verdict {
    let Some(a) = answers.get(&(tp.topic(), tp.partition())) else {
        return Verdict::Error(ErrorCode::UNKNOWN_SERVER_ERROR);
    };
    judge(a, offset)
}

/// The verdict on a position at `offset` from one partition's answer (as the Java client's
/// `SubscriptionState.maybeCompleteValidation`).
pub(crate) fn judge(a: &Answer, offset: i64) -> Verdict {
    if a.error.is_err() {
        return Verdict::Error(a.error);
    }
    if a.end_offset < 0 || a.leader_epoch.known().is_none() {
        return Verdict::Unknown;
    }
    if a.end_offset < offset {
        return Verdict::Truncated {
            divergent: a.end_offset,
            leader_epoch: a.leader_epoch,
        };
    }
    Verdict::Valid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(error: ErrorCode, leader_epoch: i32, end_offset: i64) -> Answer {
        Answer {
            error,
            leader_epoch: LeaderEpoch(leader_epoch),
            end_offset,
        }
    }

    #[test]
    fn an_epoch_ending_at_or_after_the_position_validates_it() {
        assert_eq!(judge(&answer(ErrorCode::None, 3, 100), 100), Verdict::Valid);
        assert_eq!(judge(&answer(ErrorCode::None, 3, 250), 100), Verdict::Valid);
    }

    #[test]
    fn an_epoch_ending_below_the_position_is_a_truncation_at_that_end() {
        assert_eq!(
            judge(&answer(ErrorCode::None, 2, 60), 100),
            Verdict::Truncated {
                divergent: 60,
                leader_epoch: LeaderEpoch(2)
            }
        );
    }

    #[test]
    fn an_answer_without_an_end_or_an_epoch_leaves_the_divergence_unknown() {
        assert_eq!(
            judge(&answer(ErrorCode::None, -1, -1), 100),
            Verdict::Unknown
        );
        assert_eq!(
            judge(&answer(ErrorCode::None, 4, -1), 100),
            Verdict::Unknown
        );
        assert_eq!(
            judge(&answer(ErrorCode::None, -1, 120), 100),
            Verdict::Unknown
        );
    }

    #[test]
    fn an_error_wins_over_the_offsets_and_a_missing_partition_is_an_error() {
        let a = answer(ErrorCode::FENCED_LEADER_EPOCH, 3, 10);
        assert_eq!(
            judge(&a, 100),
            Verdict::Error(ErrorCode::FENCED_LEADER_EPOCH)
        );
        let answers = HashMap::new();
        assert_eq!(
            verdict_for(&answers, &TopicPartition::new("t", 0), 5),
            Verdict::Error(ErrorCode::UNKNOWN_SERVER_ERROR)
        );
    }
}
