//! What every group member keeps, whatever its protocol: the group's name, request ids,
//! callback tokens, the events for the rest of the consumer (callbacks, identity, errors,
//! `Left`), the leave under way, and the `max.poll.interval.ms` clock. The classic member
//! and the KIP-848 one embed a [`MemberCore`] and keep only their protocol's state beside
//! it. Sans-IO.
//!
//! Every state change of either member passes [`MemberCore::transition`]: checked against
//! the member's diagram and logged with the member id and its generation or epoch.
//!
//! Invariants:
//! 1. An identity event goes out only when the identity changed.
//! 2. A non-fatal error goes out once per streak of the same problem, a fatal one once
//!    ([`MemberCore::fatal`] says whether the member just stopped). A transition the
//!    diagram does not have is such a fatal error, never a log line and carry on.
//! 3. At most one leave is under way. It ends exactly once (answered, failed, or given up:
//!    no coordinator, no version to send it with, not sent by its deadline), and `Left`
//!    follows then if, and only if, the application asked for the leave.
//! 4. Once the poll interval expired it stays expired until the application polls after
//!    the expiry; while it is expired it names no deadline.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind};
use crate::group::coordinator::Coordinator;
use crate::group::member::{CallbackKind, CallbackToken, MemberEvent, RebalancePhase};
use crate::link::{Failure, Lane, Links, Owner, Route, Tag, Transmit};
use crate::protocol::api::Api;
use crate::protocol::error_code::ErrorCode;
use crate::protocol::wire::DecodeError;
use crate::types::{ApiVersion, Identity, MemberId, RequestId, TopicPartition};

/// A leave to send (LeaveGroup, or a heartbeat with a leave epoch), or in flight.
#[derive(Debug)]
pub(crate) struct LeaveJob {
    /// Who leaves (the member id may have changed or been cleared since).
    pub member_id: MemberId,
    /// Why, for logs (and LeaveGroup's reason).
    pub reason: &'static str,
    /// Asked for with `leave`: `MemberEvent::Left` follows.
    pub for_user: bool,
    /// Given up if not sent by then.
    pub deadline: Instant,
    pub sent: Option<(RequestId, Route)>,
}

/// A member's state as the transition check sees it: its name, and the diagram's edges.
pub(crate) trait MemberState {
    /// The state's name (what the logs and the diagram speak of).
    type Kind: Copy + Eq + fmt::Debug;
    /// The name of this state.
    fn kind(&self) -> Self::Kind;
    /// Whether the diagram has an edge `from` → `to`.
    fn legal(from: Self::Kind, to: Self::Kind) -> bool;
}

/// A callback the member waits for: its token and kind, what the user thread owns once it
/// answered, and what the member does then (`T`, its protocol's own).
#[derive(Debug)]
pub(crate) struct Awaited<T> {
    pub token: CallbackToken,
    pub kind: CallbackKind,
    pub owned_after: BTreeSet<TopicPartition>,
    pub then: T,
}

/// What became of the leave under way when the member asked to send it.
#[derive(Debug)]
pub(crate) enum LeavePoll {
    /// Nothing to send (no leave, sent already, or its link is not ready).
    Idle,
    /// Send this; the leave was the application's (`for_user`) or not.
    Sent { transmit: Transmit, for_user: bool },
    /// Given up (no coordinator, or it speaks no version of the API): the leave is over.
    Ended(LeaveJob),
}

/// `max.poll.interval.ms`: when the application last polled, and whether the interval
/// expired (the member then leaves, and rejoins only once the application polls again).
#[derive(Debug)]
struct PollInterval {
    max: Duration,
    last: Option<Instant>,
    /// The interval expired then; cleared when the application polls after it.
    expired: Option<Instant>,
}

/// The earliest of some instants that have not passed yet: what `poll_timeout` returns.
#[derive(Debug)]
pub(crate) struct Deadlines {
    now: Instant,
    next: Option<Instant>,
}

