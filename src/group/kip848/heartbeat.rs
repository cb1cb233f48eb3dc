//! The KIP-848 member's heartbeats (Java's `ConsumerHeartbeatRequestManager`): when they
//! go, what a full or a partial one carries, and what their answers mean. [`Heartbeats`]
//! keeps the schedule and the one in flight; [`SentFields`] remembers what the last ones
//! carried and builds the next request from the member's [`Fields`] (protocol reference
//! 1.5, 1.6): a field that did not change since is sent as null, except in a full request
//! (joining, and the first one after any error or lost answer), which carries everything.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::reconcile::{sanitize, to_wire, ById};
use super::{Kip848Member, State};
use crate::backoff::{Backoff, Jitter, Retry};
use crate::error::Error;
use crate::group::coordinator::Coordinator;
use crate::group::member::{member_transmit, millis, Subscription};
use crate::link::{Route, Transmit};
use crate::protocol::api::consumer_group_heartbeat::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
};
use crate::protocol::error_code::ErrorCode;
use crate::types::{ApiVersion, MemberEpoch, MemberId, RequestId};

/// How often UNRELEASED_INSTANCE_ID is retried before it is fatal: right after a static
/// member's restart the broker may still hold the old incarnation for a moment.
const UNRELEASED_INSTANCE_RETRIES: u32 = 3;

/// The heartbeat interval until the coordinator names one (the broker's default).
const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);

/// What the member is, as a heartbeat reports it (whatever the last ones said).
pub(super) struct Fields<'a> {
    pub group_id: &'a str,
    /// Empty at v0 until the coordinator assigned one.
    pub member_id: &'a str,
    pub epoch: MemberEpoch,
    pub instance_id: Option<&'a str>,
    pub rack: Option<&'a str>,
    /// `max.poll.interval.ms`.
    pub rebalance_timeout: Duration,
    pub subscription: Option<&'a Subscription>,
    pub assignor: Option<&'a str>,
    /// Joining (epoch 0): everything goes, with no owned partitions.
    pub joining: bool,
    /// What the member owns, with what a running reconciliation adds, and the version of
    /// the target it came from.
    pub owned: (u64, ById),
}

/// What the last heartbeats carried: a field equal to it is sent as null (unchanged).
/// Cleared after every error and lost answer, so the next heartbeat is full.
#[derive(Debug, Default)]
pub(super) struct SentFields {
    rebalance_timeout: bool,
    rack: bool,
    topic_names: Option<Vec<String>>,
    topic_regex: Option<String>,
    assignor: bool,
    /// The owned partitions reported, and the version of the assignment they came from
    /// (a new version with the same partitions is reported again).
    owned: Option<(u64, ById)>,
}

impl SentFields {
    /// The heartbeat to send now at version `v` for a member that is `f`; records what it
    /// carries.
    pub fn request(&mut self, v: ApiVersion, f: Fields<'_>) -> ConsumerGroupHeartbeatRequest {
        let joining = f.joining;
        let mut req = ConsumerGroupHeartbeatRequest {
            group_id: f.group_id.to_owned(),
            member_id: f.member_id.to_owned(),
            member_epoch: f.epoch.0,
            instance_id: f.instance_id.map(str::to_owned),
            rack_id: None,
            rebalance_timeout_ms: -1,
            subscribed_topic_names: None,
            subscribed_topic_regex: None,
            server_assignor: None,
            topic_partitions: None,
        };
        if joining || !self.rebalance_timeout {
            req.rebalance_timeout_ms = millis(f.rebalance_timeout);
            self.rebalance_timeout = true;
        }
        if let Some(rack) = f.rack {
            if joining || !self.rack {
                req.rack_id = Some(rack.to_owned());
                self.rack = true;
            }
        }
        let full = joining || req.rebalance_timeout_ms >= 0;
        let (names, regex): (Vec<String>, Option<String>) = match f.subscription {
            Some(Subscription::Topics(t)) => (t.iter().cloned().collect(), None),
            Some(Subscription::Pattern(p)) => (Vec::new(), Some(p.source().to_owned())),
            None => (Vec::new(), None),
        };
        if full || self.topic_names.as_ref() != Some(&names) {
            req.subscribed_topic_names = Some(names.clone());
            self.topic_names = Some(names);
        }
        if v.get() >= 1 {
            match regex {
                Some(r) if full || self.topic_regex.as_ref() != Some(&r) => {
                    req.subscribed_topic_regex = Some(r.clone());
                    self.topic_regex = Some(r);
                }
                None if self.topic_regex.as_ref().is_some_and(|r| !r.is_empty()) => {
                    // From a pattern back to names: "" removes the regex.
                    req.subscribed_topic_regex = Some(String::new());
                    self.topic_regex = Some(String::new());
                }
                _ => {}
            }
        }
        if let Some(a) = f.assignor {
            if full || !self.assignor {
                req.server_assignor = Some(a.to_owned());
                self.assignor = true;
            }
        }
        if joining {
            req.topic_partitions = Some(Vec::new());
            self.owned = Some((f.owned.0, ById::new()));
        } else if full || self.owned.as_ref() != Some(&f.owned) {
            req.topic_partitions = Some(to_wire(&f.owned.1));
            self.owned = Some(f.owned);
        }
        req
    }
}

