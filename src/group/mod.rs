//! The consumer group without I/O, as one component: [`Group`] owns the coordinator
//! lookup, the member (of the classic or the KIP-848 protocol: built, replaced and driven
//! here), the commits and offset fetches, and every event between them. Like the fetcher
//! it takes answers, commands and `now`, and says what to send, when to wake up, and what
//! the rest of the consumer must hear ([`GroupEvent`]); `src/io/` only carries that out.
//!
//! ```text
//!  command ─▶ Group ──▶ member (classic / KIP-848) ──MemberEvent──┐
//!  answer  ─▶   │   ──▶ coordinator (FindCoordinator)             ├─▶ GroupEvent ─▶ I/O loop
//!               │   ──▶ commits (OffsetCommit, OffsetFetch) ──────┘   (user thread, fetcher)
//!               └── identity, owned partitions: member ─▶ commits
//! ```
//!
//! A rebalance: the member emits a callback; it goes to the user thread as
//! [`GroupEvent::Callback`] (partitions being revoked are paused in the fetcher first,
//! [`GroupEvent::Pause`]); the listener runs there and the user thread answers with
//! [`GroupCommand::CallbackDone`], which carries the partitions it owns now; the group
//! hands them to the commits and, as [`GroupEvent::Assign`], to the fetcher, and only then
//! lets the member move on.
//!
//! Invariants:
//! 1. One member at a time, of the configured protocol; a member that stopped for good is
//!    replaced only by a new subscription.
//! 2. The commits speak for the member's current identity, and for an outsider once the
//!    member left without a new subscription.
//! 3. The fetcher and the commits learn the owned partitions from here only, and before
//!    the member hears that the callback that changed them returned.

pub mod assignor;
pub mod classic;
pub mod commit;
pub mod coordinator;
pub mod kip848;
pub mod member;
#[cfg(test)]
pub(crate) mod sim;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::backoff::{Backoff, Jitter};
use crate::cluster::{Cluster, Interest};
use crate::error::{Error, Result};
use crate::fetch::fetcher::SeekTo;
use crate::link::{Failure, Lane, Links, Owner, Peer, Route, Tag, Transmit};
use crate::types::{ApiVersion, CallId, Identity, PositionEpoch, TopicPartition};

use self::classic::{ClassicConfig, ClassicMember};
use self::commit::{CommitConfig, CommitEvent, Commits, Committed, CommittedResult, FoundPosition};
use self::coordinator::Coordinator;
use self::kip848::{Kip848Config, Kip848Member};
use self::member::{
    CallbackKind, CallbackToken, Member, MemberEvent, RebalancePhase, Subscription,
};

/// A partition the fetcher is to read, with its position epoch and where to start.
pub(crate) type Assigned = (TopicPartition, PositionEpoch, SeekTo);

/// Which protocol the member speaks, with what it needs from the configuration.
pub(crate) enum ProtocolConfig {
    /// The classic protocol; the assignors by name (`partition.assignment.strategy`).
    Classic {
        session_timeout: Duration,
        heartbeat_interval: Duration,
        assignors: Vec<String>,
    },
    /// KIP-848 (`group.protocol=consumer`).
    Kip848 {
        /// `group.remote.assignor`.
        remote_assignor: Option<String>,
        /// Random bytes that make member ids unique.
        member_id_seed: [u8; 16],
    },
}

/// What the group component needs from the configuration.
pub(crate) struct GroupConfig {
    pub group_id: String,
    pub protocol: ProtocolConfig,
    /// `group.instance.id` (static membership).
    pub instance_id: Option<String>,
    /// `max.poll.interval.ms` (also the rebalance timeout).
    pub max_poll_interval: Duration,
    /// `client.rack` (None when unset).
    pub client_rack: Option<String>,
    pub retry_backoff: Backoff,
    pub request_timeout: Duration,
    /// read_committed: offset fetches ask for stable offsets only (KIP-447).
    pub require_stable: bool,
}