impl Deadlines {
    /// None yet.
    pub fn new(now: Instant) -> Deadlines {
        Deadlines { now, next: None }
    }

    /// Counts `t` if it is still ahead (a passed instant is never named).
    pub fn at(&mut self, t: Instant) {
        if t > self.now {
            self.next = Some(self.next.map_or(t, |n| n.min(t)));
        }
    }

    /// Counts `t` if there is one.
    pub fn maybe(&mut self, t: Option<Instant>) {
        if let Some(t) = t {
            self.at(t);
        }
    }

    /// The earliest instant counted.
    pub fn next(self) -> Option<Instant> {
        self.next
    }
}

/// What a group member keeps whatever its protocol (see the module's doc).
pub(crate) struct MemberCore {
    /// Learnt from the coordinator component (for logs and requests).
    group_id: String,
    next_id: RequestId,
    next_token: u64,
    events: VecDeque<MemberEvent>,
    /// Who commits speak for, as last told.
    identity: Identity,
    /// The problem last reported with a non-fatal error (one report per streak).
    reported: Option<String>,
    leave: Option<LeaveJob>,
    poll: PollInterval,
    /// `request.timeout.ms`: requests time out, and a leave not sent is given up, after it.
    request_timeout: Duration,
    /// The fatal error went out: the member stopped for good.
    stopped: bool,
    /// A test that takes an illegal transition on purpose (any other test fails on one).
    #[cfg(test)]
    pub expect_illegal: bool,
}

impl MemberCore {
    /// A core whose commits speak as `identity` to begin with.
    pub fn new(
        identity: Identity,
        max_poll_interval: Duration,
        request_timeout: Duration,
    ) -> MemberCore {
        MemberCore {
            group_id: String::new(),
            next_id: RequestId(1),
            next_token: 1,
            events: VecDeque::new(),
            identity,
            reported: None,
            leave: None,
            poll: PollInterval {
                max: max_poll_interval,
                last: None,
                expired: None,
            },
            request_timeout,
            stopped: false,
            #[cfg(test)]
            expect_illegal: false,
        }
    }

    // ----- the group and requests -----------------------------------------------------

    /// Takes the group id from the coordinator component, the first time.
    pub fn learn_group(&mut self, coordinator: &Coordinator) {
        if self.group_id.is_empty() {
            self.group_id = coordinator.group_id().to_owned();
        }
    }

    /// The group's name for logs and messages.
    pub fn group(&self) -> &str {
        if self.group_id.is_empty() {
            "(not yet known)"
        } else {
            &self.group_id
        }
    }

    /// The group id as requests carry it.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// The id of the next request.
    pub fn take_id(&mut self) -> RequestId {
        self.next_id.take_next()
    }

    /// `request.timeout.ms`.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    // ----- events ---------------------------------------------------------------------

    /// The next event for the rest of the consumer.
    pub fn poll_event(&mut self) -> Option<MemberEvent> {
        self.events.pop_front()
    }

    /// Asks the user thread to run callback `kind` for `partitions` and make `owned_after`
    /// its assignment; the member waits for it, and does `then` once it is answered.
    pub fn callback<T>(
        &mut self,
        kind: CallbackKind,
        partitions: BTreeSet<TopicPartition>,
        owned_after: BTreeSet<TopicPartition>,
        then: T,
    ) -> Awaited<T> {
        let token = CallbackToken(self.next_token);
        self.next_token += 1;
        self.events.push_back(MemberEvent::Callback {
            token,
            kind,
            partitions: partitions.into_iter().collect(),
            owned: owned_after.iter().cloned().collect(),
        });
        Awaited {
            token,
            kind,
            owned_after,
            then,
        }
    }

    /// Whether the answer to callback `token` is the one the member waits for
    /// (`outstanding`); any other is ignored.
    pub fn is_outstanding(&self, token: CallbackToken, outstanding: Option<CallbackToken>) -> bool {
        if outstanding == Some(token) {
            return true;
        }
        log::debug!(
            "group {}: ignoring the answer to callback {} (not outstanding)",
            self.group(),
            token.0
        );
        false
    }

