//! The multi-member simulation rig both group members' tests run on: simulated clock,
//! links and brokers (`crate::sim`), a simulated group coordinator that runs the real
//! protocol for several members (`classic`, `kip848`), and a simulated user thread per
//! member that answers its callbacks (at once, after a delay, or when the test says).
//!
//! The rig is generic over the member (`RigMember`: what it needs beyond `Member`, and
//! the protocol's checks) and the simulated coordinator (`SimCoordinator`).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::error::Error;
use crate::group::coordinator::Coordinator;
use crate::group::member::{
    CallbackKind, CallbackToken, Member, MemberEvent, RebalancePhase, Subscription,
};
use crate::link::{Failure, Lane, Peer, Route, Transmit, Versions};
use crate::protocol::error_code::ErrorCode;
use crate::sim::{self, cluster_config, Clock, Net, SimBroker};
use crate::types::{ApiVersion, Identity, NodeId, RequestId, TopicPartition};

pub(crate) mod classic;
pub(crate) mod kip848;

/// The group coordinator's broker.
pub(crate) const COORD: i32 = 2;

/// An answer for request `id` of client `client`.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub client: usize,
    pub route: Route,
    pub id: RequestId,
    pub version: ApiVersion,
    pub body: Vec<u8>,
}

/// What the rig needs from a simulated group coordinator.
pub(crate) trait SimCoordinator {
    /// The coordinator of group "g" over the topics `broker` knows.
    fn for_broker(broker: &SimBroker) -> Self;
    /// Takes request `t` of client `client`: answers it (see `take_answers`) or holds it.
    fn handle(&mut self, client: usize, t: &Transmit, now: Instant);
    /// Time passed: expires sessions and deadlines (which may release held answers).
    fn tick(&mut self, now: Instant);
    /// The answers that became ready.
    fn take_answers(&mut self) -> Vec<Answer>;
    /// The next instant `tick` has something to do.
    fn next_deadline(&self, now: Instant) -> Option<Instant>;
    /// Client `client`'s links closed: its held requests will never be answered.
    fn disconnect(&mut self, _client: usize) {}
    /// Checks the coordinator's own invariants.
    fn check(&self) {}
}

/// What the rig needs from a member beyond `Member`, and the protocol's checks.
pub(crate) trait RigMember<G: SimCoordinator>: Member + Sized {
    type Config;
    /// The member's state kind.
    type Kind: Copy + Eq + Debug;
    /// What the rig records of each request the member sends.
    type Sent: Debug;
    /// Per-client state of the protocol's checks.
    type Ext: Default;

    /// Client `i`'s member.
    fn create(cfg: Self::Config, i: usize) -> Self;
    /// The API versions a client's links negotiate.
    fn versions() -> Versions;
    fn state_kind(&self) -> Self::Kind;
    /// The record of request `t`, sent at `now`.
    fn record(t: &Transmit, now: Instant) -> Self::Sent;

    /// Request `t` of client `i` is on its way: checks it; `Some`: the answer instead of
    /// the coordinator's (or the test's).
    fn on_send(_rig: &mut Rig<Self, G>, _i: usize, _t: &Transmit) -> Option<Answer> {
        None
    }
    /// A line for the log about answer `body` to a request.
    fn describe_answer(_id: u64, _version: ApiVersion, _body: &[u8]) -> Option<String> {
        None
    }
    /// The invariants at any instant.
    fn check(_rig: &Rig<Self, G>) {}
    /// The clients and the coordinator, for failure messages.
    fn describe(_rig: &Rig<Self, G>) -> String {
        String::new()
    }
}

/// A callback the simulated user thread has not answered yet.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub token: CallbackToken,
    pub kind: CallbackKind,
    pub partitions: Vec<TopicPartition>,
    pub owned: Vec<TopicPartition>,
    /// When the user thread answers it (`None`: when the test says).
    pub due: Option<Instant>,
}

