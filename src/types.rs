//! Small types shared by every layer: the topic-partition, where to start a partition
//! without a position ([`OffsetReset`], set by the configuration and followed by the
//! fetcher), newtypes for the integers and strings that mean different things (a broker's
//! node id, a partition's leader epoch, the epoch of a position, a request's correlation
//! id on the wire and its id inside the client, the version it is sent at, an application
//! call waiting for an answer, how much metadata has been applied, a classic group's
//! generation, a KIP-848 member epoch, a member id), and who commits speak for
//! ([`Identity`]). Mixing them up is a compile error.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// A topic name and a partition number.
#[derive(Clone, Eq)]
pub struct TopicPartition {
    topic: Arc<str>,
    partition: i32,
}

// By topic name, then partition: as derived, but two partitions that share their topic's
// name (one allocation, as the partitions the consumer keeps do) compare without reading it.
impl PartialEq for TopicPartition {
    fn eq(&self, other: &TopicPartition) -> bool {
        self.partition == other.partition
            && (Arc::ptr_eq(&self.topic, &other.topic) || self.topic == other.topic)
    }
}

impl std::hash::Hash for TopicPartition {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As derived: equal partitions hash alike whether or not they share the name.
        self.topic.hash(state);
        self.partition.hash(state);
    }
}

impl Ord for TopicPartition {
    fn cmp(&self, other: &TopicPartition) -> Ordering {
        if Arc::ptr_eq(&self.topic, &other.topic) {
            self.partition.cmp(&other.partition)
        } else {
            (&self.topic, self.partition).cmp(&(&other.topic, other.partition))
        }
    }
}