    /// Whether the member stopped for good after a fatal error (emitted once).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Whether a member that stopped after a fatal error refuses a new subscription (it
    /// does, with a warning: the consumer replaces a stopped member when it subscribes).
    pub fn refuses_subscription(&self) -> bool {
        if self.stopped {
            log::warn!(
                "group {}: subscribe ignored, the member stopped after a fatal error",
                self.group()
            );
        }
        self.stopped
    }

    /// Who commits speak for, as last told.
    #[cfg(test)]
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// Commits speak for `identity` from now on: told if it changed.
    pub fn set_identity(&mut self, identity: Identity) {
        if !self.stopped && identity != self.identity {
            self.identity = identity.clone();
            self.events.push_back(MemberEvent::Identity(identity));
        }
    }

    /// A non-fatal error for the application, once per streak of the same problem `key`.
    pub fn report(&mut self, key: String, error: Error) {
        log::warn!("{error}");
        if self.reported.as_deref() != Some(key.as_str()) {
            self.reported = Some(key);
            self.events.push_back(MemberEvent::Error {
                error,
                fatal: false,
            });
        }
    }

    /// A step succeeded: the streak of the last reported problem is over.
    pub fn recovered(&mut self) {
        self.reported = None;
    }

    /// The error that stops the member for good: emitted the first time; whether this
    /// stopped the member (it then clears what it keeps and enters its Fatal state). Later
    /// ones are only logged.
    pub fn fatal(&mut self, error: Error) -> bool {
        log::error!("{error}");
        if self.stopped {
            return false;
        }
        // Out of the group for good (as the Java client's fatal state): commits no longer
        // speak for the member, and the user side gives its partitions up.
        self.set_identity(Identity::Outsider);
        self.stopped = true;
        self.events
            .push_back(MemberEvent::Error { error, fatal: true });
        true
    }

    /// The one way a member's state changes: `state` becomes `to` if the diagram has that
    /// edge, logged with `who` (the member id and its generation or epoch). `Err`: an
    /// illegal transition (`state` stays), with the error that stops the member; a test
    /// build also panics, unless the test expects it.
    pub fn transition<S: MemberState>(
        &self,
        state: &mut S,
        to: S,
        who: &str,
        why: &str,
    ) -> Result<(), Error> {
        let (from, to_kind) = (state.kind(), to.kind());
        if !S::legal(from, to_kind) {
            let to = to_kind;
            let error = Error::new(
                ErrorKind::Protocol,
                format!(
                    "group {}: illegal member transition {from:?} -> {to:?} ({why}) of {who}; \
                     the member stops",
                    self.group()
                ),
            );
            #[cfg(test)]
            assert!(self.expect_illegal, "{error}");
            return Err(error);
        }
        log::info!(
            "group {} {who}: {from:?} -> {to_kind:?} ({why})",
            self.group()
        );
        *state = to;
        Ok(())
    }

    /// A rebalance reached `phase` (a transition of the member's says so).
    pub fn rebalance(&mut self, phase: Option<RebalancePhase>) {
        if let Some(phase) = phase {
            self.events.push_back(MemberEvent::Rebalance(phase));
        }
    }

    /// A leave needs no request: it is done at once.
    pub fn left(&mut self) {
        self.events.push_back(MemberEvent::Left);
    }

    // ----- leaving --------------------------------------------------------------------

    /// Starts a leave of `member_id`, given up if not sent within `request.timeout.ms`.
    pub fn start_leave(
        &mut self,
        member_id: MemberId,
        reason: &'static str,
        for_user: bool,
        now: Instant,
    ) {
        self.leave = Some(LeaveJob {
            member_id,
            reason,
            for_user,
            deadline: now + self.request_timeout,
            sent: None,
        });
    }

    /// The leave under way, if any.
    pub fn leave_job(&mut self) -> Option<&mut LeaveJob> {
        self.leave.as_mut()
    }

