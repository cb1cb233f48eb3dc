//! The user side of group membership: subscribing, running the application's
//! [`RebalanceListener`] when the member asks for it, auto-commit, and leaving.
//!
//! The member runs on the I/O thread; every change of this consumer's partitions comes from
//! it as a rebalance event, which `poll` turns into a listener call on this thread and then
//! answers with one message (`CallbackDone`), which carries the assignment it ends with:
//! the group component hands that to the fetcher and the commits.
//!
//! Invariants:
//! 1. A rebalance event is answered only after its listener method returned (or panicked),
//!    and the answer carries the assignment it ends with: the member never releases a
//!    partition whose revocation callback has not run.
//! 4. Inside `on_partitions_assigned`, the new assignment reaches the I/O thread before any
//!    other command of the listener's (a seek, a pause, a commit) and before `position`
//!    waits for the fetcher, so they apply to the new partitions.
//! 2. Revoked and lost partitions leave the assignment after their callback, and their
//!    buffered records and errors go with them: `poll` never returns them afterwards.
//! 3. Auto-commit commits only positions `poll` has returned, and never lost partitions.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::consumer::Consumer;
use crate::error::{Error, ErrorKind, Result};
use crate::group::member::{CallbackKind, CallbackToken, Subscription, TopicPattern};
use crate::io::Command;
use crate::listener::{GroupMetadata, RebalanceListener};
use crate::types::{Identity, TopicPartition};

/// A rebalance callback the member waits for.
pub(crate) struct PendingCallback {
    pub token: CallbackToken,
    pub kind: CallbackKind,
    pub partitions: Vec<TopicPartition>,
    pub owned: Vec<TopicPartition>,
}

/// What the application subscribed to, as it said it.
#[derive(Debug, Clone)]
pub(crate) enum Subscribed {
    Topics(Vec<String>),
    Pattern,
}

/// The consumer's group state on the user side.
#[derive(Default)]
pub(crate) struct GroupState {
    pub subscribed: Option<Subscribed>,
    pub listener: Option<Box<dyn RebalanceListener>>,
    pub pending: VecDeque<PendingCallback>,
    pub identity: Option<Identity>,
    /// The member stopped for good and `poll` has not said so yet (it does once, see
    /// [`Consumer::take_fatal`]).
    pub fatal: Option<Error>,
    /// A listener method is running (some calls are refused meanwhile).
    pub in_callback: bool,
    /// The next periodic auto-commit.
    pub next_auto_commit: Option<Instant>,
    /// An assigned callback is running and the I/O thread has not been told the new
    /// assignment yet (invariant 4).
    pub assignment_unsent: bool,
}