/// One consumer: the member, its links, metadata and coordinator, and its user thread.
pub(crate) struct Client<M: RigMember<G>, G: SimCoordinator> {
    pub member: M,
    pub net: Net,
    pub cluster: Cluster,
    pub coordinator: Coordinator,
    /// Whether the rig drives it (a "crashed" client is not).
    pub alive: bool,
    /// The API versions its links negotiate.
    pub versions: Versions,
    pub pending: Option<Pending>,
    /// Every callback: kind, partitions, owned afterwards.
    pub callbacks: Vec<(CallbackKind, Vec<TopicPartition>, Vec<TopicPartition>)>,
    /// When each callback was answered.
    pub answered: Vec<Instant>,
    pub errors: Vec<(Error, bool)>,
    pub identities: Vec<Identity>,
    pub lefts: usize,
    /// Rebalance phases the member reported, with when.
    pub rebalances: Vec<(Instant, RebalancePhase)>,
    /// How long the user thread takes to answer a callback (`None`: the test answers).
    pub callback_delay: Option<Duration>,
    /// Whether the application calls poll.
    pub polling: bool,
    /// Requests to the coordinator are kept for the test instead of going to it.
    pub intercept: bool,
    pub intercepted: Vec<Transmit>,
    /// The answers to its next requests are lost (they time out).
    pub lose: usize,
    /// How long the coordinator's answers take to arrive.
    pub answer_delay: Duration,
    /// Requests awaiting an answer.
    pub in_flight: BTreeMap<RequestId, Route>,
    /// Every request the member sent.
    pub sent: Vec<M::Sent>,
    pub finds: usize,
    pub metadata: usize,
    /// What happened, for failure messages.
    pub log: Vec<String>,
    /// The protocol's own per-client state.
    pub ext: M::Ext,
}

impl<M: RigMember<G>, G: SimCoordinator> Client<M, G> {
    pub fn kinds(&self) -> Vec<CallbackKind> {
        self.callbacks.iter().map(|c| c.0).collect()
    }
}

/// An answer on its way.
#[derive(Debug)]
pub(crate) struct Reply {
    pub client: usize,
    pub route: Route,
    pub id: RequestId,
    pub version: ApiVersion,
    /// None: lost (the request times out at `due`).
    pub body: Option<Vec<u8>>,
    pub due: Instant,
}

/// Several clients, the brokers, and the group coordinator.
pub(crate) struct Rig<M: RigMember<G>, G: SimCoordinator> {
    pub clock: Clock,
    pub broker: SimBroker,
    pub group: G,
    pub clients: Vec<Client<M, G>>,
    /// Answers on their way.
    pub replies: Vec<Reply>,
    /// The coordinator refuses connections.
    pub coordinator_down: bool,
    /// Checks the invariants after every step.
    pub check: bool,
    pub clock_start: Instant,
    /// Every member state seen between steps.
    pub seen: Vec<M::Kind>,
}

impl<M: RigMember<G>, G: SimCoordinator> Rig<M, G> {
    /// Brokers 1 to 3 (the coordinator is broker 2) with topics of the given sizes.
    pub fn new(topics: &[(&str, i32)]) -> Self {
        let mut broker = SimBroker::new(&[1, 2, 3]);
        for (name, n) in topics {
            broker = broker.topic(name, &vec![1; *n as usize], 100);
        }
        broker.coordinator = COORD;
        let group = G::for_broker(&broker);
        let clock = Clock::new();
        Rig {
            clock,
            broker,
            group,
            clients: Vec::new(),
            replies: Vec::new(),
            coordinator_down: false,
            check: true,
            clock_start: clock.now(),
            seen: Vec::new(),
        }
    }