    /// Forgets the leave under way (its answer is dropped): it ends without a word.
    pub fn drop_leave(&mut self) {
        self.leave = None;
    }

    /// Sends the leave under way with API `A`: `request` builds it at version `v`.
    pub fn poll_leave<A: Api>(
        &mut self,
        now: Instant,
        links: &mut Links,
        coordinator: &mut Coordinator,
        request: impl FnOnce(&str, &LeaveJob, ApiVersion) -> A,
    ) -> LeavePoll {
        if self.leave.as_ref().is_none_or(|j| j.sent.is_some()) {
            return LeavePoll::Idle;
        }
        let Some(node) = coordinator.node() else {
            // As Java: no leave while the coordinator is unknown.
            return self.end_leave("not sent: the coordinator is unknown");
        };
        let route = Route::node(node, Lane::Group);
        let Some(versions) = links.ready(route, now) else {
            return LeavePoll::Idle;
        };
        let Some(v) = versions.pick::<A>() else {
            let why = versions.unsupported::<A>(route.peer);
            return self.end_leave(&format!("not sent: {why}"));
        };
        let id = self.take_id();
        let Some(job) = self.leave.as_mut() else {
            return LeavePoll::Idle;
        };
        let req = request(&self.group_id, job, v);
        job.sent = Some((id, route));
        log::info!(
            "group {}: member {} sends {}: {}",
            self.group_id,
            job.member_id,
            A::NAME,
            job.reason
        );
        LeavePoll::Sent {
            transmit: member_transmit(route, &req, v, id, self.request_timeout),
            for_user: job.for_user,
        }
    }

    /// Whether request `id` is the leave in flight.
    pub fn is_leave(&self, id: RequestId) -> bool {
        self.leave
            .as_ref()
            .is_some_and(|j| j.sent.is_some_and(|(s, _)| s == id))
    }

    /// The answer to the leave in flight (API `A`); `code` reads its error code. The leave
    /// is over.
    pub fn leave_answered<A: Api>(
        &mut self,
        version: ApiVersion,
        body: &[u8],
        now: Instant,
        links: &mut Links,
        code: impl FnOnce(&A::Response, &LeaveJob) -> Result<i16, DecodeError>,
    ) -> LeavePoll {
        let Some(job) = &self.leave else {
            return LeavePoll::Idle;
        };
        let Some((_, route)) = job.sent else {
            return LeavePoll::Idle;
        };
        let outcome = match links.decode::<A>(route, version, body, now) {
            Ok(resp) => match code(&resp, job) {
                Ok(0) => "left the group".to_owned(),
                Ok(c) => format!("answered {}", ErrorCode::from_code(c)),
                Err(e) => format!("answered {e}"),
            },
            Err(e) => format!("malformed answer: {e}"),
        };
        self.end_leave(&outcome)
    }

    /// The leave in flight got no answer; `what` names it for the coordinator component,
    /// which looks for the coordinator again. The leave is over.
    pub fn leave_failed(
        &mut self,
        what: &str,
        failure: &Failure,
        now: Instant,
        coordinator: &mut Coordinator,
    ) -> LeavePoll {
        coordinator.mark_unknown(&format!("{what}: {failure}"), now);
        self.end_leave(&format!("failed: {failure}"))
    }

    /// Gives up the leave if it was not sent by its deadline.
    pub fn check_leave_deadline(&mut self, now: Instant) -> LeavePoll {
        if self
            .leave
            .as_ref()
            .is_some_and(|j| j.sent.is_none() && now >= j.deadline)
        {
            self.end_leave("not sent within request.timeout.ms")
        } else {
            LeavePoll::Idle
        }
    }

    /// The leave under way is over (`outcome` says how): a leave the application asked for
    /// is done.
    fn end_leave(&mut self, outcome: &str) -> LeavePoll {
        let Some(job) = self.leave.take() else {
            return LeavePoll::Idle;
        };
        log::info!(
            "group {}: leave of member {}: {outcome}",
            self.group(),
            job.member_id
        );
        if job.for_user {
            self.left();
        }
        LeavePoll::Ended(job)
    }

