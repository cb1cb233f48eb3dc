//! The classic group protocol's client-side assignors: the group leader (a member) computes
//! everyone's partitions from the subscriptions JoinGroup handed it. Pure functions of their
//! input: no clock, no I/O, and no hash-map iteration order in any result.
//!
//! - [`Range`] (`range`) and [`RoundRobin`] (`roundrobin`) give exactly the assignment of
//!   kafka-clients' `RangeAssignor` and `RoundRobinAssignor` (4.x) for the same input,
//!   including the member order (static members first, by `group.instance.id`, then dynamic
//!   ones by member id; strings compared as Java does, by UTF-16 code units) and, for range,
//!   the rack-aware mode of KIP-881.
//! - [`CooperativeSticky`] (`cooperative-sticky`) computes kafka-clients'
//!   `CooperativeStickyAssignor` target assignment, rack-aware mode included, and leaves out
//!   of it what must be revoked first, more strictly than Java (see its module, and the
//!   `sticky` module for the inputs Java mishandles).
//!
//! Rack-aware assignment (KIP-881): the leader hands each partition's replica racks (the
//! brokers' `broker.rack`, from the metadata) and each member's `client.rack` (from its
//! subscription); `range` and `cooperative-sticky` then prefer giving a member partitions
//! with a replica on its rack, without giving up balance, exactly when and as Java's do
//! (both sides must name racks, they must meet, and not every partition may have replicas
//! on every rack; otherwise they assign as without racks). `roundrobin` ignores racks, as
//! Java's does.
//!
//! What every assignor here does with its input, as Java's
//! `AbstractPartitionAssignor.assign(Cluster, GroupSubscription)` does:
//! - Only topics that some member subscribes to and that exist with at least one partition
//!   are assigned; other entries of `topics` are ignored, and so are subscriptions to topics
//!   that do not exist (yet).
//! - Every member appears in the result, possibly with no partitions; a member id given
//!   twice keeps its last subscription; a topic listed twice by one member counts once.
//! - A member's partitions are sorted by topic and partition.
//! - Kafka numbers a topic's partitions `0..n`; the assignors assume it (as Java's do).
//!
//! Invariants (every assignor, checked by the tests):
//! 1. A partition goes to at most one member, and only to a member subscribed to its topic.
//! 2. The eager assignors (range, roundrobin) assign every partition of a subscribed topic.
//! 3. The result depends only on the input's content, not on the order of `members`
//!    (member ids being distinct) or of a member's `topics` and `owned_partitions`; except
//!    that cooperative-sticky, like Java's, takes the order of members whose ids fall in
//!    the same bucket of Java's `HashMap` from `members` (the JoinGroup answer's order).
//! 4. (cooperative-sticky) A member gets a partition that another member claims to own
//!    only if it is the partition's valid previous owner: a partition that moves is revoked
//!    before it is handed over.

// The group membership that calls the assignors comes next; until then only the tests use
// them.
#![cfg_attr(not(feature = "__testing"), allow(dead_code))]

mod cooperative_sticky;
mod java_order;
mod range;
mod round_robin;
mod sticky;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::types::TopicPartition;

pub use cooperative_sticky::CooperativeSticky;
pub use range::Range;
pub use round_robin::RoundRobin;

/// Which rebalance protocols an assignor supports (Java `RebalanceProtocol`). The order is
/// Java's: `Cooperative` is the higher one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RebalanceProtocol {
    /// Every member gives up all its partitions before the group rebalances.
    Eager,
    /// Members keep their partitions through a rebalance and give up only the ones that move.
    Cooperative,
}

/// One member's subscription, as the leader gets it from JoinGroup (decoded from the
/// embedded ConsumerProtocolSubscription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSubscription {
    /// The member id the coordinator gave the member.
    pub member_id: String,
    /// Its `group.instance.id`, for a static member.
    pub group_instance_id: Option<String>,
    /// The topics it subscribes to.
    pub topics: Vec<String>,
    /// The partitions it owns now (it keeps them through a cooperative rebalance).
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation in which it got `owned_partitions` (subscription v2+); -1 when unknown.
    pub generation: i32,
    /// Its `client.rack`, if set.
    pub rack: Option<String>,
    /// The assignor's user data, if any.
    pub user_data: Option<Vec<u8>>,
}