    pub fn add(&mut self, cfg: M::Config) -> usize {
        let i = self.clients.len();
        let mut net = Net::new();
        net.clock = self.clock;
        self.clients.push(Client {
            member: M::create(cfg, i),
            net,
            cluster: Cluster::new(cluster_config()),
            coordinator: Coordinator::new(
                "g",
                sim::retry_backoff(),
                Duration::from_secs(30),
                sim::jitter(100 + i as u32),
            ),
            alive: true,
            versions: M::versions(),
            pending: None,
            callbacks: Vec::new(),
            answered: Vec::new(),
            errors: Vec::new(),
            identities: Vec::new(),
            lefts: 0,
            rebalances: Vec::new(),
            callback_delay: Some(Duration::ZERO),
            polling: true,
            intercept: false,
            intercepted: Vec::new(),
            lose: 0,
            answer_delay: Duration::ZERO,
            in_flight: BTreeMap::new(),
            sent: Vec::new(),
            finds: 0,
            metadata: 0,
            log: Vec::new(),
            ext: M::Ext::default(),
        });
        i
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    pub fn c(&mut self, i: usize) -> &mut Client<M, G> {
        &mut self.clients[i]
    }

    /// The time since the rig started, for the log.
    fn at(&self) -> Duration {
        self.now() - self.clock_start
    }

    pub fn subscribe(&mut self, i: usize, names: &[&str]) {
        let sub = Subscription::Topics(names.iter().map(|t| (*t).to_owned()).collect());
        self.subscribe_to(i, sub);
    }

    pub fn subscribe_to(&mut self, i: usize, sub: Subscription) {
        let now = self.now();
        let at = self.at();
        let c = &mut self.clients[i];
        c.log.push(format!(
            "{at:?} subscribe {sub:?} (state {:?})",
            c.member.state_kind()
        ));
        c.member.subscribe(sub, now);
        self.drain_events(i);
    }

    /// The user thread leaves: it gives up what it holds first, then calls `leave`.
    pub fn leave(&mut self, i: usize) {
        let now = self.now();
        let at = self.at();
        let c = &mut self.clients[i];
        c.log
            .push(format!("{at:?} leave (state {:?})", c.member.state_kind()));
        c.pending = None;
        c.member.leave(now);
        self.saw(i);
        self.drain_events(i);
    }

    fn saw(&mut self, i: usize) {
        let st = self.clients[i].member.state_kind();
        if !self.seen.contains(&st) {
            self.seen.push(st);
        }
    }

    /// The user thread answers its outstanding callback.
    pub fn finish_callback(&mut self, i: usize) {
        let now = self.now();
        let c = &mut self.clients[i];
        let p = c.pending.take().expect("a callback is outstanding");
        c.member.callback_done(p.token, now);
        c.answered.push(now);
        self.drain_events(i);
    }

    // ----- one instant --------------------------------------------------------------

    /// One round of client `i`'s loop; whether anything happened.
    pub fn step(&mut self, i: usize) -> bool {
        if !self.clients[i].alive {
            return false;
        }
        let now = self.now();
        let mut busy = false;
        {
            let c = &mut self.clients[i];
            c.net.clock.advance_to(now);
            if c.polling {
                c.member.user_polled(now);
            }
            if c.pending
                .as_ref()
                .is_some_and(|p| p.due.is_some_and(|d| d <= now))
            {
                let p = c.pending.take().expect("checked");
                c.member.callback_done(p.token, now);
                c.answered.push(now);
                busy = true;
            }
            c.member.handle_timeout(now, &mut c.cluster);
            c.cluster.handle_timeout(now, &c.net.links);
        }
        busy |= self.drain_events(i);
        let mut outgoing = Vec::new();
        {
            let c = &mut self.clients[i];
            c.net.links.begin_round();
            c.coordinator.begin_round();
            while let Some(t) =
                c.member
                    .poll_transmit(now, &mut c.net.links, &mut c.coordinator, &mut c.cluster)
            {
                c.net.sent(&t);
                outgoing.push(t);
                assert!(outgoing.len() < 10, "requests without end in one round");
            }
            if let Some(t) = c
                .coordinator
                .poll_transmit(now, &mut c.net.links, &mut c.cluster)
            {
                c.net.sent(&t);
                c.finds += 1;
                let body = self.broker.answer(&t);
                c.net.answered(t.route);
                c.coordinator.handle_response(
                    t.tag.id,
                    t.version,
                    &body,
                    now,
                    &mut c.net.links,
                    &mut c.cluster,
                );
                busy = true;
            }
            while let Some(t) = c.cluster.poll_transmit(now, &mut c.net.links) {
                c.net.sent(&t);
                c.metadata += 1;
                let body = self.broker.answer(&t);
                c.net.answered(t.route);
                c.cluster
                    .handle_response(t.tag.id, t.version, &body, now, &mut c.net.links);
                busy = true;
            }
        }
        let closes = self.clients[i].net.links.take_close_requests();
        for (route, why) in closes {
            self.close(i, route, &why);
            busy = true;
        }
        busy |= self.connect(i);
        for t in outgoing {
            self.route(i, t);
            busy = true;
        }
        busy |= self.drain_events(i);
        busy
    }

    /// Starts (and completes at once) the connects client `i` wants.
    pub fn connect(&mut self, i: usize) -> bool {
        let now = self.now();
        let down = self.coordinator_down;
        let c = &mut self.clients[i];
        let due = c.net.links.connects_due(now);
        for r in &due {
            if down && r.peer == Peer::Node(NodeId(COORD)) {
                c.net
                    .links
                    .on_closed(*r, "connection refused", now, &mut c.net.jitter);
                if let Peer::Node(n) = r.peer {
                    if matches!(r.lane, Lane::Group | Lane::Join) {
                        c.coordinator.link_failed(n, "connection refused", now);
                    }
                }
            } else {
                c.net.links.on_ready(*r, c.versions.clone());
            }
        }
        !due.is_empty()
    }

    /// Client `i`'s link `route` closes: its requests on it fail.
    pub fn close(&mut self, i: usize, route: Route, why: &str) {
        let now = self.now();
        let c = &mut self.clients[i];
        c.net.close(route, why);
        let ids: Vec<RequestId> = c
            .in_flight
            .iter()
            .filter(|(_, r)| **r == route)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            c.in_flight.remove(&id);
            c.member.handle_failure(
                id,
                &Failure::Disconnected(why.to_owned()),
                now,
                &mut c.coordinator,
            );
        }
        c.intercepted.retain(|t| t.route != route);
        self.group.disconnect(i);
        self.replies
            .retain(|r| !(r.client == i && r.route == route));
        self.drain_events(i);
    }