    // ----- the poll interval ----------------------------------------------------------

    /// The application polled at `at` (the user thread runs callbacks from poll too).
    /// Whether that ends an expiry of the poll interval: the member may rejoin.
    pub fn user_polled(&mut self, at: Instant) -> bool {
        self.poll.last = Some(self.poll.last.map_or(at, |t| t.max(at)));
        if self.poll.expired.is_some_and(|t| at > t) {
            self.poll.expired = None;
            log::info!(
                "group {}: the application polls again; rejoining",
                self.group()
            );
            return true;
        }
        false
    }

    /// Whether the poll interval expired and the application has not polled since.
    pub fn poll_expired(&self) -> bool {
        self.poll.expired.is_some()
    }

    /// Forgets an expiry of the poll interval; whether there was one.
    pub fn clear_poll_expiry(&mut self) -> bool {
        self.poll.expired.take().is_some()
    }

    /// Whether `max.poll.interval.ms` passed without a poll for a member that is `active`
    /// (in the group, or joining it): the interval is then marked expired.
    pub fn check_poll_interval(&mut self, now: Instant, active: bool) -> bool {
        let due = self.poll_deadline(active).is_some_and(|t| now >= t);
        if due {
            self.poll.expired = Some(now);
        }
        due
    }

    /// `max.poll.interval.ms`.
    pub fn max_poll_interval(&self) -> Duration {
        self.poll.max
    }

    fn poll_deadline(&self, active: bool) -> Option<Instant> {
        if !active || self.poll.expired.is_some() {
            return None;
        }
        self.poll.last.map(|t| t + self.poll.max)
    }

    /// The core's deadlines: the leave's while it is not sent, the poll interval's while
    /// the member is `active` and it has not expired.
    pub fn deadlines(&self, now: Instant, active: bool) -> Deadlines {
        let mut d = Deadlines::new(now);
        d.maybe(
            self.leave
                .as_ref()
                .filter(|j| j.sent.is_none())
                .map(|j| j.deadline),
        );
        d.maybe(self.poll_deadline(active));
        d
    }
}

/// The coordinator's link on `lane` once the coordinator is known and the link ready (it
/// is marked wanted otherwise), and the version of `A` to speak on it: `Err` says what the
/// broker supports when it speaks none of the versions this client does.
pub(crate) fn coordinator_link<A: Api>(
    now: Instant,
    links: &mut Links,
    coordinator: &mut Coordinator,
    lane: Lane,
) -> Option<(Route, Result<ApiVersion, String>)> {
    let route = Route::node(coordinator.node()?, lane);
    let versions = links.ready(route, now)?;
    let v = versions
        .pick::<A>()
        .ok_or_else(|| versions.unsupported::<A>(route.peer));
    Some((route, v))
}

/// A request of the member's, tagged so that its answer comes back to it.
pub(crate) fn member_transmit<A: Api>(
    route: Route,
    req: &A,
    v: ApiVersion,
    id: RequestId,
    timeout: Duration,
) -> Transmit {
    Transmit::new(
        route,
        req,
        v,
        Tag {
            owner: Owner::Member,
            id,
        },
        timeout,
    )
}