impl MemberSubscription {
    /// A dynamic member `member_id` subscribing to `topics`, owning nothing, with an unknown
    /// generation, no rack and no user data.
    pub fn new(member_id: &str, topics: &[&str]) -> MemberSubscription {
        MemberSubscription {
            member_id: member_id.to_owned(),
            group_instance_id: None,
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            owned_partitions: Vec::new(),
            generation: -1,
            rack: None,
            user_data: None,
        }
    }

    /// Its rack, unless unset or empty (Java ignores an empty rack).
    fn rack_id(&self) -> Option<&str> {
        self.rack.as_deref().filter(|r| !r.is_empty())
    }
}

/// One partition of a subscribed topic, as metadata tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// The partition number.
    pub partition: i32,
    /// The racks of its replicas (replicas without a rack are left out; repeats are fine).
    pub replica_racks: Vec<String>,
}

impl PartitionInfo {
    /// Partitions `0..count`, with no rack information.
    pub fn without_racks(count: i32) -> Vec<PartitionInfo> {
        (0..count)
            .map(|partition| PartitionInfo {
                partition,
                replica_racks: Vec::new(),
            })
            .collect()
    }
}

/// A client-side assignor of the classic group protocol.
pub trait Assignor: Send {
    /// Its protocol name: "range", "roundrobin", "cooperative-sticky".
    fn name(&self) -> &'static str;

    /// The rebalance protocols it supports.
    fn protocols(&self) -> &'static [RebalanceProtocol];

    /// The user data this member puts into its subscription; `generation` is the
    /// generation of the member's last assignment (-1 if none).
    fn subscription_user_data(&self, generation: i32) -> Option<Vec<u8>> {
        let _ = generation;
        None
    }

    /// The assignment: every member id of `members` maps to its partitions (possibly
    /// none). `topics` holds the subscribed topics that exist, with their partitions.
    fn assign(
        &self,
        topics: &BTreeMap<String, Vec<PartitionInfo>>,
        members: &[MemberSubscription],
    ) -> BTreeMap<String, Vec<TopicPartition>>;
}

/// The assignor named `name` (the Java class names
/// `org.apache.kafka.clients.consumer.RangeAssignor` etc. are accepted too); `None` for
/// unknown names.
pub fn assignor_by_name(name: &str) -> Option<Box<dyn Assignor>> {
    const PACKAGE: &str = "org.apache.kafka.clients.consumer.";
    let name = name.trim();
    let short = match name.strip_prefix(PACKAGE) {
        Some("RangeAssignor") => "range",
        Some("RoundRobinAssignor") => "roundrobin",
        Some("CooperativeStickyAssignor") => "cooperative-sticky",
        Some(_) => return None,
        None => name,
    };
    match short {
        "range" => Some(Box::new(Range)),
        "roundrobin" => Some(Box::new(RoundRobin)),
        "cooperative-sticky" => Some(Box::new(CooperativeSticky)),
        _ => None,
    }
}

/// The assignors named by `names` (`partition.assignment.strategy`), in order; an error
/// for an empty list or for a name [`assignor_by_name`] does not know.
pub fn by_names(names: &[String]) -> Result<Vec<Box<dyn Assignor>>> {
    if names.is_empty() {
        return Err(Error::config(
            "partition.assignment.strategy is empty: name at least one of range, roundrobin, cooperative-sticky",
        ));
    }
    names
        .iter()
        .map(|name| {
            assignor_by_name(name).ok_or_else(|| {
                Error::config(format!(
                    "partition.assignment.strategy: unknown assignor `{name}` (known: range, roundrobin, cooperative-sticky)"
                ))
            })
        })
        .collect()
}