/// The regular heartbeat in flight.
#[derive(Debug)]
pub(super) struct HeartbeatSent {
    pub id: RequestId,
    pub route: Route,
    pub version: ApiVersion,
    /// [`Heartbeats::joins`] when it was sent.
    joins: u64,
    /// The epoch it carried.
    pub epoch: MemberEpoch,
}

/// When the member heartbeats: the one in flight (at most one), when the next is due, the
/// interval the coordinator asked for, the backoff after failures, and what the last ones
/// carried.
#[derive(Debug)]
pub(super) struct Heartbeats {
    in_flight: Option<HeartbeatSent>,
    /// When the next one may go (None: none due).
    due: Option<Instant>,
    interval: Duration,
    retry: Retry,
    sent: SentFields,
    /// Bumped on every rejoin and leave: answers to heartbeats sent before are dropped.
    joins: u64,
}

impl Heartbeats {
    /// None sent yet, none due.
    pub fn new() -> Heartbeats {
        Heartbeats {
            in_flight: None,
            due: None,
            interval: DEFAULT_HEARTBEAT_INTERVAL,
            retry: Retry::default(),
            sent: SentFields::default(),
            joins: 0,
        }
    }

    /// Whether a heartbeat is in flight.
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// The heartbeat in flight if it is request `id` (it is no longer in flight then).
    pub fn take(&mut self, id: RequestId) -> Option<HeartbeatSent> {
        self.in_flight.take_if(|h| h.id == id)
    }

    /// Whether `sent` went since the last rejoin or leave.
    pub fn is_current(&self, sent: &HeartbeatSent) -> bool {
        sent.joins == self.joins
    }

    /// Whether the coordinator's view of what the member owns is settled: a heartbeat
    /// reported it, and none failed since.
    pub fn reported_owned(&self) -> bool {
        self.sent.owned.is_some()
    }

    /// When the next heartbeat may go, while none is in flight.
    pub fn next(&self) -> Option<Instant> {
        self.due.filter(|_| self.in_flight.is_none())
    }

    /// Whether one may go now.
    pub fn is_due(&self, now: Instant) -> bool {
        self.next().is_some_and(|t| now >= t)
    }

    /// The next one goes at `t`.
    pub fn send_at(&mut self, t: Instant) {
        self.due = Some(t);
    }

    /// The next one goes one interval after `now`.
    pub fn send_after_interval(&mut self, now: Instant) {
        self.due = Some(now + self.interval);
    }

    /// The request for a member that is `f`, at version `v` (see [`SentFields`]).
    pub fn request(&mut self, v: ApiVersion, f: Fields<'_>) -> ConsumerGroupHeartbeatRequest {
        self.sent.request(v, f)
    }

    /// Request `id` went on `route` at version `v` with `epoch`; the next is due once it
    /// is answered.
    pub fn sent(&mut self, id: RequestId, route: Route, version: ApiVersion, epoch: MemberEpoch) {
        self.in_flight = Some(HeartbeatSent {
            id,
            route,
            version,
            joins: self.joins,
            epoch,
        });
        // Until the answer brings the interval (or an error a backoff).
        self.due = None;
    }