/// A duration in milliseconds as the wire's i32 fields carry it (saturating).
pub(crate) fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Clock;
    use crate::types::{GenerationId, MemberEpoch};

    fn core() -> MemberCore {
        MemberCore::new(
            Identity::Outsider,
            Duration::from_secs(300),
            Duration::from_secs(30),
        )
    }

    fn events(c: &mut MemberCore) -> Vec<MemberEvent> {
        std::iter::from_fn(|| c.poll_event()).collect()
    }

    #[test]
    fn the_identity_is_told_only_when_it_changes() {
        let mut c = core();
        c.set_identity(Identity::Outsider);
        assert!(events(&mut c).is_empty());
        let member = Identity::classic(GenerationId(3), MemberId::new("m"), None);
        c.set_identity(member.clone());
        c.set_identity(member.clone());
        assert!(matches!(&events(&mut c)[..], [MemberEvent::Identity(i)] if *i == member));
        // Speaking for nobody is the outsider, whatever the protocol says.
        let nobody = Identity::classic(GenerationId::UNKNOWN, MemberId::none(), None);
        assert_eq!(nobody, Identity::Outsider);
        let kip = Identity::Kip848 {
            epoch: MemberEpoch(4),
            member_id: MemberId::new("m"),
            instance_id: None,
        };
        assert_eq!(kip.generation_or_epoch(), 4);
        assert_eq!(kip.describe_epoch(), "member epoch 4");
        assert_eq!(member.describe_epoch(), "generation 3");
    }

    #[test]
    fn a_problem_is_reported_once_per_streak_and_the_fatal_error_once() {
        let mut c = core();
        c.report("x".into(), Error::config("x"));
        c.report("x".into(), Error::config("x"));
        assert_eq!(events(&mut c).len(), 1);
        c.recovered();
        c.report("x".into(), Error::config("x"));
        assert_eq!(events(&mut c).len(), 1);
        assert!(c.fatal(Error::config("stop")));
        assert!(!c.fatal(Error::config("stop again")));
        assert!(matches!(
            &events(&mut c)[..],
            [MemberEvent::Error { fatal: true, .. }]
        ));
        assert!(c.refuses_subscription());
    }

    #[test]
    fn the_poll_interval_expires_once_and_stays_expired_until_the_next_poll() {
        let clock = Clock::new();
        let mut c = core();
        let t0 = clock.now();
        c.user_polled(t0);
        let due = t0 + Duration::from_secs(300);
        assert_eq!(c.deadlines(t0, true).next(), Some(due));
        assert_eq!(
            c.deadlines(t0, false).next(),
            None,
            "only for an active member"
        );
        assert!(!c.check_poll_interval(due - Duration::from_millis(1), true));
        assert!(!c.check_poll_interval(due, false));
        assert!(c.check_poll_interval(due, true));
        assert!(c.poll_expired());
        assert!(!c.check_poll_interval(due, true), "once");
        assert_eq!(c.deadlines(due, true).next(), None);
        assert!(!c.user_polled(due), "a poll at the expiry is not after it");
        assert!(c.user_polled(due + Duration::from_millis(1)));
        assert!(!c.poll_expired());
    }

    #[test]
    fn a_leave_not_sent_by_its_deadline_ends_with_left_only_for_the_user() {
        let clock = Clock::new();
        let now = clock.now();
        for for_user in [true, false] {
            let mut c = core();
            c.start_leave(MemberId::new("m"), "test", for_user, now);
            let deadline = now + Duration::from_secs(30);
            assert_eq!(c.deadlines(now, false).next(), Some(deadline));
            assert!(matches!(
                c.check_leave_deadline(deadline - Duration::from_millis(1)),
                LeavePoll::Idle
            ));
            let LeavePoll::Ended(job) = c.check_leave_deadline(deadline) else {
                panic!("the leave is over");
            };
            assert_eq!((job.member_id.as_str(), job.for_user), ("m", for_user));
            assert!(c.leave_job().is_none());
            let left = events(&mut c)
                .iter()
                .any(|e| matches!(e, MemberEvent::Left));
            assert_eq!(left, for_user);
        }
    }

    #[test]
    fn deadlines_never_name_a_passed_instant() {
        let clock = Clock::new();
        let now = clock.now();
        let mut d = Deadlines::new(now);
        d.at(now);
        d.maybe(None);
        assert_eq!(d.next(), None);
        let mut d = Deadlines::new(now);
        d.at(now + Duration::from_secs(2));
        d.at(now + Duration::from_secs(1));
        assert_eq!(d.next(), Some(now + Duration::from_secs(1)));
    }
}