/// What the rest of the consumer asks of the group.
pub(crate) enum GroupCommand {
    /// Join with this subscription (or change it).
    Subscribe(Subscription),
    /// The user thread ran callback `token` and now owns `assignment`.
    CallbackDone {
        token: CallbackToken,
        assignment: Vec<Assigned>,
    },
    /// The partitions were assigned by hand (or given up before a leave).
    Assign(Vec<Assigned>),
    /// Leave the group; [`GroupEvent::Left`] follows.
    Leave,
    /// Commit `offsets` (request `id`), due by `deadline`.
    Commit {
        id: CallId,
        offsets: std::collections::BTreeMap<TopicPartition, Committed>,
        deadline: Instant,
    },
    /// Read the committed offsets of `partitions` (request `id`), due by `deadline`.
    Committed {
        id: CallId,
        partitions: Vec<TopicPartition>,
        deadline: Instant,
    },
    /// The fetcher's partitions that wait for their committed offsets.
    FetchPositions(Vec<(TopicPartition, PositionEpoch)>),
}

/// What the group tells the rest of the consumer.
#[derive(Debug)]
pub(crate) enum GroupEvent {
    /// Run `kind` on the user thread for `partitions`; it will own `owned` afterwards.
    Callback {
        token: CallbackToken,
        kind: CallbackKind,
        partitions: Vec<TopicPartition>,
        owned: Vec<TopicPartition>,
    },
    /// Stop fetching these partitions: their revocation callback is coming.
    Pause(Vec<TopicPartition>),
    /// The fetcher's partitions are now these.
    Assign(Vec<Assigned>),
    /// Who commits speak for changed.
    Identity(Identity),
    /// A group error for `poll`; `fatal`: the member stopped and will not rejoin.
    Error { error: Error, fatal: bool },
    /// A leave asked for is done.
    Left,
    /// Commit `id` finished.
    Committed { id: CallId, result: Result<()> },
    /// The committed offsets asked for with request `id`.
    Offsets { id: CallId, result: CommittedResult },
    /// Committed offsets for the fetcher's partitions, and those whose lookup failed.
    Positions {
        found: Vec<FoundPosition>,
        failed: Vec<(TopicPartition, PositionEpoch)>,
    },
    /// A problem of the commits' for `poll`.
    CommitError(Error),
    /// The member's rebalance reached `phase` at `at` (for the metrics).
    Rebalance { phase: RebalancePhase, at: Instant },
}

/// The consumer group: coordinator, member and commits.
pub(crate) struct Group {
    cfg: GroupConfig,
    coordinator: Coordinator,
    commits: Commits,
    /// The member, once the application subscribed.
    member: Option<Box<dyn Member>>,
    /// What the member subscribes to (None once it was asked to leave).
    subscription: Option<Subscription>,
    new_jitter: Box<dyn FnMut() -> Box<dyn Jitter + Send> + Send>,
    events: VecDeque<GroupEvent>,
}

impl Group {
    /// A group with no member yet. `new_jitter` makes the jitter source of each
    /// component and member.
    pub fn new(
        cfg: GroupConfig,
        mut new_jitter: Box<dyn FnMut() -> Box<dyn Jitter + Send> + Send>,
    ) -> Group {
        let coordinator = Coordinator::new(
            &cfg.group_id,
            cfg.retry_backoff,
            cfg.request_timeout,
            new_jitter(),
        );
        let commits = Commits::new(
            CommitConfig {
                request_timeout: cfg.request_timeout,
                retry_backoff: cfg.retry_backoff,
                require_stable: cfg.require_stable,
            },
            new_jitter(),
        );
        Group {
            cfg,
            coordinator,
            commits,
            member: None,
            subscription: None,
            new_jitter,
            events: VecDeque::new(),
        }
    }

    // ----- commands ------------------------------------------------------------------

    /// Carries out a command of the user side's.
    pub fn handle_command(&mut self, command: GroupCommand, now: Instant, cluster: &mut Cluster) {
        match command {
            GroupCommand::Subscribe(sub) => self.subscribe(sub, now),
            GroupCommand::CallbackDone { token, assignment } => {
                self.assign(assignment);
                if let Some(m) = &mut self.member {
                    m.callback_done(token, now);
                }
            }
            GroupCommand::Assign(assignment) => self.assign(assignment),
            GroupCommand::Leave => match &mut self.member {
                Some(m) => {
                    m.leave(now);
                    self.subscription = None;
                }
                None => self.events.push_back(GroupEvent::Left),
            },
            GroupCommand::Commit {
                id,
                offsets,
                deadline,
            } => self.commits.commit(id, offsets, deadline),
            GroupCommand::Committed {
                id,
                partitions,
                deadline,
            } => self.commits.fetch(id, partitions, deadline),
            GroupCommand::FetchPositions(partitions) => self.commits.fetch_positions(partitions),
        }
        self.collect_events(now, cluster);
    }