    /// An answer without error: the backoff starts over, and the coordinator may name the
    /// interval.
    pub fn succeeded(&mut self, interval_ms: i32) {
        self.retry.succeeded();
        if interval_ms > 0 {
            self.interval = Duration::from_millis(u64::from(interval_ms.unsigned_abs()));
        }
    }

    /// Counts a failure; the backoff it earns.
    pub fn backoff(&mut self, backoff: &Backoff, jitter: &mut dyn Jitter) -> Duration {
        self.retry.failed(backoff, jitter)
    }

    /// A heartbeat failed (an error or no answer): the next one is full and goes after the
    /// backoff.
    pub fn failed(&mut self, now: Instant, backoff: &Backoff, jitter: &mut dyn Jitter) {
        self.sent = SentFields::default();
        let d = self.backoff(backoff, jitter);
        self.due = Some(now + d);
    }

    /// A rejoin or leave: nothing in flight is waited for, none is due, the next is full.
    pub fn forget(&mut self) {
        self.joins += 1;
        self.in_flight = None;
        self.due = None;
        self.sent = SentFields::default();
    }

    /// Stops heartbeating for good.
    pub fn stop(&mut self) {
        self.in_flight = None;
        self.due = None;
    }

    /// How many rejoins and leaves there were.
    #[cfg(test)]
    pub fn joins(&self) -> u64 {
        self.joins
    }
}

impl Kip848Member {
    /// Whether the state sends regular heartbeats.
    pub(super) fn heartbeats_allowed(&self) -> bool {
        matches!(
            self.state,
            State::Joining | State::Reconciling { .. } | State::Acknowledging | State::Stable
        )
    }

    /// Whether the member is in the group or joining it (the poll interval applies).
    pub(super) fn in_group(&self) -> bool {
        self.heartbeats_allowed()
    }

    /// Whether a regular heartbeat is to go now.
    pub(super) fn heartbeat_due(&self, now: Instant) -> bool {
        self.heartbeats_allowed() && self.heartbeats.is_due(now)
    }

    /// The heartbeat that is due, on the coordinator's `route` at version `v` (`Err`: the
    /// broker speaks no version of ConsumerGroupHeartbeat).
    pub(super) fn send_heartbeat(
        &mut self,
        route: Route,
        v: Result<ApiVersion, String>,
    ) -> Option<Transmit> {
        let Ok(v) = v else {
            let msg = format!(
                "group {}: the broker does not offer ConsumerGroupHeartbeat, so it does not \
                 support group.protocol=consumer (KIP-848 needs Kafka 4.0 or later with the \
                 consumer rebalance protocol enabled); use group.protocol=classic",
                self.core.group()
            );
            self.fatal(Error::unsupported(msg));
            return None;
        };
        if v.get() == 0 && matches!(self.subscription, Some(Subscription::Pattern(_))) {
            let msg = format!(
                "group {}: the cluster does not support regular expressions resolution on \
                 ConsumerGroupHeartbeat API version 0 (it needs Kafka 4.0 or later); subscribe \
                 to topic names, or use group.protocol=classic",
                self.core.group()
            );
            self.fatal(Error::unsupported(msg));
            return None;
        }
        let fields = Fields {
            group_id: self.core.group_id(),
            member_id: if v.get() == 0 && !self.assigned_id {
                ""
            } else {
                self.member_id.as_str()
            },
            epoch: self.epoch,
            instance_id: self.cfg.instance_id.as_deref(),
            rack: self.cfg.client_rack.as_deref(),
            rebalance_timeout: self.cfg.max_poll_interval,
            subscription: self.subscription.as_ref(),
            assignor: self.cfg.remote_assignor.as_deref(),
            joining: matches!(self.state, State::Joining),
            owned: self.reported(),
        };
        let req = self.heartbeats.request(v, fields);
        let id = self.core.take_id();
        log::debug!(
            "group {} member {} epoch {}: heartbeat{}{}",
            self.core.group(),
            req.member_id,
            req.member_epoch,
            if req.rebalance_timeout_ms >= 0 {
                " (full)"
            } else {
                ""
            },
            if req.topic_partitions.is_some() {
                " with owned partitions"
            } else {
                ""
            },
        );
        self.heartbeats.sent(id, route, v, self.epoch);
        if matches!(self.state, State::Acknowledging) {
            let to = if self.assignment.target_reached() {
                State::Stable
            } else {
                State::reconciling()
            };
            self.transition(to, "acknowledgement sent");
        }
        let timeout = self.core.request_timeout();
        Some(member_transmit(route, &req, v, id, timeout))
    }