    /// A request of client `i` goes to the coordinator (or to the test).
    pub fn route(&mut self, i: usize, t: Transmit) {
        let now = self.now();
        let instead = M::on_send(self, i, &t);
        let c = &mut self.clients[i];
        c.sent.push(M::record(&t, now));
        c.in_flight.insert(t.tag.id, t.route);
        if let Some(a) = instead {
            self.push_answer(a);
            return;
        }
        if c.intercept {
            c.intercepted.push(t);
            return;
        }
        self.pass_now(i, &t);
    }

    /// An answer on its way now.
    pub fn push_answer(&mut self, a: Answer) {
        let due = self.now();
        self.replies.push(Reply {
            client: a.client,
            route: a.route,
            id: a.id,
            version: a.version,
            body: Some(a.body),
            due,
        });
    }

    /// The coordinator takes `t` of client `i`; its answers go out (delayed or lost as
    /// their client says).
    pub fn pass_now(&mut self, i: usize, t: &Transmit) {
        let now = self.now();
        self.group.handle(i, t, now);
        self.take_answers(Some((t.tag.id.0, t.timeout)));
    }

    /// Hands intercepted request `t` of client `i` to the coordinator.
    pub fn pass(&mut self, i: usize, t: &Transmit) {
        self.pass_now(i, t);
        self.settle();
    }