/// Java's choice of rebalance protocol for a preference list: the highest protocol every
/// configured assignor supports (Cooperative > Eager). Every assignor here supports
/// Eager, which is also the answer for an empty list.
pub fn rebalance_protocol(assignors: &[Box<dyn Assignor>]) -> RebalanceProtocol {
    let all_support = |p: RebalanceProtocol| assignors.iter().all(|a| a.protocols().contains(&p));
    if !assignors.is_empty() && all_support(RebalanceProtocol::Cooperative) {
        RebalanceProtocol::Cooperative
    } else {
        RebalanceProtocol::Eager
    }
}

/// Java's `String.compareTo`: lexicographic over UTF-16 code units (differs from Rust's
/// `str` order only between characters above U+FFFF and U+E000..=U+FFFF).
pub(super) fn java_cmp(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(b);
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Java's `AbstractPartitionAssignor.MemberInfo` order: static members first, by
/// `group.instance.id`, then dynamic members by member id.
fn member_info_cmp(a: &MemberSubscription, b: &MemberSubscription) -> Ordering {
    let by_instance = match (&a.group_instance_id, &b.group_instance_id) {
        (Some(x), Some(y)) => java_cmp(x, y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => java_cmp(&a.member_id, &b.member_id),
    };
    // Equal instance ids (the coordinator never allows them): by member id, to stay
    // independent of the input order.
    by_instance.then_with(|| java_cmp(&a.member_id, &b.member_id))
}

/// A rack, as its index among the racks the input names (members' and replicas'), sorted.
type Rack = usize;

/// One member as the assignors see it.
struct Member<'a> {
    sub: &'a MemberSubscription,
    /// Its subscribed topics that are assigned (indexes into [`Input::topics`]).
    topics: BTreeSet<usize>,
    /// Every topic it subscribes to, existing or not.
    all_topics: BTreeSet<&'a str>,
    /// Its rack (unset when empty, as Java ignores an empty `client.rack`).
    rack: Option<Rack>,
    /// Where its (first) subscription stood in the input: Java's `HashMap` of the members
    /// keeps this order among member ids of the same hash bucket.
    position: usize,
}

/// A topic as the assignors see it.
struct Topic<'a> {
    name: Arc<str>,
    /// Its partitions, sorted by number.
    partitions: Vec<&'a PartitionInfo>,
    /// The racks of each partition's replicas (by position in `partitions`), sorted,
    /// without repeats.
    replica_racks: Vec<Box<[Rack]>>,
}

/// The assignors' common view of their input, prepared as Java's
/// `AbstractPartitionAssignor.assign(Cluster, GroupSubscription)` prepares it.
struct Input<'a> {
    /// One per member id (the last subscription of a repeated id), sorted by member id.
    members: Vec<Member<'a>>,
    /// The topics some member subscribes to that exist with at least one partition,
    /// sorted by name (Java order).
    topics: Vec<Topic<'a>>,
}

impl<'a> Input<'a> {
    fn new(
        topics: &'a BTreeMap<String, Vec<PartitionInfo>>,
        members: &'a [MemberSubscription],
    ) -> Input<'a> {
        let mut by_id: BTreeMap<&str, &MemberSubscription> = BTreeMap::new();
        for m in members {
            by_id.insert(&m.member_id, m);
        }
        let mut subs: Vec<&MemberSubscription> = by_id.into_values().collect();
        subs.sort_by(|a, b| java_cmp(&a.member_id, &b.member_id));

        let subscribed: BTreeSet<&str> = subs
            .iter()
            .flat_map(|m| m.topics.iter().map(String::as_str))
            .collect();
        let mut kept: Vec<Topic> = subscribed
            .into_iter()
            .filter_map(|name| {
                let infos = topics.get(name).filter(|p| !p.is_empty())?;
                let mut partitions: Vec<&PartitionInfo> = infos.iter().collect();
                partitions.sort_by_key(|p| p.partition);
                Some(Topic {
                    name: Arc::from(name),
                    partitions,
                    replica_racks: Vec::new(),
                })
            })
            .collect();
        kept.sort_by(|a, b| java_cmp(&a.name, &b.name));