    /// The answer to heartbeat `sent`.
    pub(super) fn on_heartbeat(
        &mut self,
        sent: &HeartbeatSent,
        resp: ConsumerGroupHeartbeatResponse,
        now: Instant,
        coordinator: &mut Coordinator,
    ) {
        if !self.heartbeats.is_current(sent) || !self.heartbeats_allowed() {
            log::debug!(
                "group {}: dropping the answer to a heartbeat from before a rejoin or leave",
                self.core.group()
            );
            return;
        }
        let code = ErrorCode::from_code(resp.error_code);
        if code.is_err() {
            self.heartbeat_error(code, resp.error_message.as_deref(), now, coordinator);
            return;
        }
        self.heartbeats.succeeded(resp.heartbeat_interval_ms);
        self.core.recovered();
        self.unreleased_retries = 0;
        self.join_fencings = 0;
        if sent.version.get() == 0 {
            if let Some(id) = resp.member_id.as_deref().filter(|id| !id.is_empty()) {
                if self.member_id != id || !self.assigned_id {
                    self.member_id = MemberId::new(id);
                    self.assigned_id = true;
                }
            }
        }
        if resp.member_epoch < 0 {
            log::warn!(
                "group {}: ignoring a heartbeat answer with epoch {} (no leave was sent)",
                self.core.group(),
                resp.member_epoch
            );
            self.heartbeats.send_after_interval(now);
            return;
        }
        if resp.member_epoch != self.epoch.0 {
            log::info!(
                "group {} member {}: epoch {} -> {} (heartbeat sent with {})",
                self.core.group(),
                self.member_id,
                self.epoch,
                resp.member_epoch,
                sent.epoch
            );
            self.epoch = MemberEpoch(resp.member_epoch);
        }
        self.update_identity();
        if let Some(a) = resp.assignment {
            let target = sanitize(&a.topic_partitions);
            let parts = target.values().map(BTreeSet::len).sum::<usize>();
            if let Some(version) = self.assignment.set_target(target) {
                log::info!(
                    "group {} member {} epoch {}: new target assignment (version {version}): \
                     {parts} partitions",
                    self.core.group(),
                    self.member_id,
                    self.epoch,
                );
            }
        }
        match self.state {
            State::Joining if self.epoch.in_group() => {
                if self.assignment.target_reached() {
                    self.transition(State::Stable, "joined");
                } else {
                    self.transition(State::reconciling(), "joined with a target to reconcile");
                }
            }
            State::Stable if !self.assignment.target_reached() => {
                self.transition(State::reconciling(), "new target assignment");
            }
            _ => {}
        }
        // An acknowledgement waits for no interval.
        if matches!(self.state, State::Acknowledging) {
            self.heartbeats.send_at(now);
        } else {
            self.heartbeats.send_after_interval(now);
        }
    }

