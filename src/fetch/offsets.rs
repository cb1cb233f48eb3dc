//! ListOffsets requests as both their users build them (position resets in the fetcher,
//! the application's offset lookups): grouping by partition leader, the version each
//! special timestamp needs, and reading the answers.

use std::collections::HashMap;
use std::time::Duration;

use crate::link::{Route, Tag, Transmit, Versions};
use crate::protocol::api::list_offsets::{
    self, ListOffsetsPartition, ListOffsetsRequest, ListOffsetsResponse, ListOffsetsTopic,
};
use crate::protocol::api::Api;
use crate::protocol::error_code::ErrorCode;
use crate::types::{LeaderEpoch, TopicPartition};

/// One partition to look up: at which timestamp (or special value), with the leader epoch
/// the metadata gave.
#[derive(Debug, Clone)]
pub(crate) struct Query {
    pub tp: TopicPartition,
    pub timestamp: i64,
    pub leader_epoch: LeaderEpoch,
}

/// The answer for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    pub error: ErrorCode,
    /// -1 when no record matches (a timestamp after the last record).
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: LeaderEpoch,
}

/// Why a request could not be built for a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unsendable {
    /// The broker speaks no ListOffsets version we do.
    NoVersion(String),
    /// The broker's newest version is too old for one of the timestamps (or read_committed).
    TooOld(String),
}

/// Builds the request for `queries` (all led by the broker behind `route`).
pub(crate) fn request(
    route: Route,
    versions: &Versions,
    queries: &[Query],
    isolation_level: i8,
    tag: Tag,
    timeout: Duration,
) -> Result<Transmit, Unsendable> {
    let v = versions.pick::<ListOffsetsRequest>().ok_or_else(|| {
        Unsendable::NoVersion(versions.unsupported::<ListOffsetsRequest>(route.peer))
    })?;
    let need = queries
        .iter()
        .map(|q| list_offsets::min_version(q.timestamp, isolation_level))
        .max()
        .unwrap_or(ListOffsetsRequest::MIN_VERSION);
    if v.get() < need {
        return Err(Unsendable::TooOld(format!(
            "{} supports ListOffsets up to v{v}; this lookup needs v{need}",
            route.peer
        )));
    }
    let mut topics: Vec<ListOffsetsTopic> = Vec::new();
    for q in queries {
        let part = ListOffsetsPartition {
            partition_index: q.tp.partition(),
            current_leader_epoch: q.leader_epoch.0,
            timestamp: q.timestamp,
        };
        match topics.iter_mut().find(|t| t.name == q.tp.topic()) {
            Some(t) => t.partitions.push(part),
            None => topics.push(ListOffsetsTopic {
                name: q.tp.topic().to_owned(),
                partitions: vec![part],
            }),
        }
    }
    let mut req = ListOffsetsRequest::for_consumer(isolation_level);
    req.topics = topics;
    req.timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    Ok(Transmit::new(route, &req, v, tag, timeout))
}

/// The answers of a response, by partition. A partition asked for and missing from the
/// answer is reported as `UNKNOWN_SERVER_ERROR` by [`answer_for`].
pub(crate) fn answers(resp: &ListOffsetsResponse) -> HashMap<(&str, i32), Answer> {
    let mut out = HashMap::new();
    for t in &resp.topics {
        for p in &t.partitions {
            out.insert(
                (t.name.as_str(), p.partition_index),
                Answer {
                    error: ErrorCode::from_code(p.error_code),
                    offset: p.offset,
                    timestamp: p.timestamp,
                    leader_epoch: LeaderEpoch(p.leader_epoch),
                },
            );
        }
    }
    out
}

/// The answer for `tp` in `answers`.
pub(crate) fn answer_for(answers: &HashMap<(&str, i32), Answer>, tp: &TopicPartition) -> Answer {
    answers
        .get(&(tp.topic(), tp.partition()))
        .copied()
        .unwrap_or(Answer {
            error: ErrorCode::UNKNOWN_SERVER_ERROR,
            offset: -1,
            timestamp: -1,
            leader_epoch: LeaderEpoch::UNKNOWN,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::{Lane, Owner};
    use crate::protocol::api::list_offsets::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    use crate::types::NodeId;
    use crate::types::{ApiVersion, RequestId};

    fn q(p: i32, ts: i64) -> Query {
        Query {
            tp: TopicPartition::new("t", p),
            timestamp: ts,
            leader_epoch: LeaderEpoch(3),
        }
    }

    fn route() -> Route {
        Route::node(NodeId(1), Lane::Control)
    }

    fn tag() -> Tag {
        Tag {
            owner: Owner::Lookups,
            id: RequestId(1),
        }
    }

    #[test]
    fn a_special_timestamp_needs_its_version() {
        let old = Versions::new([(2, 1, 6)]);
        let e = request(
            route(),
            &old,
            &[q(0, list_offsets::MAX_TIMESTAMP)],
            0,
            tag(),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(matches!(e, Unsendable::TooOld(m) if m.contains("v7")));
        let none = Versions::new([]);
        assert!(matches!(
            request(
                route(),
                &none,
                &[q(0, -1)],
                0,
                tag(),
                Duration::from_secs(1)
            ),
            Err(Unsendable::NoVersion(_))
        ));
        let t = request(
            route(),
            &Versions::new([(2, 1, 11)]),
            &[q(0, -1), q(1, -2)],
            1,
            tag(),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!((t.api_key, t.version), (2, ApiVersion(11)));
    }

    #[test]
    fn missing_answers_are_errors() {
        let resp = ListOffsetsResponse {
            throttle_time_ms: 0,
            topics: vec![ListOffsetsTopicResponse {
                name: "t".into(),
                partitions: vec![ListOffsetsPartitionResponse {
                    partition_index: 0,
                    error_code: 0,
                    timestamp: 5,
                    offset: 42,
                    leader_epoch: 3,
                }],
            }],
        };
        let a = answers(&resp);
        assert_eq!(answer_for(&a, &TopicPartition::new("t", 0)).offset, 42);
        assert_eq!(
            answer_for(&a, &TopicPartition::new("t", 1)).error,
            ErrorCode::UNKNOWN_SERVER_ERROR
        );
    }
}