        let racks: Vec<&str> = subs
            .iter()
            .filter_map(|m| m.rack_id())
            .chain(kept.iter().flat_map(|t| {
                t.partitions
                    .iter()
                    .flat_map(|p| p.replica_racks.iter().map(String::as_str))
            }))
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .collect();
        let rack_id = |r: &str| racks.binary_search(&r).ok();
        for t in &mut kept {
            t.replica_racks = t
                .partitions
                .iter()
                .map(|p| {
                    let mut ids: Vec<Rack> =
                        p.replica_racks.iter().filter_map(|r| rack_id(r)).collect();
                    ids.sort_unstable();
                    ids.dedup();
                    ids.into_boxed_slice()
                })
                .collect();
        }
        let index: BTreeMap<&str, usize> = kept
            .iter()
            .enumerate()
            .map(|(i, t)| (&*t.name, i))
            .collect();
        let mut positions: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, m) in members.iter().enumerate() {
            positions.entry(&m.member_id).or_insert(i);
        }
        let members = subs
            .into_iter()
            .map(|sub| Member {
                sub,
                topics: sub
                    .topics
                    .iter()
                    .filter_map(|t| index.get(t.as_str()).copied())
                    .collect(),
                all_topics: sub.topics.iter().map(String::as_str).collect(),
                rack: sub.rack_id().and_then(rack_id),
                position: positions.get(sub.member_id.as_str()).copied().unwrap_or(0),
            })
            .collect();
        Input {
            members,
            topics: kept,
        }
    }

    /// The index of topic `name`, if it is assigned.
    fn topic_index(&self, name: &str) -> Option<usize> {
        self.topics
            .binary_search_by(|t| java_cmp(&t.name, name))
            .ok()
    }

    /// Whether topic `topic` has partition `partition`.
    fn has_partition(&self, topic: usize, partition: i32) -> bool {
        self.partition_index(topic, partition).is_some()
    }

    /// The member indexes in the order Java's `HashMap` of the subscriptions iterates
    /// them, built as the Java leader builds it: member ids put in the order the input
    /// (the JoinGroup answer) lists them.
    fn java_map_order(&self) -> Vec<usize> {
        let mut by_position: Vec<usize> = (0..self.members.len()).collect();
        by_position.sort_by_key(|&m| self.members[m].position);
        java_order::HashOrder::of(by_position.into_iter().map(|m| {
            let hash = java_order::string_hash(&self.members[m].sub.member_id);
            (m as u64, hash)
        }))
        .into_iter()
        .map(|m| m as usize)
        .collect()
    }

    /// The index of partition `partition` in topic `topic`'s partitions.
    fn partition_index(&self, topic: usize, partition: i32) -> Option<usize> {
        let parts = &self.topics[topic].partitions;
        match usize::try_from(partition).ok().and_then(|i| parts.get(i)) {
            Some(p) if p.partition == partition => usize::try_from(partition).ok(),
            _ => parts.binary_search_by_key(&partition, |p| p.partition).ok(),
        }
    }

    /// The member indexes in Java's `MemberInfo` order.
    fn member_info_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.members.len()).collect();
        order.sort_by(|&a, &b| member_info_cmp(self.members[a].sub, self.members[b].sub));
        order
    }

    /// The result: each member's partitions (by member index, as `(topic index,
    /// partition)`), keyed by member id and sorted.
    fn output(&self, per_member: Vec<Vec<(usize, i32)>>) -> BTreeMap<String, Vec<TopicPartition>> {
        debug_assert_eq!(per_member.len(), self.members.len());
        self.members
            .iter()
            .zip(per_member)
            .map(|(m, parts)| {
                let mut tps: Vec<TopicPartition> = parts
                    .into_iter()
                    .map(|(t, p)| TopicPartition::new(Arc::clone(&self.topics[t].name), p))
                    .collect();
                tps.sort();
                (m.sub.member_id.clone(), tps)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