    fn heartbeat_error(
        &mut self,
        code: ErrorCode,
        message: Option<&str>,
        now: Instant,
        coordinator: &mut Coordinator,
    ) {
        let detail = message.map(|m| format!(": {m}")).unwrap_or_default();
        match code {
            ErrorCode::FENCED_MEMBER_EPOCH | ErrorCode::UNKNOWN_MEMBER_ID => {
                self.fenced(&format!("{code}{detail}"), now);
            }
            ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR => {
                coordinator.mark_unknown(&format!("ConsumerGroupHeartbeat: {code}"), now);
                self.heartbeat_failed(now);
            }
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS => self.heartbeat_failed(now),
            ErrorCode::UNRELEASED_INSTANCE_ID
                if self.unreleased_retries < UNRELEASED_INSTANCE_RETRIES =>
            {
                self.unreleased_retries += 1;
                log::warn!(
                    "group {}: group.instance.id {} is still held by an older member \
                     ({code}{detail}); retry {} of {UNRELEASED_INSTANCE_RETRIES}",
                    self.core.group(),
                    self.cfg.instance_id.as_deref().unwrap_or(""),
                    self.unreleased_retries
                );
                self.heartbeat_failed(now);
            }
            ErrorCode::TOPIC_AUTHORIZATION_FAILED => {
                let msg = format!(
                    "group {}: not authorized to describe some subscribed topics{detail}; the \
                     member keeps heartbeating and retries",
                    self.core.group()
                );
                self.core
                    .report(format!("{code}"), Error::broker(code, msg));
                self.heartbeat_failed(now);
            }
            c if c.is_retriable() => self.heartbeat_failed(now),
            c => {
                let msg = self.fatal_message(c, &detail);
                self.fatal(Error::broker(c, msg));
            }
        }
    }

    /// The heartbeat failed: the next one is full and goes after a backoff, which grows
    /// while the failures go on (also when the coordinator keeps moving or stays
    /// unavailable: resetting it there retried every `retry.backoff.ms` for as long).
    pub(super) fn heartbeat_failed(&mut self, now: Instant) {
        self.heartbeats
            .failed(now, &self.cfg.retry_backoff, &mut *self.jitter);
    }

    /// The message of a fatal heartbeat error: names the group and what to change.
    fn fatal_message(&self, code: ErrorCode, detail: &str) -> String {
        let g = self.core.group();
        match code {
            ErrorCode::UNSUPPORTED_VERSION => format!(
                "group {g}: the broker refused ConsumerGroupHeartbeat{detail}: the \
                 cluster does not support group.protocol=consumer (KIP-848 needs Kafka 4.0 or \
                 later with the consumer rebalance protocol enabled: \
                 group.coordinator.rebalance.protocols includes consumer, feature \
                 group.version >= 1); use group.protocol=classic"
            ),
            ErrorCode::GROUP_AUTHORIZATION_FAILED => format!(
                "group {g}: not authorized to access the group (group.id={g}; check the ACLs of \
                 the consumer's principal){detail}"
            ),
            ErrorCode::UNSUPPORTED_ASSIGNOR => format!(
                "group {g}: the broker does not support group.remote.assignor={}{detail}",
                self.cfg.remote_assignor.as_deref().unwrap_or("(unset)")
            ),
            ErrorCode::INVALID_REGULAR_EXPRESSION => format!(
                "group {g}: the broker rejected the subscription's regular expression{}{detail} \
                 (it is matched server-side with RE2/J syntax against whole topic names)",
                match &self.subscription {
                    Some(Subscription::Pattern(p)) => format!(" {:?}", p.source()),
                    _ => String::new(),
                }
            ),
            ErrorCode::GROUP_MAX_SIZE_REACHED => format!(
                "group {g}: the group already has the maximum number of members the broker \
                 allows (group.consumer.max.size){detail}"
            ),
            ErrorCode::FENCED_INSTANCE_ID | ErrorCode::UNRELEASED_INSTANCE_ID => format!(
                "group {g}: another member uses group.instance.id={}{detail}: every \
                 consumer needs its own group.instance.id",
                self.cfg.instance_id.as_deref().unwrap_or("")
            ),
            ErrorCode::GROUP_ID_NOT_FOUND => format!(
                "group {g}: the broker cannot run this group with the consumer \
                 protocol{detail}: it is most likely a classic group that cannot be converted \
                 (group.consumer.migration.policy, a custom assignor, or another protocol type)"
            ),
            ErrorCode::INVALID_REQUEST => {
                format!("group {g}: the broker rejected the heartbeat as malformed{detail}")
            }
            c => format!(
                "group {g}: ConsumerGroupHeartbeat failed with {}{detail}",
                c.name()
            ),
        }
    }
}