    /// Starts (or changes) the membership; a member that stopped for good is replaced.
    fn subscribe(&mut self, sub: Subscription, now: Instant) {
        if self.member.as_ref().is_some_and(|m| m.is_fatal()) {
            self.member = None;
        }
        if self.member.is_none() {
            match self.new_member() {
                Ok(m) => self.member = Some(m),
                Err(error) => {
                    // Checked by Consumer::new; kept from panicking all the same.
                    self.events
                        .push_back(GroupEvent::Error { error, fatal: true });
                    return;
                }
            }
        }
        self.subscription = Some(sub.clone());
        if let Some(m) = &mut self.member {
            m.user_polled(now);
            m.subscribe(sub, now);
        }
    }

    /// A member of the configured protocol.
    fn new_member(&mut self) -> Result<Box<dyn Member>> {
        let cfg = &self.cfg;
        Ok(match &cfg.protocol {
            ProtocolConfig::Classic {
                session_timeout,
                heartbeat_interval,
                assignors,
            } => Box::new(ClassicMember::new(
                ClassicConfig {
                    instance_id: cfg.instance_id.clone(),
                    session_timeout: *session_timeout,
                    rebalance_timeout: cfg.max_poll_interval,
                    heartbeat_interval: *heartbeat_interval,
                    max_poll_interval: cfg.max_poll_interval,
                    assignors: assignor::by_names(assignors)?,
                    client_rack: cfg.client_rack.clone(),
                    retry_backoff: cfg.retry_backoff,
                    request_timeout: cfg.request_timeout,
                },
                (self.new_jitter)(),
            )),
            ProtocolConfig::Kip848 {
                remote_assignor,
                member_id_seed,
            } => Box::new(Kip848Member::new(
                Kip848Config {
                    instance_id: cfg.instance_id.clone(),
                    max_poll_interval: cfg.max_poll_interval,
                    remote_assignor: remote_assignor.clone(),
                    client_rack: cfg.client_rack.clone(),
                    retry_backoff: cfg.retry_backoff,
                    request_timeout: cfg.request_timeout,
                    member_id_seed: *member_id_seed,
                },
                (self.new_jitter)(),
            )),
        })
    }

    /// The consumer owns `assignment` now: the commits and the fetcher learn it.
    fn assign(&mut self, assignment: Vec<Assigned>) {
        let owned: Vec<TopicPartition> = assignment.iter().map(|(tp, ..)| tp.clone()).collect();
        self.commits.set_assignment(&owned);
        self.events.push_back(GroupEvent::Assign(assignment));
    }