    /// The coordinator's ready answers go on their way; `sent` is the request just
    /// handed over (its answer may be lost).
    fn take_answers(&mut self, sent: Option<(u64, Duration)>) {
        let now = self.now();
        for a in self.group.take_answers() {
            let c = &mut self.clients[a.client];
            let lost = match sent {
                Some((id, timeout)) if id == a.id.0 && c.lose > 0 => {
                    c.lose -= 1;
                    Some(timeout)
                }
                _ => None,
            };
            let (body, due) = match lost {
                Some(timeout) => (None, now + timeout),
                None => (Some(a.body), now + c.answer_delay),
            };
            self.replies.push(Reply {
                client: a.client,
                route: a.route,
                id: a.id,
                version: a.version,
                body,
                due,
            });
        }
    }

    /// Delivers the answers that are due.
    pub fn deliver(&mut self) -> bool {
        self.take_answers(None);
        let now = self.now();
        let at = self.at();
        let (due, later): (Vec<Reply>, Vec<Reply>) = std::mem::take(&mut self.replies)
            .into_iter()
            .partition(|r| r.due <= now);
        self.replies = later;
        let mut busy = false;
        for r in due {
            let c = &mut self.clients[r.client];
            if !c.alive || c.in_flight.remove(&r.id).is_none() {
                continue;
            }
            busy = true;
            match r.body {
                Some(body) => {
                    if let Some(line) = M::describe_answer(r.id.0, r.version, &body) {
                        c.log.push(format!("{at:?} {line}"));
                    }
                    c.net.answered(r.route);
                    c.member.handle_response(
                        r.id,
                        r.version,
                        &body,
                        now,
                        &mut c.net.links,
                        &mut c.coordinator,
                        &mut c.cluster,
                    );
                }
                None => {
                    c.log.push(format!("answer {}: lost", r.id));
                    // The loop fails the request and closes its link.
                    c.member
                        .handle_failure(r.id, &Failure::TimedOut, now, &mut c.coordinator);
                    self.close(r.client, r.route, "request timed out");
                }
            }
            self.drain_events(r.client);
        }
        busy
    }

    /// Takes client `i`'s events: callbacks go to its user thread.
    pub fn drain_events(&mut self, i: usize) -> bool {
        let now = self.now();
        let at = self.at();
        let c = &mut self.clients[i];
        let mut any = false;
        while let Some(e) = c.member.poll_event() {
            any = true;
            match e {
                MemberEvent::Callback {
                    token,
                    kind,
                    partitions,
                    owned,
                } => {
                    assert!(c.pending.is_none(), "client {i}: two callbacks outstanding");
                    c.log
                        .push(format!("{at:?} {kind} {partitions:?} owned {owned:?}"));
                    c.callbacks.push((kind, partitions.clone(), owned.clone()));
                    c.pending = Some(Pending {
                        token,
                        kind,
                        partitions,
                        owned,
                        due: c.callback_delay.map(|d| now + d),
                    });
                }
                MemberEvent::Identity(id) => c.identities.push(id),
                MemberEvent::Error { error, fatal } => c.errors.push((error, fatal)),
                MemberEvent::Left => c.lefts += 1,
                MemberEvent::Rebalance(phase) => c.rebalances.push((now, phase)),
            }
        }
        any
    }

    fn check_all(&self) {
        if self.check {
            self.group.check();
            M::check(self);
        }
    }

    /// Runs every client until nothing more happens at this instant.
    pub fn settle(&mut self) {
        for _ in 0..500 {
            let now = self.now();
            self.group.tick(now);
            self.take_answers(None);
            let mut busy = false;
            for i in 0..self.clients.len() {
                busy |= self.step(i);
                self.saw(i);
                self.check_all();
            }
            busy |= self.deliver();
            self.check_all();
            if !busy {
                return;
            }
        }
        panic!("still busy after 500 rounds at one instant: a busy loop");
    }