impl Consumer {
    /// Joins the group (`group.id`) with a subscription to `topics`: the group's members
    /// share their partitions, and the group moves them as members come and go. Replaces an
    /// earlier subscription; an empty list unsubscribes. Partitions arrive through `poll`
    /// (see [`subscribe_with_listener`](Consumer::subscribe_with_listener) to hear about
    /// them).
    ///
    /// Errors: [`ErrorKind::Config`] without a `group.id` or for an empty topic name;
    /// [`ErrorKind::InvalidState`] while partitions are assigned by hand
    /// ([`assign`](Consumer::assign)) or from inside a rebalance callback.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        self.subscribe_as(topics, None)
    }

    /// Like [`subscribe`](Consumer::subscribe), and `listener` hears about every partition
    /// this consumer gets or gives up, on this thread, inside `poll` (see
    /// [`RebalanceListener`] for the contract).
    pub fn subscribe_with_listener<L: RebalanceListener + 'static>(
        &mut self,
        topics: &[&str],
        listener: L,
    ) -> Result<()> {
        self.subscribe_as(topics, Some(Box::new(listener)))
    }

    /// Subscribes to every topic whose whole name matches the regular expression `pattern`
    /// (internal topics excluded), re-evaluated as topics are created and deleted (each
    /// metadata refresh, `metadata.max.age.ms`). The pattern is matched by this client, as
    /// the Java classic consumer does; syntax: the `regex` crate's (close to Java's for
    /// topic patterns).
    ///
    /// Errors: as [`subscribe`](Consumer::subscribe), and [`ErrorKind::Config`] for an
    /// invalid pattern.
    pub fn subscribe_regex(&mut self, pattern: &str) -> Result<()> {
        self.subscribe_regex_as(pattern, None)
    }

    /// [`subscribe_regex`](Consumer::subscribe_regex) with a listener.
    pub fn subscribe_regex_with_listener<L: RebalanceListener + 'static>(
        &mut self,
        pattern: &str,
        listener: L,
    ) -> Result<()> {
        self.subscribe_regex_as(pattern, Some(Box::new(listener)))
    }

    fn subscribe_as(
        &mut self,
        topics: &[&str],
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        if topics.is_empty() {
            return self.unsubscribe();
        }
        if let Some(t) = topics.iter().find(|t| t.trim().is_empty()) {
            return Err(Error::config(format!("invalid topic name {t:?}")));
        }
        let mut list: Vec<String> = topics.iter().map(|t| (*t).to_owned()).collect();
        list.sort();
        list.dedup();
        let sub = Subscription::Topics(list.iter().cloned().collect());
        self.start_subscription(Subscribed::Topics(list), sub, listener)
    }

    fn subscribe_regex_as(
        &mut self,
        pattern: &str,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        let compiled = TopicPattern::new(pattern)?;
        self.start_subscription(
            Subscribed::Pattern,
            Subscription::Pattern(compiled),
            listener,
        )
    }

    fn start_subscription(
        &mut self,
        subscribed: Subscribed,
        sub: Subscription,
        listener: Option<Box<dyn RebalanceListener>>,
    ) -> Result<()> {
        self.check_open()?;
        self.check_not_in_callback("subscribe")?;
        self.cfg.validate_group()?;
        if self.group.subscribed.is_none() && !self.assignment.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidState,
                "subscribe: partitions are assigned by hand; call assign(&[]) first",
            ));
        }
        // A member that stopped for good is replaced by this subscription (on the I/O
        // thread): what it owned is lost first, to the listener that heard of it, even when
        // `poll` has not reported the error yet.
        self.drain();
        if self.group.fatal.take().is_some() {
            self.give_up_partitions()?;
        }
        self.group.subscribed = Some(subscribed);
        self.group.listener = listener;
        self.note_unassigned();
        self.io.poll_clock.polled();
        if self.cfg.enable_auto_commit && self.group.next_auto_commit.is_none() {
            self.group.next_auto_commit = Instant::now().checked_add(self.cfg.auto_commit_interval);
        }
        self.send(Command::Subscribe(sub))
    }

    /// Leaves the group: commits what `poll` returned (with auto-commit), runs
    /// `on_partitions_revoked` for every owned partition (`on_partitions_lost` if the
    /// member was no longer in the group), and sends LeaveGroup (not for a static member,
    /// which keeps its place until `session.timeout.ms`). Waits for the leave up to
    /// `default.api.timeout.ms`. Does nothing when not subscribed.
    pub fn unsubscribe(&mut self) -> Result<()> {
        self.check_open()?;
        self.check_not_in_callback("unsubscribe")?;
        if self.group.subscribed.is_none() {
            return Ok(());
        }
        let deadline = Instant::now().checked_add(self.cfg.default_api_timeout);
        let r = self.leave_group(deadline);
        self.group.subscribed = None;
        self.group.listener = None;
        self.group.fatal = None;
        self.note_unassigned();
        r
    }

    /// The topics subscribed to: the list given to `subscribe`, or, for a pattern, the
    /// topics it matches now (as far as the metadata knows). Empty when not subscribed.
    pub fn subscription(&mut self) -> Result<Vec<String>> {
        match self.group.subscribed.clone() {
            None => Ok(Vec::new()),
            Some(Subscribed::Topics(t)) => Ok(t),
            Some(Subscribed::Pattern) => {
                self.check_open()?;
                let (tx, rx) = crossbeam_channel::bounded(1);
                self.send(Command::SubscribedTopics { reply: tx })?;
                rx.recv_timeout(self.cfg.default_api_timeout)
                    .map_err(|_| Error::timeout("reading the subscription timed out"))
            }
        }
    }

    /// This consumer's group, generation and member id (generation -1 and an empty member
    /// id while it is not in a generation, for instance with manually assigned
    /// partitions). `None` without a `group.id`.
    pub fn group_metadata(&mut self) -> Option<GroupMetadata> {
        self.drain();
        let group_id = self.cfg.group_id.clone()?;
        let id = self.group.identity.clone().unwrap_or(Identity::Outsider);
        Some(GroupMetadata {
            group_id,
            generation_id: id.generation_or_epoch(),
            member_id: id.member_id().to_owned(),
            group_instance_id: self
                .cfg
                .group_instance_id
                .clone()
                .or_else(|| id.instance_id().map(str::to_owned)),
        })
    }

    /// The fatal group error `poll` has not returned yet, if any (and the consumer is still
    /// subscribed). As the Java client does with a member in its fatal state, the member's
    /// partitions are lost (not revoked: it is out of the group, so nothing is committed),
    /// and the consumer owns none until the next `subscribe`; so the error is returned once,
    /// and later polls wait out their timeout instead of failing at once.
    pub(crate) fn take_fatal(&mut self) -> Result<Option<Error>> {
        if !self.subscribed() {
            return Ok(None);
        }
        let Some(e) = self.group.fatal.take() else {
            return Ok(None);
        };
        self.give_up_partitions()?;
        Ok(Some(e))
    }

    /// Runs `on_partitions_lost` for every partition owned (a panic in it is logged: the
    /// fatal error is what the caller hears about) and makes the assignment empty.
    fn give_up_partitions(&mut self) -> Result<()> {
        let owned = self.assignment.clone();
        if !owned.is_empty() {
            let _ = self.call_listener(CallbackKind::Lost, &owned);
        }
        self.group.pending.clear();
        self.set_owned(&[])
    }

    pub(crate) fn check_not_in_callback(&self, what: &str) -> Result<()> {
        if self.group.in_callback {
            return Err(Error::new(
                ErrorKind::InvalidState,
                format!("{what} may not be called from a rebalance callback"),
            ));
        }
        Ok(())
    }

    /// Whether partitions come from the group rather than `assign`.
    pub(crate) fn subscribed(&self) -> bool {
        self.group.subscribed.is_some()
    }

    /// Runs the rebalance callbacks the member waits for, in order. Returns the first
    /// listener panic as an error (after every callback was answered).
    pub(crate) fn run_rebalances(&mut self) -> Result<()> {
        let mut first_panic = None;
        while let Some(cb) = self.group.pending.pop_front() {
            if self.group.subscribed.is_none() {
                // Left meanwhile: the member forgot the callback; nothing to run.
                continue;
            }
            let outcome = match cb.kind {
                CallbackKind::Revoked => {
                    // As Java: their buffered records go (the group component stopped
                    // their fetches); positions stay, for the commit and the listener.
                    self.drop_buffered(&cb.partitions);
                    self.auto_commit_sync("before revoking partitions");
                    let r = self.call_listener(cb.kind, &cb.partitions);
                    self.own(&cb.owned)?;
                    r
                }
                CallbackKind::Lost => {
                    let r = if cb.partitions.is_empty() {
                        Ok(())
                    } else {
                        self.call_listener(cb.kind, &cb.partitions)
                    };
                    self.own(&cb.owned)?;
                    r
                }
                CallbackKind::Assigned => {
                    self.own(&cb.owned)?;
                    self.group.assignment_unsent = true;
                    let r = self.call_listener(cb.kind, &cb.partitions);
                    self.group.assignment_unsent = false;
                    r
                }
            };
            log::info!(
                "group {}: {} ran for {} partitions, now owning {}",
                self.cfg.group_id.as_deref().unwrap_or(""),
                cb.kind,
                cb.partitions.len(),
                cb.owned.len()
            );
            let assignment = self.fetch_list();
            self.send(Command::CallbackDone {
                token: cb.token,
                assignment,
            })?;
            if let Err(e) = outcome {
                first_panic.get_or_insert(e);
            }
        }
        first_panic.map_or(Ok(()), Err)
    }

    /// Drops the buffered records of `partitions`, which are about to be revoked.
    fn drop_buffered(&mut self, partitions: &[TopicPartition]) {
        let set: std::collections::HashSet<&TopicPartition> = partitions.iter().collect();
        self.queue.retain(|c| !set.contains(&c.tp));
    }

    /// Sends the assignment an assigned callback set up, if the I/O thread does not have it
    /// yet (invariant 4): before a command of the listener's, or a wait for the fetcher.
    pub(crate) fn flush_assignment(&mut self) -> Result<()> {
        if std::mem::take(&mut self.group.assignment_unsent) {
            let list = self.fetch_list();
            self.send(Command::Assign(list))?;
        }
        Ok(())
    }

    /// Calls the listener's method for `kind`, if there is a listener. A panic is caught
    /// and returned as an error of kind [`ErrorKind::Listener`].
    fn call_listener(&mut self, kind: CallbackKind, partitions: &[TopicPartition]) -> Result<()> {
        let Some(mut listener) = self.group.listener.take() else {
            return Ok(());
        };
        self.group.in_callback = true;
        let result = panic::catch_unwind(AssertUnwindSafe(|| match kind {
            CallbackKind::Revoked => listener.on_partitions_revoked(self, partitions),
            CallbackKind::Assigned => listener.on_partitions_assigned(self, partitions),
            CallbackKind::Lost => listener.on_partitions_lost(self, partitions),
        }));
        self.group.in_callback = false;
        // A subscribe from inside the callback is refused, so the listener is still ours.
        self.group.listener = Some(listener);
        result.map_err(|payload| {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".to_owned());
            let e = Error::new(ErrorKind::Listener, format!("{kind} panicked: {what}"));
            log::error!("{e}");
            e
        })
    }

    /// Commits every consumed position and waits (auto-commit only); a failure is logged,
    /// as the Java client does, and the rebalance goes on.
    pub(crate) fn auto_commit_sync(&mut self, why: &str) {
        if !self.cfg.enable_auto_commit || self.cfg.group_id.is_none() {
            return;
        }
        let offsets = self.consumed_offsets();
        if offsets.is_empty() {
            return;
        }
        match self.commit_offsets_sync(&offsets) {
            Ok(()) => log::debug!("auto-committed {} partitions {why}", offsets.len()),
            Err(e) => log::warn!("auto-commit {why} failed: {e}"),
        }
        if let Some(next) = Instant::now().checked_add(self.cfg.auto_commit_interval) {
            self.group.next_auto_commit = Some(next);
        }
    }

    /// The periodic auto-commit, from `poll`: an asynchronous commit of what earlier polls
    /// returned, every `auto.commit.interval.ms`.
    pub(crate) fn maybe_auto_commit(&mut self) -> Result<()> {
        if !self.cfg.enable_auto_commit || self.cfg.group_id.is_none() {
            return Ok(());
        }
        let now = Instant::now();
        let due = self.group.next_auto_commit.get_or_insert_with(|| {
            now.checked_add(self.cfg.auto_commit_interval)
                .unwrap_or(now)
        });
        if now < *due {
            return Ok(());
        }
        self.group.next_auto_commit = now.checked_add(self.cfg.auto_commit_interval);
        let offsets = self.consumed_offsets();
        if offsets.is_empty() {
            return Ok(());
        }
        log::debug!("auto-committing {} partitions", offsets.len());
        self.commit_offsets_async(offsets, None)
    }

    /// Gives the partitions up and leaves the group (unsubscribe, close), within
    /// `deadline`.
    pub(crate) fn leave_group(&mut self, deadline: Option<Instant>) -> Result<()> {
        // What the member asked for before runs first, so the partitions given up are the
        // ones it knows of (and a member that stopped for good is known as out of the group:
        // its partitions are lost, not revoked).
        self.drain();
        let pending = self.run_rebalances();
        let owned = self.assignment.clone();
        let in_generation = self.group.identity.as_ref().is_some_and(Identity::in_group);
        let callback = if in_generation {
            self.auto_commit_sync("before leaving the group");
            self.call_listener(CallbackKind::Revoked, &owned)
        } else if !owned.is_empty() {
            self.call_listener(CallbackKind::Lost, &owned)
        } else {
            Ok(())
        };
        self.set_owned(&[])?;
        self.group.pending.clear();
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.send(Command::Leave { reply: tx })?;
        let left = match deadline {
            Some(d) => rx.recv_deadline(d).is_ok(),
            None => rx.recv().is_ok(),
        };
        if !left {
            log::warn!("leaving the group did not finish in time");
        }
        pending.and(callback)
    }

    /// The longest a leave during close may take out of the close timeout.
    pub(crate) fn leave_budget(timeout: Duration) -> Duration {
        timeout.mul_f64(0.8)
    }
}