impl PartialOrd for TopicPartition {
    fn partial_cmp(&self, other: &TopicPartition) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl TopicPartition {
    /// A topic-partition.
    ///
    /// ```
    /// let tp = kafka_consumer::TopicPartition::new("orders", 3);
    /// assert_eq!(tp.to_string(), "orders-3");
    /// ```
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition number.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub(crate) fn topic_arc(&self) -> &Arc<str> {
        &self.topic
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where to start reading a partition that has no valid position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OffsetReset {
    /// The oldest offset still in the log (`earliest`; librdkafka also `smallest`, `beginning`).
    Earliest,
    /// The end of the log: only records written from now on (`latest`; also `largest`, `end`).
    Latest,
    /// No automatic reset: `poll` returns an error naming the partition (`none`; also `error`).
    None,
}

/// A broker's node id, as Metadata lists it. Never negative for a real broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct NodeId(pub i32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// A partition's leader epoch (KIP-320): bumped by every leader change. `-1` means unknown,
/// and as a request field it asks the broker to skip the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LeaderEpoch(pub i32);

impl LeaderEpoch {
    /// Unknown (the wire's -1).
    pub const UNKNOWN: LeaderEpoch = LeaderEpoch(-1);

    /// The epoch, if known.
    pub fn known(self) -> Option<i32> {
        (self.0 >= 0).then_some(self.0)
    }
}

/// The epoch of a partition's position on the user side: bumped by every seek, resume and
/// (re)assignment. Data fetched under an older epoch is stale and never delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct PositionEpoch(pub u64);

/// The correlation id of one request on one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CorrelationId(pub i32);

impl CorrelationId {
    /// The id after this one: positive, wrapping to 1.
    pub fn next(self) -> CorrelationId {
        CorrelationId(self.0.wrapping_add(1).max(1))
    }
}

/// The version of one API that a request is sent at and its answer is decoded at: the
/// highest both the link's broker and this client speak (negotiated from ApiVersions). The
/// wire codecs in `protocol` take the bare `i16` ([`ApiVersion::get`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ApiVersion(pub i16);

impl ApiVersion {
    /// The number, for the wire codecs.
    pub fn get(self) -> i16 {
        self.0
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

/// Names one request inside the client, chosen by the component that sends it (unique per
/// component): the answer or the failure comes back to that component under this id. Not
/// the wire's [`CorrelationId`], which the connection assigns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct RequestId(pub u64);

impl RequestId {
    /// Hands out this id and moves `self` on to the next one.
    pub fn take_next(&mut self) -> RequestId {
        let id = *self;
        self.0 += 1;
        id
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Names one call of the application that waits for the I/O thread's answer (a commit, a
/// committed-offsets or offsets lookup, `partitions_for`): chosen by the user side, unique
/// per consumer, and carried back with the answer. One call may take several requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct CallId(pub u64);

impl CallId {
    /// Hands out this id and moves `self` on to the next one.
    pub fn take_next(&mut self) -> CallId {
        let id = *self;
        self.0 += 1;
        id
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// How many Metadata answers the client has applied (the cluster's view, bumped by each):
/// a component that needs newer metadata than it saw waits for a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct MetadataGeneration(pub u64);

/// A classic group's generation (JoinGroup's `GenerationId`): bumped by the coordinator at
/// every rebalance. [`GenerationId::UNKNOWN`] (-1) while the member is not in a generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct GenerationId(pub i32);

impl GenerationId {
    /// Not in a generation (the wire's -1).
    pub const UNKNOWN: GenerationId = GenerationId(-1);

    /// Whether it names a generation.
    pub fn is_known(self) -> bool {
        self != GenerationId::UNKNOWN
    }
}

impl fmt::Display for GenerationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A KIP-848 member epoch (ConsumerGroupHeartbeat's `MemberEpoch`): positive once the
/// coordinator counts the member in the group; [`MemberEpoch::JOIN`] (0) asks to join,
/// [`MemberEpoch::LEAVE`] (-1) and [`MemberEpoch::LEAVE_STATIC`] (-2) leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct MemberEpoch(pub i32);

impl MemberEpoch {
    /// Joins the group (or rejoins after a fencing).
    pub const JOIN: MemberEpoch = MemberEpoch(0);
    /// Leaves the group.
    pub const LEAVE: MemberEpoch = MemberEpoch(-1);
    /// A static member leaves, and its instance id keeps its assignment for the session
    /// timeout.
    pub const LEAVE_STATIC: MemberEpoch = MemberEpoch(-2);

    /// Whether the coordinator counts the member in the group at this epoch.
    pub fn in_group(self) -> bool {
        self.0 > 0
    }
}

impl fmt::Display for MemberEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A group member's id: the coordinator's (classic, and KIP-848 before v1) or one the
/// member made itself (KIP-848 v1, KIP-1082). Empty while the member has none.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct MemberId(String);

impl MemberId {
    /// The id `id` (empty: none).
    pub fn new(id: impl Into<String>) -> MemberId {
        MemberId(id.into())
    }

    /// No id yet.
    pub fn none() -> MemberId {
        MemberId(String::new())
    }

    /// Whether the member has no id.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The id as the wire carries it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq<str> for MemberId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for MemberId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// Who commits (and offset fetches) speak for: the consumer outside any group, or a member
/// of a classic or of a KIP-848 group. The group member hands it to the commit component
/// (and the user side, for `group_metadata`) whenever it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// Not a member (manual assignment, or before joining): commits go as generation -1
    /// with no member id, which the broker accepts while the group has no members.
    Outsider,
    /// A member of a classic group: its generation ([`GenerationId::UNKNOWN`] between
    /// generations) and member id.
    Classic {
        generation: GenerationId,
        member_id: MemberId,
        instance_id: Option<String>,
    },
    /// A member of a KIP-848 group: its epoch (-1 while it has none), which commits carry
    /// where classic ones carry the generation, and its member id, which offset fetches
    /// carry too; STALE_MEMBER_EPOCH means the epoch moved on.
    Kip848 {
        epoch: MemberEpoch,
        member_id: MemberId,
        instance_id: Option<String>,
    },
}

impl Identity {
    /// A classic member's identity. One with no generation, no member id and no instance id
    /// speaks for nobody: that is the outsider.
    pub fn classic(
        generation: GenerationId,
        member_id: MemberId,
        instance_id: Option<String>,
    ) -> Identity {
        if !generation.is_known() && member_id.is_empty() && instance_id.is_none() {
            Identity::Outsider
        } else {
            Identity::Classic {
                generation,
                member_id,
                instance_id,
            }
        }
    }

    /// What OffsetCommit's `GenerationIdOrMemberEpoch` carries: the generation, the member
    /// epoch, or -1.
    pub fn generation_or_epoch(&self) -> i32 {
        match self {
            Identity::Outsider => -1,
            Identity::Classic { generation, .. } => generation.0,
            Identity::Kip848 { epoch, .. } => epoch.0,
        }
    }

    /// Whether it speaks for a member of a generation (or with an epoch): commits are then
    /// checked against the group's current one.
    pub fn in_group(&self) -> bool {
        self.generation_or_epoch() >= 0
    }

    /// The member id (empty for the outsider).
    pub fn member_id(&self) -> &str {
        match self {
            Identity::Outsider => "",
            Identity::Classic { member_id, .. } | Identity::Kip848 { member_id, .. } => {
                member_id.as_str()
            }
        }
    }

    /// `group.instance.id` (static membership).
    pub fn instance_id(&self) -> Option<&str> {
        match self {
            Identity::Outsider => None,
            Identity::Classic { instance_id, .. } | Identity::Kip848 { instance_id, .. } => {
                instance_id.as_deref()
            }
        }
    }

    /// Whether it is a KIP-848 member's.
    pub fn is_kip848(&self) -> bool {
        matches!(self, Identity::Kip848 { .. })
    }

    /// A KIP-848 member in the group: its member id and epoch, which offset fetches carry.
    pub fn kip848_member(&self) -> Option<(&MemberId, MemberEpoch)> {
        match self {
            Identity::Kip848 {
                epoch, member_id, ..
            } if epoch.0 >= 0 && !member_id.is_empty() => Some((member_id, *epoch)),
            _ => None,
        }
    }

    /// The generation or epoch as error messages name it.
    pub fn describe_epoch(&self) -> String {
        match self {
            Identity::Kip848 { epoch, .. } => format!("member epoch {epoch}"),
            _ => format!("generation {}", self.generation_or_epoch()),
        }
    }
}

#[cfg(test)]
mod member_epoch_tests {
    use super::MemberEpoch;
    use crate::protocol::api::consumer_group_heartbeat as cghb;

    #[test]
    fn the_member_epochs_with_a_meaning_are_the_protocols() {
        assert_eq!(MemberEpoch::JOIN.0, cghb::JOIN_GROUP_MEMBER_EPOCH);
        assert_eq!(MemberEpoch::LEAVE.0, cghb::LEAVE_GROUP_MEMBER_EPOCH);
        assert_eq!(
            MemberEpoch::LEAVE_STATIC.0,
            cghb::LEAVE_GROUP_STATIC_MEMBER_EPOCH
        );
    }
}