    /// The next instant anything has something to do (never a passed one).
    pub fn next_timer(&self) -> Option<Instant> {
        let now = self.now();
        let mut next = self.group.next_deadline(now);
        let mut at = |t: Option<Instant>| {
            if let Some(t) = t.filter(|t| *t > now) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for r in &self.replies {
            at(Some(r.due));
        }
        for c in self.clients.iter().filter(|c| c.alive) {
            let m = c.member.poll_timeout(now);
            assert!(
                m.is_none_or(|t| t > now),
                "poll_timeout named a passed instant"
            );
            at(m);
            at(c.coordinator.poll_timeout(now));
            at(c.cluster.poll_timeout(now));
            at(c.net.links.poll_timeout(now));
            at(c.pending.as_ref().and_then(|p| p.due));
        }
        next
    }

    /// Runs the simulation for `d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now() + d;
        loop {
            self.settle();
            match self.next_timer().filter(|t| *t <= end) {
                Some(t) => {
                    self.clock.advance_to(t);
                }
                None => {
                    self.clock.advance_to(end);
                    self.settle();
                    return;
                }
            }
        }
    }

    /// Runs until `done` holds (checked at every instant), at most `limit`.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) {
        let end = self.now() + limit;
        loop {
            self.settle();
            if done(self) {
                return;
            }
            match self.next_timer().filter(|t| *t <= end) {
                Some(t) => {
                    self.clock.advance_to(t);
                }
                None => panic!("not done within {limit:?}: {}", M::describe(self)),
            }
        }
    }

    /// The first intercepted request of client `i` that `which` accepts, within `limit`.
    pub fn next_request_where(
        &mut self,
        i: usize,
        limit: Duration,
        which: impl Fn(&Transmit) -> bool,
    ) -> Transmit {
        let end = self.now() + limit;
        loop {
            self.settle();
            let c = &mut self.clients[i];
            if let Some(k) = c.intercepted.iter().position(&which) {
                return c.intercepted.remove(k);
            }
            match self.next_timer().filter(|t| *t <= end) {
                Some(t) => {
                    self.clock.advance_to(t);
                }
                None => panic!("no such request within {limit:?}"),
            }
        }
    }

    /// Answers intercepted request `t` of client `i` with `body`.
    pub fn answer_body(&mut self, i: usize, t: &Transmit, body: Vec<u8>) {
        self.push_answer(Answer {
            client: i,
            route: t.route,
            id: t.tag.id,
            version: t.version,
            body,
        });
        self.settle();
    }

    /// Checks that client `i` stopped for good with one fatal `code` naming `words`, and
    /// sends nothing for a minute.
    pub fn assert_fatal(&mut self, i: usize, code: ErrorCode, words: &[&str]) {
        let c = &self.clients[i];
        assert!(c.member.is_fatal(), "{code}");
        let fatal: Vec<&(Error, bool)> = c.errors.iter().filter(|(_, f)| *f).collect();
        assert_eq!(fatal.len(), 1, "{code}: {:?}", c.errors);
        let e = &fatal[0].0;
        assert_eq!(e.kafka_code(), Some(code.code()), "{e}");
        assert!(!e.is_retriable(), "{e}");
        let text = e.to_string();
        assert!(text.contains("group g"), "{text}");
        for w in words {
            assert!(text.contains(w), "{code}: {text:?} lacks {w:?}");
        }
        assert!(
            c.identities
                .last()
                .is_none_or(|id| *id == Identity::Outsider),
            "{code}: commits no longer speak for the member: {:?}",
            c.identities
        );
        let sent = c.sent.len();
        self.clients[i].intercept = false;
        self.run_for(Duration::from_secs(60));
        let c = &self.clients[i];
        assert_eq!(c.sent.len(), sent, "{code}: nothing after a fatal error");
        assert_eq!(c.member.poll_timeout(self.now()), None);
    }
}