    /// The subscribed topics among `known` (the cluster's topic names).
    pub fn subscribed_topics<'a>(&self, known: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        self.subscription
            .as_ref()
            .map(|s| s.topics(known).into_iter().collect())
            .unwrap_or_default()
    }

    // ----- driving ---------------------------------------------------------------------

    /// Starts a round of `poll_transmit` calls (the coordinator lookup goes at most once
    /// a round).
    pub fn begin_round(&mut self) {
        self.coordinator.begin_round();
    }

    /// The next request to send: the member's first, then the commits', then a
    /// coordinator lookup.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) -> Option<Transmit> {
        let mut t = None;
        if let Some(m) = &mut self.member {
            t = m.poll_transmit(now, links, &mut self.coordinator, cluster);
        }
        if t.is_none() {
            t = self
                .commits
                .poll_transmit(now, links, &mut self.coordinator);
        }
        if t.is_none() {
            t = self.coordinator.poll_transmit(now, links, cluster);
        }
        self.collect_events(now, cluster);
        t
    }

    /// Applies the answer to a request of the group's.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_response(
        &mut self,
        tag: Tag,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        cluster: &mut Cluster,
    ) {
        match tag.owner {
            Owner::Coordinator => self
                .coordinator
                .handle_response(tag.id, version, body, now, links, cluster),
            Owner::Member => {
                if let Some(m) = &mut self.member {
                    m.handle_response(
                        tag.id,
                        version,
                        body,
                        now,
                        links,
                        &mut self.coordinator,
                        cluster,
                    );
                }
            }
            Owner::Commits => self.commits.handle_response(
                tag.id,
                version,
                body,
                now,
                links,
                &mut self.coordinator,
            ),
            _ => {}
        }
        self.collect_events(now, cluster);
    }

    /// A request of the group's got no answer.
    pub fn handle_failure(
        &mut self,
        tag: Tag,
        failure: &Failure,
        now: Instant,
        cluster: &mut Cluster,
    ) {
        match tag.owner {
            Owner::Coordinator => self.coordinator.handle_failure(tag.id, failure, now),
            Owner::Member => {
                if let Some(m) = &mut self.member {
                    m.handle_failure(tag.id, failure, now, &mut self.coordinator);
                }
            }
            Owner::Commits => {
                self.commits
                    .handle_failure(tag.id, failure, now, &mut self.coordinator)
            }
            _ => {}
        }
        self.collect_events(now, cluster);
    }

    /// A link could not be opened: if it was to the coordinator, look for it again (it may
    /// have moved), as a request that fails on that link does.
    pub fn link_failed(&mut self, route: Route, why: &str, now: Instant) {
        if let (Peer::Node(node), Lane::Group | Lane::Join) = (route.peer, route.lane) {
            self.coordinator.link_failed(node, why, now);
        }
    }

    /// Time passed; `last_poll` is when the application last polled.
    pub fn handle_timeout(&mut self, now: Instant, last_poll: Instant, cluster: &mut Cluster) {
        self.commits.handle_timeout(now, &self.coordinator);
        if let Some(m) = &mut self.member {
            m.user_polled(last_poll);
            m.handle_timeout(now, cluster);
        }
        self.collect_events(now, cluster);
    }

    /// The next instant the group has something to do.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        [
            self.coordinator.poll_timeout(now),
            self.commits.poll_timeout(now),
            self.member.as_ref().and_then(|m| m.poll_timeout(now)),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next event for the rest of the consumer.
    pub fn poll_event(&mut self) -> Option<GroupEvent> {
        self.events.pop_front()
    }

    // ----- between the parts -------------------------------------------------------------

    /// Turns what the member and the commits said into the group's events, and carries out
    /// what concerns the group alone (the commits' identity).
    fn collect_events(&mut self, now: Instant, cluster: &mut Cluster) {
        while let Some(e) = self.member.as_mut().and_then(|m| m.poll_event()) {
            let event = match e {
                MemberEvent::Callback {
                    token,
                    kind,
                    partitions,
                    owned,
                } => {
                    if kind == CallbackKind::Revoked && !partitions.is_empty() {
                        self.events.push_back(GroupEvent::Pause(partitions.clone()));
                    }
                    GroupEvent::Callback {
                        token,
                        kind,
                        partitions,
                        owned,
                    }
                }
                MemberEvent::Identity(id) => {
                    self.commits.set_identity(id.clone());
                    GroupEvent::Identity(id)
                }
                MemberEvent::Error { error, fatal } => GroupEvent::Error { error, fatal },
                MemberEvent::Rebalance(phase) => GroupEvent::Rebalance { phase, at: now },
                MemberEvent::Left => {
                    if self.subscription.is_none() {
                        // Out of the group for good: the cluster stops tracking its topics.
                        cluster.clear_interest(Interest::Group);
                        cluster.set_all_topics(false);
                        self.commits.set_identity(Identity::Outsider);
                    }
                    GroupEvent::Left
                }
            };
            self.events.push_back(event);
        }
        while let Some(e) = self.commits.poll_event() {
            self.events.push_back(match e {
                CommitEvent::Committed { id, result } => GroupEvent::Committed { id, result },
                CommitEvent::Offsets { id, result } => GroupEvent::Offsets { id, result },
                CommitEvent::Positions { found, failed } => GroupEvent::Positions { found, failed },
                CommitEvent::Error(e) => GroupEvent::CommitError(e),
            });
        }
    }
}
