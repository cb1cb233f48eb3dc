//! The public consumer: the user side of the channels to the I/O thread.
//!
//! Invariants:
//! 1. `poll` never returns a record fetched under an older position epoch (before a seek,
//!    pause, resume or re-assignment) or one that does not continue the partition's
//!    position: stale data is dropped at hand-off.
//! 2. A seek that is not resolved yet (`seek_to_beginning`, `seek_to_end`, a reset) stays
//!    the partition's target through `pause` and `resume`; nothing falls back to
//!    `auto.offset.reset` behind the user's back.
//! 3. Once the I/O thread has stopped (an error or a panic), every call returns a
//!    [`ErrorKind::Closed`] error that says why.
//! 4. Calls that change several partitions check them all before changing any.
//! 5. The figures of [`Consumer::metrics`] that depend on partitions are kept as they
//!    change, never computed by walking them: every change of a position, end or log start
//!    recounts that partition's lag and lead, a partition that leaves the assignment stops
//!    counting, and the queue's record count follows every chunk in and out.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};

use crate::config::ConsumerConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::fetch::chunk::Chunk;
use crate::fetch::fetcher::SeekTo;
use crate::group::commit::Committed;
use crate::io::{self, Command, Event, IoHandle};
use crate::metrics::stats::UserStats;
use crate::metrics::{Metrics, PartitionMetrics};
use crate::protocol::api::list_offsets;
use crate::record::ConsumerRecords;
use crate::types::{CallId, LeaderEpoch, NodeId, OffsetReset, PositionEpoch, TopicPartition};

mod group;

use self::group::{GroupState, PendingCallback};

/// How long [`Drop`] waits for the I/O thread to stop.
const DROP_CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// An offset found by [`Consumer::offsets_for_times`], with the timestamp of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndTimestamp {
    /// The offset of the first record at or after the requested timestamp.
    pub offset: i64,
    /// That record's timestamp.
    pub timestamp: i64,
}

/// An offset to commit, or one the group has committed: the offset of the next record to
/// read, the leader epoch of the last record read (lets the next reader detect log
/// truncation), and free-form metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAndMetadata {
    /// The offset of the next record to read.
    pub offset: i64,
    /// The leader epoch of the last record read, if known.
    pub leader_epoch: Option<i32>,
    /// Metadata stored with the offset (at most the broker's `offset.metadata.max.bytes`).
    pub metadata: String,
}

impl OffsetAndMetadata {
    /// An offset with no leader epoch and empty metadata.
    pub fn new(offset: i64) -> OffsetAndMetadata {
        OffsetAndMetadata {
            offset,
            leader_epoch: None,
            metadata: String::new(),
        }
    }
}

/// Called with the result of an asynchronous commit, on the application's thread, during
/// a later [`Consumer::poll`], [`Consumer::commit_sync`] or [`Consumer::close`].
pub type CommitCallback =
    Box<dyn FnOnce(&HashMap<TopicPartition, OffsetAndMetadata>, Result<()>) + Send>;

#[derive(Debug)]
struct UserPart {
    /// Bumped by every seek, resume and (re)assignment; data from an older epoch is stale.
    epoch: PositionEpoch,
    /// Offset of the next record `poll` will return; `None` until known.
    position: Option<i64>,
    /// Leader epoch of the last record returned (for commits).
    leader_epoch: Option<i32>,
    /// Where the position is to come from while it is not known yet.
    target: SeekTo,
    paused: bool,
    /// The position cannot be found without a seek (auto.offset.reset=none): why.
    stuck: Option<Error>,
    end_offset: Option<i64>,
    /// The log start offset as the last fetch answer gave it.
    log_start: Option<i64>,
    /// The broker the last records came from.
    fetched_from: Option<NodeId>,
    /// The lag and lead this partition counts with in the consumer's [`UserStats`]
    /// (invariant 5).
    counted: LagLead,
}

/// A partition's lag (`end - position`, at least 0) and lead (`position - log start`),
/// where both ends are known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct LagLead {
    lag: Option<i64>,
    lead: Option<i64>,
}

impl UserPart {
    fn new(epoch: PositionEpoch) -> UserPart {
        UserPart {
            epoch,
            position: None,
            leader_epoch: None,
            target: SeekTo::Default,
            paused: false,
            stuck: None,
            fetched_from: None,
            end_offset: None,
            log_start: None,
            counted: LagLead::default(),
        }
    }

    fn lag_lead(&self) -> LagLead {
        LagLead {
            lag: self
                .position
                .zip(self.end_offset)
                .map(|(pos, end)| (end - pos).max(0)),
            lead: self
                .position
                .zip(self.log_start)
                .map(|(pos, start)| pos - start),
        }
    }

    /// Brings the partition's lag and lead in `stats` up to date after its position or
    /// ends changed (O(log n) of the distinct values).
    fn recount(&mut self, stats: &mut UserStats) {
        let now = self.lag_lead();
        if now != self.counted {
            stats.lags.replace(self.counted.lag, now.lag);
            stats.leads.replace(self.counted.lead, now.lead);
            self.counted = now;
        }
    }

    /// The partition leaves the assignment: it no longer counts.
    fn uncount(&mut self, stats: &mut UserStats) {
        stats.lags.replace(self.counted.lag, None);
        stats.leads.replace(self.counted.lead, None);
        self.counted = LagLead::default();
    }
}

/// A chunk waiting for `poll`.
#[derive(Debug)]
struct Queued {
    chunk: Arc<Chunk>,
    /// Index of the next record to return.
    next: usize,
    /// Arrival number: chunks are numbered in the order the I/O thread sent them.
    arrival: u64,
}

/// An error waiting for `poll`. It comes after the records of the chunks that arrived
/// before it and before those of later ones: a truncation is reported before the records
/// read again from where the logs diverge, even when both arrive in one drain.
#[derive(Debug)]
struct PendingError {
    error: Error,
    /// The arrival number of the first chunk that came after the error.
    before_arrival: u64,
}

/// The chunks handed over by the I/O thread, in arrival order; and how many records they
/// hold that `poll` has not returned, kept as they come and go (so [`Consumer::metrics`]
/// need not walk them).
#[derive(Default)]
struct Queue {
    chunks: VecDeque<Queued>,
    records: usize,
    /// The arrival number the next chunk gets.
    next_arrival: u64,
}

impl Queue {
    fn push(&mut self, c: Chunk) {
        self.records += c.records.len();
        self.chunks.push_back(Queued {
            chunk: Arc::new(c),
            next: 0,
            arrival: self.next_arrival,
        });
        self.next_arrival += 1;
    }

    /// Keeps the chunks `keep` says yes to.
    fn retain(&mut self, mut keep: impl FnMut(&Chunk) -> bool) {
        let records = &mut self.records;
        self.chunks.retain(|q| {
            let k = keep(&q.chunk);
            if !k {
                *records -= q.chunk.records.len() - q.next;
            }
            k
        });
    }

    fn pop_front(&mut self) {
        if let Some(q) = self.chunks.pop_front() {
            self.records -= q.chunk.records.len() - q.next;
        }
    }

    fn clear(&mut self) {
        self.chunks.clear();
        self.records = 0;
    }
}

/// Interrupts a blocked call of a [`Consumer`] from another thread.
///
/// ```no_run
/// # use kafka_consumer::{Consumer, ConsumerConfig, ErrorKind};
/// # use std::time::Duration;
/// let mut consumer = Consumer::new(ConsumerConfig::new("127.0.0.1:9092"))?;
/// let wakeup = consumer.wakeup_handle();
/// std::thread::spawn(move || wakeup.wakeup());
/// match consumer.poll(Duration::from_secs(60)) {
///     Err(e) if e.kind() == ErrorKind::Wakeup => log::info!("woken up, shutting down"),
///     Err(e) => return Err(e),
///     Ok(records) => log::info!("{} records", records.len()),
/// }
/// # Ok::<(), kafka_consumer::Error>(())
/// ```
#[derive(Clone)]
pub struct WakeupHandle {
    flag: Arc<AtomicBool>,
    tx: Sender<()>,
}

impl WakeupHandle {
    /// Makes the current blocking call of the consumer (`poll`, `position`,
    /// `partitions_for`, `beginning_offsets`, `end_offsets`, `offsets_for_times`), or the
    /// next one if none is running, return an error of kind [`ErrorKind::Wakeup`]. Safe to
    /// call from any thread.
    pub fn wakeup(&self) {
        self.flag.store(true, Ordering::Release);
        let _ = self.tx.try_send(());
    }
}

impl std::fmt::Debug for WakeupHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WakeupHandle")
    }
}

/// A Kafka consumer. Create it with [`Consumer::new`], which starts its I/O thread; call
/// its methods from one thread at a time (it is `Send`, so it can move between threads).
///
/// ```no_run
/// use kafka_consumer::{Consumer, ConsumerConfig, OffsetReset, TopicPartition};
/// use std::time::Duration;
///
/// let config = ConsumerConfig::new("127.0.0.1:9092").auto_offset_reset(OffsetReset::Earliest);
/// let mut consumer = Consumer::new(config)?;
/// consumer.assign(&[TopicPartition::new("orders", 0), TopicPartition::new("orders", 1)])?;
/// loop {
///     let records = consumer.poll(Duration::from_millis(500))?;
///     for r in &records {
///         log::info!("{}-{} @{}: {:?}", r.topic(), r.partition(), r.offset(), r.value());
///     }
/// #   break;
/// }
/// consumer.close()?;
/// # Ok::<(), kafka_consumer::Error>(())
/// ```
///
/// Dropping a consumer closes it as [`Consumer::close`] does (waiting up to 30 seconds
/// for the I/O thread); errors are ignored. Call `close` to see them.
pub struct Consumer {
    cfg: ConsumerConfig,
    io: IoHandle,
    parts: HashMap<TopicPartition, UserPart>,
    assignment: Vec<TopicPartition>,
    queue: Queue,
    /// What this side counts for [`Consumer::metrics`].
    stats: UserStats,
    /// Errors for `poll` to return, in arrival order.
    errors: VecDeque<PendingError>,
    wakeup: Arc<AtomicBool>,
    wakeup_tx: Sender<()>,
    wakeup_rx: Receiver<()>,
    next_epoch: u64,
    next_call: CallId,
    closed: bool,
    /// Why the I/O thread stopped, once it has.
    stopped: Option<Error>,
    /// Asynchronous commits under way: what they commit and whom to tell.
    async_commits: HashMap<
        CallId,
        (
            HashMap<TopicPartition, OffsetAndMetadata>,
            Option<CommitCallback>,
        ),
    >,
    /// Asynchronous commits that finished, in order, whose callbacks have not run yet.
    commits_done: VecDeque<(CallId, Result<()>)>,
    /// Group membership (subscribe mode).
    group: GroupState,
    /// While closing: no blocking call may wait past this.
    close_deadline: Option<Instant>,
}

/// `now + timeout`, or `None` (wait for ever) when that is beyond what `Instant` holds.
fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

impl Consumer {
    /// Validates the configuration and starts the I/O thread. Connecting happens in the
    /// background; a broker that cannot be reached shows up as timeouts, not here.
    ///
    /// Errors: [`ErrorKind::Config`] for a configuration that cannot work (the message
    /// names the setting); [`ErrorKind::Io`] if the thread cannot be started.
    pub fn new(config: ConsumerConfig) -> Result<Consumer> {
        config.validate()?;
        let io = io::spawn(config.clone())?;
        let (wakeup_tx, wakeup_rx) = crossbeam_channel::bounded(1);
        Ok(Consumer {
            cfg: config,
            io,
            parts: HashMap::new(),
            assignment: Vec::new(),
            queue: Queue::default(),
            stats: UserStats::default(),
            errors: VecDeque::new(),
            wakeup: Arc::new(AtomicBool::new(false)),
            wakeup_tx,
            wakeup_rx,
            next_epoch: 1,
            next_call: CallId(1),
            closed: false,
            stopped: None,
            async_commits: HashMap::new(),
            commits_done: VecDeque::new(),
            group: GroupState::default(),
            close_deadline: None,
        })
    }

    fn epoch(&mut self) -> PositionEpoch {
        self.next_epoch += 1;
        PositionEpoch(self.next_epoch)
    }

    fn check_open(&self) -> Result<()> {
        if let Some(e) = &self.stopped {
            return Err(Error::stopped(e));
        }
        if self.closed {
            return Err(Error::closed());
        }
        Ok(())
    }

    fn send(&mut self, c: Command) -> Result<()> {
        self.check_open()?;
        if !matches!(c, Command::CallbackDone { .. }) {
            self.flush_assignment()?;
        }
        self.io.send(c).map_err(|e| {
            // The thread is gone: say why if it told us.
            self.drain();
            self.stopped.as_ref().map_or(e, Error::stopped)
        })
    }

    /// Assigns exactly these partitions (replacing any previous assignment). Partitions that
    /// stay assigned keep their position; new ones start from the group's committed offset
    /// (with a `group.id`) or `auto.offset.reset`, unless you [`seek`](Consumer::seek).
    /// Duplicates are ignored.
    ///
    /// Errors: [`ErrorKind::InvalidState`] while subscribed to a group (or from inside a
    /// rebalance callback); [`ErrorKind::Config`] for an invalid partition.
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.check_open()?;
        self.check_not_in_callback("assign")?;
        if self.subscribed() {
            return Err(Error::new(
                ErrorKind::InvalidState,
                "assign: the consumer is subscribed to a group; call unsubscribe first",
            ));
        }
        self.set_owned(partitions)
    }

    /// Makes `partitions` the assignment: the fetcher's, and the one `poll` returns records
    /// of (by `assign`, or by the group member after a rebalance callback).
    fn set_owned(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.own(partitions)?;
        let list = self.fetch_list();
        self.send(Command::Assign(list))
    }

    /// Makes `partitions` the assignment on this side (new ones get a position epoch);
    /// the I/O thread learns it from [`fetch_list`](Consumer::fetch_list).
    pub(crate) fn own(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.check_open()?;
        let mut seen = HashSet::new();
        let wanted: Vec<TopicPartition> = partitions
            .iter()
            .filter(|tp| seen.insert((*tp).clone()))
            .cloned()
            .collect();
        for tp in &wanted {
            if tp.partition() < 0 || tp.topic().is_empty() {
                return Err(Error::config(format!("invalid partition {tp}")));
            }
        }
        let stats = &mut self.stats;
        self.parts.retain(|tp, p| {
            let keep = seen.contains(tp);
            if !keep {
                p.uncount(stats);
            }
            keep
        });
        for tp in &wanted {
            if !self.parts.contains_key(tp) {
                let epoch = self.epoch();
                self.parts.insert(tp.clone(), UserPart::new(epoch));
            }
        }
        self.queue.retain(|c| seen.contains(&c.tp));
        self.errors
            .retain(|p| p.error.partition().is_none_or(|tp| seen.contains(tp)));
        self.assignment = wanted;
        self.note_unassigned();
        Ok(())
    }

    /// Starts or stops the clock of time without partitions (subscribed, none owned).
    pub(crate) fn note_unassigned(&mut self) {
        let unassigned = self.subscribed() && self.assignment.is_empty();
        self.stats.unassigned.set(unassigned, Instant::now());
    }

    /// The assignment as the fetcher takes it: each partition with its position epoch and
    /// where to start (a partition whose epoch the fetcher has keeps its state).
    pub(crate) fn fetch_list(&self) -> Vec<(TopicPartition, PositionEpoch, SeekTo)> {
        self.assignment
            .iter()
            .filter_map(|tp| self.parts.get(tp).map(|p| (tp.clone(), p.epoch, p.target)))
            .collect()
    }

    /// The partitions currently assigned, in the order given to [`assign`](Consumer::assign).
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment.clone()
    }

    fn not_assigned(tp: &TopicPartition) -> Error {
        Error::new(
            ErrorKind::NotAssigned,
            format!("partition {tp} is not assigned"),
        )
        .with_partition(tp.clone())
    }

    fn check_assigned(&self, partitions: &[TopicPartition]) -> Result<()> {
        match partitions.iter().find(|tp| !self.parts.contains_key(tp)) {
            Some(tp) => Err(Self::not_assigned(tp)),
            None => Ok(()),
        }
    }

    /// Moves `tp` to `to` under a new epoch: buffered data and errors for it are dropped.
    fn seek_to(&mut self, tp: &TopicPartition, to: SeekTo, resume: bool) -> Result<()> {
        self.check_open()?;
        let epoch = self.epoch();
        let p = self
            .parts
            .get_mut(tp)
            .ok_or_else(|| Self::not_assigned(tp))?;
        p.epoch = epoch;
        p.stuck = None;
        p.target = to;
        p.leader_epoch = None;
        p.position = match to {
            SeekTo::Offset(o) => Some(o),
            _ => None,
        };
        if resume {
            p.paused = false;
        }
        p.recount(&mut self.stats);
        self.queue.retain(|c| c.tp != *tp);
        self.errors.retain(|p| p.error.partition() != Some(tp));
        self.send(Command::Seek {
            tp: tp.clone(),
            epoch,
            to,
            resume,
        })
    }

    /// Sets the offset the next `poll` reads `tp` from. Records already fetched from the
    /// old position are discarded. An offset outside the log is handled on the next fetch
    /// by `auto.offset.reset`. A paused partition stays paused.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(Error::config(format!(
                "cannot seek {tp} to negative offset {offset}"
            )));
        }
        self.seek_to(tp, SeekTo::Offset(offset), false)
    }

    /// Moves these partitions to their first offset (evaluated lazily, on the next `poll`
    /// or `position`).
    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.check_assigned(partitions)?;
        partitions
            .iter()
            .try_for_each(|tp| self.seek_to(tp, SeekTo::Beginning, false))
    }

    /// Moves these partitions to their end (the high watermark, or the last stable offset
    /// under read_committed), evaluated lazily.
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.check_assigned(partitions)?;
        partitions
            .iter()
            .try_for_each(|tp| self.seek_to(tp, SeekTo::End, false))
    }

    /// Stops returning records of these partitions from `poll` (and stops fetching them)
    /// until [`resume`](Consumer::resume). Positions and pending seeks do not change.
    /// Fails without pausing anything if a partition is not assigned.
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.check_open()?;
        self.check_assigned(partitions)?;
        for tp in partitions {
            if let Some(p) = self.parts.get_mut(tp) {
                p.paused = true;
            }
        }
        let set: HashSet<&TopicPartition> = partitions.iter().collect();
        // Buffered data is dropped; resume fetches again from the position.
        self.queue.retain(|c| !set.contains(&c.tp));
        self.send(Command::Pause(partitions.to_vec()))
    }

    /// Resumes paused partitions from their current positions (or their pending seek).
    /// Fails without resuming anything if a partition is not assigned.
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.check_open()?;
        self.check_assigned(partitions)?;
        for tp in partitions {
            let Some(p) = self.parts.get(tp) else {
                continue;
            };
            if !p.paused {
                continue;
            }
            // Buffered data was dropped at pause: fetch again from the position, or go on
            // towards the seek that was still pending.
            let to = p.position.map_or(p.target, SeekTo::Offset);
            self.seek_to(tp, to, true)?;
        }
        Ok(())
    }

    /// The partitions currently paused.
    pub fn paused(&self) -> Vec<TopicPartition> {
        let mut v: Vec<TopicPartition> = self
            .parts
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(tp, _)| tp.clone())
            .collect();
        v.sort();
        v
    }

    /// A handle that interrupts a blocked call from another thread.
    pub fn wakeup_handle(&self) -> WakeupHandle {
        WakeupHandle {
            flag: Arc::clone(&self.wakeup),
            tx: self.wakeup_tx.clone(),
        }
    }

    fn take_wakeup(&self) -> Result<()> {
        if self.wakeup.swap(false, Ordering::AcqRel) {
            let _ = self.wakeup_rx.try_recv();
            Err(Error::wakeup())
        } else {
            Ok(())
        }
    }

    /// The fetcher found `tp`'s log truncated below its fetch position (KIP-320) and
    /// stopped the partition. Reading resumes where the log and what `poll` returned still
    /// agree: at the consumer's position when that is at or before the divergence (nothing
    /// it returned is gone: no error, as in Java, only the prefetched data is dropped);
    /// else at the divergence, with a LogTruncation error; where the divergence is unknown,
    /// where `auto.offset.reset` says, with the error. With `auto.offset.reset=none` the
    /// partition stays stopped and the error asks for a seek.
    fn truncated(
        &mut self,
        tp: TopicPartition,
        epoch: PositionEpoch,
        fetch_offset: i64,
        divergent: Option<(i64, LeaderEpoch)>,
    ) {
        let Some(p) = self.parts.get(&tp).filter(|p| p.epoch == epoch) else {
            return;
        };
        let position = p.position.unwrap_or(fetch_offset);
        if let Some((at, _)) = divergent.filter(|&(at, _)| position <= at) {
            log::info!(
                "partition {tp}: records prefetched from offset {at} on are gone from the log (never returned); fetching again from the position {position}"
            );
            self.seek_internally(&tp, SeekTo::Offset(position));
            return;
        }
        let what = match divergent {
            Some((at, leader_epoch)) => format!(
                "partition {tp}: the log was truncated below this consumer's position {position}: leader epoch {} now ends at offset {at}, so the records consumed from {at} to {} are no longer in the log",
                leader_epoch.0,
                position - 1
            ),
            None => format!(
                "partition {tp}: the log was truncated below this consumer's position {position}, and the leader has no offsets for the leader epoch of the records consumed, so where it differs is unknown"
            ),
        };
        let resume = match (divergent, self.cfg.auto_offset_reset) {
            (_, OffsetReset::None) => None,
            (Some((at, _)), _) => Some(SeekTo::Offset(at)),
            (None, OffsetReset::Earliest) => Some(SeekTo::Beginning),
            (None, _) => Some(SeekTo::End),
        };
        let whence = match resume {
            Some(SeekTo::Offset(o)) => format!("reading resumes at offset {o}"),
            Some(SeekTo::Beginning) => {
                "reading restarts at the earliest offset (auto.offset.reset)".to_owned()
            }
            Some(_) => "reading restarts at the latest offset (auto.offset.reset)".to_owned(),
            None => "auto.offset.reset is none: seek to go on".to_owned(),
        };
        let mut error = Error::new(ErrorKind::LogTruncation, format!("{what}; {whence}"))
            .with_partition(tp.clone())
            .with_offset(position);
        if let Some((at, _)) = divergent {
            error = error.with_divergent_offset(at);
        }
        log::warn!("{error}");
        match resume {
            Some(to) => {
                self.seek_internally(&tp, to);
                if let (SeekTo::Offset(_), Some((_, leader_epoch)), Some(p)) =
                    (to, divergent, self.parts.get_mut(&tp))
                {
                    p.leader_epoch = leader_epoch.known();
                }
            }
            None => {
                self.queue.retain(|c| c.tp != tp);
                if let Some(p) = self.parts.get_mut(&tp) {
                    p.stuck = Some(error.clone());
                }
            }
        }
        self.push_error(error);
    }

    /// Queues `error` for `poll`, after the chunks already queued.
    fn push_error(&mut self, error: Error) {
        self.errors.push_back(PendingError {
            error,
            before_arrival: self.queue.next_arrival,
        });
    }

    /// Whether an error of `kind` (about `tp`, or about nothing in particular when `None`)
    /// is already waiting.
    fn error_pending(&self, tp: Option<&TopicPartition>, kind: ErrorKind) -> bool {
        self.errors
            .iter()
            .any(|p| p.error.partition() == tp && p.error.kind() == kind)
    }

    /// A seek the consumer makes itself (after a truncation): like the application's, but
    /// a failure to reach the I/O thread only shows in the next call.
    fn seek_internally(&mut self, tp: &TopicPartition, to: SeekTo) {
        if let Err(e) = self.seek_to(tp, to, false) {
            log::debug!("partition {tp}: seek after a truncation not sent: {e}");
        }
    }

    /// Applies one event from the I/O thread.
    fn event(&mut self, ev: Event) {
        match ev {
            Event::Chunk(c) => {
                if let Some(p) = self.parts.get_mut(&c.tp) {
                    if p.epoch == c.epoch && !p.paused {
                        if c.end_offset >= 0 {
                            p.end_offset = Some(c.end_offset);
                            p.recount(&mut self.stats);
                        }
                        self.queue.push(c);
                    }
                }
            }
            Event::End {
                tp,
                epoch,
                end_offset,
                log_start_offset,
            } => {
                if let Some(p) = self.parts.get_mut(&tp).filter(|p| p.epoch == epoch) {
                    if end_offset >= 0 {
                        p.end_offset = Some(end_offset);
                    }
                    if log_start_offset >= 0 {
                        p.log_start = Some(log_start_offset);
                    }
                    p.recount(&mut self.stats);
                }
            }
            Event::Error(e, epoch) => {
                let stale = match (e.partition(), epoch) {
                    (Some(tp), Some(epoch)) => self.parts.get(tp).is_none_or(|p| p.epoch != epoch),
                    _ => false,
                };
                if stale {
                    return;
                }
                if matches!(e.kind(), ErrorKind::NoOffset | ErrorKind::OffsetOutOfRange) {
                    if let Some(p) = e.partition().and_then(|tp| self.parts.get_mut(tp)) {
                        p.stuck = Some(e.clone());
                    }
                }
                // One pending error per partition and kind: a partition that keeps
                // failing must not grow the queue.
                if !self.error_pending(e.partition(), e.kind()) {
                    self.push_error(e);
                }
            }
            Event::Truncated {
                tp,
                epoch,
                fetch_offset,
                divergent,
            } => self.truncated(tp, epoch, fetch_offset, divergent),
            Event::CommitDone { id, result } => self.commits_done.push_back((id, result)),
            Event::Rebalance {
                token,
                kind,
                partitions,
                owned,
            } => self.group.pending.push_back(PendingCallback {
                token,
                kind,
                partitions,
                owned,
            }),
            Event::Identity(id) => self.group.identity = Some(id),
            Event::GroupError { mut error, fatal } => {
                if fatal {
                    // Returned once by `poll`, which then gives the partitions up.
                    error.set_kind(ErrorKind::GroupFatal);
                    self.group.fatal = Some(error);
                    return;
                }
                if !self.errors.iter().any(|p| {
                    p.error.kind() == error.kind() && p.error.kafka_code() == error.kafka_code()
                }) {
                    self.push_error(error);
                }
            }
            Event::Stopped(e) => {
                self.stopped.get_or_insert(e);
            }
        }
    }

    /// Moves everything already in the channel into the queue without blocking.
    fn drain(&mut self) {
        while let Ok(ev) = self.io.events.try_recv() {
            self.event(ev);
        }
    }

    /// Waits for the next event until `deadline` (`None`: no limit). Returns false on
    /// timeout; a wakeup is an error.
    fn wait(&mut self, deadline: Option<Instant>) -> Result<bool> {
        let mut sel = Select::new();
        let events = sel.recv(&self.io.events);
        let wake = sel.recv(&self.wakeup_rx);
        let op = match deadline {
            Some(d) => match sel.select_deadline(d) {
                Ok(op) => op,
                Err(_) => return Ok(false),
            },
            None => sel.select(),
        };
        match op.index() {
            i if i == events => match op.recv(&self.io.events) {
                Ok(ev) => {
                    self.event(ev);
                    Ok(true)
                }
                Err(_) => {
                    let e = Error::new(ErrorKind::Closed, "the I/O thread ended");
                    self.stopped.get_or_insert(e);
                    self.check_open().map(|_| true)
                }
            },
            i if i == wake => {
                let _ = op.recv(&self.wakeup_rx);
                self.take_wakeup()?;
                Ok(true)
            }
            _ => Ok(true),
        }
    }

    /// Returns fetched records: at most `max.poll.records`, immediately when some are
    /// already buffered, otherwise as soon as some arrive or `timeout` passes (then empty).
    /// Any timeout is accepted; `Duration::MAX` waits for ever.
    ///
    /// Errors: [`ErrorKind::Wakeup`] after [`WakeupHandle::wakeup`];
    /// [`ErrorKind::Corrupt`] for a batch that failed its CRC check and
    /// [`ErrorKind::RecordTooLarge`] for one that does not fit in `fetch.buffer.bytes` (both
    /// name the partition and offset, and where to seek to skip the batch; records before
    /// it were returned, the position stays at the bad batch);
    /// [`ErrorKind::OffsetOutOfRange`] / [`ErrorKind::NoOffset`] when `auto.offset.reset`
    /// is `none`; [`ErrorKind::UnknownTopicOrPartition`] for an assigned partition that
    /// does not exist; [`ErrorKind::Unsupported`] for a broker that speaks no version of an
    /// API the consumer needs. The consumer stays usable after any of these. After the I/O
    /// thread stopped, every call returns [`ErrorKind::Closed`] with the reason.
    ///
    /// With a subscription: [`ErrorKind::GroupFatal`] when the group membership stopped for
    /// good (a setting the broker refuses, no authorization, a fenced static member; the
    /// message says which). It comes once, after `on_partitions_lost` ran for the
    /// partitions the consumer owned; later calls own no partition, so they wait up to
    /// `timeout` and return no records (a loop that logs errors and polls again does not
    /// spin), until `subscribe` is called again, as with the Java client.
    pub fn poll(&mut self, timeout: Duration) -> Result<ConsumerRecords> {
        self.check_open()?;
        self.check_not_in_callback("poll")?;
        self.io.poll_clock.polled();
        self.take_wakeup()?;
        let deadline = deadline_after(timeout);
        self.drain();
        self.maybe_auto_commit()?;
        loop {
            self.drain();
            self.run_commit_callbacks();
            self.check_open()?;
            self.run_rebalances()?;
            if let Some(e) = self.take_fatal()? {
                return Err(e);
            }
            let records = self.collect();
            if !records.is_empty() {
                return Ok(records);
            }
            if let Some(p) = self.errors.pop_front() {
                return Err(p.error);
            }
            if !self.wait(deadline)? {
                return Ok(ConsumerRecords::default());
            }
        }
    }

    /// Takes up to `max.poll.records` records from the front of the queue, dropping stale
    /// chunks and advancing positions (and counting what it returns, invariant 5); stops
    /// at the first chunk that arrived after a waiting error.
    fn collect(&mut self) -> ConsumerRecords {
        let max = self.cfg.max_poll_records;
        let barrier = self.errors.front().map(|p| p.before_arrival);
        let mut out = ConsumerRecords::default();
        let mut n = 0;
        let mut bytes = 0u64;
        while n < max {
            let Some(Queued {
                chunk,
                next: idx,
                arrival,
            }) = self.queue.chunks.front_mut()
            else {
                break;
            };
            if barrier.is_some_and(|b| *arrival >= b) {
                break;
            }
            let Some(p) = self.parts.get_mut(&chunk.tp) else {
                self.queue.pop_front();
                continue;
            };
            let continuous = p
                .position
                .is_none_or(|pos| *idx > 0 || chunk.fetch_offset == pos);
            if p.epoch != chunk.epoch || p.paused || !continuous {
                log::debug!(
                    "dropping stale data for {} from offset {}",
                    chunk.tp,
                    chunk.fetch_offset
                );
                self.queue.pop_front();
                continue;
            }
            let take = (max - n).min(chunk.records.len() - *idx);
            if take > 0 {
                out.push(Arc::clone(chunk), *idx, *idx + take);
                bytes += chunk.records[*idx..*idx + take]
                    .iter()
                    .map(|r| u64::from(r.size))
                    .sum::<u64>();
                *idx += take;
                n += take;
                self.queue.records -= take;
                let last = &chunk.records[*idx - 1];
                p.position = Some(last.offset + 1);
                if chunk.source.is_some() {
                    p.fetched_from = chunk.source;
                }
                p.leader_epoch = (last.leader_epoch >= 0).then_some(last.leader_epoch);
            }
            let done = *idx == chunk.records.len();
            if done {
                p.position = Some(chunk.next_offset);
                if let Some(e) = chunk.last_epoch.known() {
                    p.leader_epoch = Some(e);
                }
            }
            p.recount(&mut self.stats);
            if done {
                self.queue.pop_front();
            }
        }
        if n > 0 {
            self.stats.consumed(n as u64, bytes, Instant::now());
        }
        out
    }

    /// The offset of the next record `poll` will return for `tp`. If the position is not
    /// known yet (just assigned, or after `seek_to_beginning`/`seek_to_end`), waits up to
    /// `default.api.timeout.ms` for it to be resolved.
    pub fn position(&mut self, tp: &TopicPartition) -> Result<i64> {
        self.check_open()?;
        self.take_wakeup()?;
        self.flush_assignment()?;
        let deadline = deadline_after(self.cfg.default_api_timeout);
        loop {
            let p = self.parts.get(tp).ok_or_else(|| Self::not_assigned(tp))?;
            if let Some(pos) = p.position {
                return Ok(pos);
            }
            if let Some(e) = &p.stuck {
                return Err(e.clone());
            }
            let epoch = p.epoch;
            self.drain();
            self.check_open()?;
            if let Some(q) = self
                .queue
                .chunks
                .iter()
                .find(|q| q.chunk.tp == *tp && q.chunk.epoch == epoch)
            {
                let pos = q.chunk.fetch_offset;
                if let Some(p) = self.parts.get_mut(tp) {
                    p.position = Some(pos);
                    p.recount(&mut self.stats);
                }
                return Ok(pos);
            }
            if let Some(i) = self
                .errors
                .iter()
                .position(|p| p.error.partition() == Some(tp))
            {
                if let Some(p) = self.errors.remove(i) {
                    return Err(p.error);
                }
            }
            if !self.wait(deadline)? {
                return Err(Error::timeout(format!(
                    "the position of {tp} was not resolved within default.api.timeout.ms"
                )));
            }
        }
    }

    /// Sends a command that the I/O thread answers on a one-shot channel by
    /// `default.api.timeout.ms` from now, and waits for the answer (or a wakeup).
    fn ask<T>(
        &mut self,
        what: &str,
        command: impl FnOnce(CallId, Instant, Sender<Result<T>>) -> Command,
    ) -> Result<T> {
        self.check_open()?;
        self.take_wakeup()?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let deadline = match (
            deadline_after(self.cfg.default_api_timeout),
            self.close_deadline,
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let id = self.next_call.take_next();
        // The I/O thread answers by the deadline; allow a little slack for the hand-off.
        let io_deadline =
            deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        self.send(command(id, io_deadline, tx))?;
        let mut sel = Select::new();
        let reply = sel.recv(&rx);
        let wake = sel.recv(&self.wakeup_rx);
        let op = match deadline.and_then(|d| d.checked_add(Duration::from_secs(1))) {
            Some(d) => sel
                .select_deadline(d)
                .map_err(|_| Error::timeout(format!("{what} timed out")))?,
            None => sel.select(),
        };
        if op.index() == wake {
            let _ = op.recv(&self.wakeup_rx);
            let _ = self.io.send(Command::Cancel(id));
            self.take_wakeup()?;
            return Err(Error::wakeup());
        }
        debug_assert_eq!(op.index(), reply);
        match op.recv(&rx) {
            Ok(r) => r,
            Err(_) => {
                self.drain();
                self.check_open()?;
                Err(Error::closed())
            }
        }
    }

    fn lookup(
        &mut self,
        query: Vec<(TopicPartition, i64)>,
    ) -> Result<HashMap<TopicPartition, Option<(i64, i64)>>> {
        self.ask("listing offsets", |id, deadline, reply| Command::Lookup {
            id,
            query,
            deadline,
            reply,
        })
    }

    /// The first offset of each partition (the log start offset). Blocks up to
    /// `default.api.timeout.ms`. The partitions need not be assigned.
    pub fn beginning_offsets(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>> {
        self.edge_offsets(partitions, list_offsets::EARLIEST)
    }

    /// The end offset of each partition: the high watermark, or the last stable offset
    /// under read_committed. Blocks up to `default.api.timeout.ms`.
    pub fn end_offsets(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, i64>> {
        self.edge_offsets(partitions, list_offsets::LATEST)
    }

    fn edge_offsets(
        &mut self,
        partitions: &[TopicPartition],
        ts: i64,
    ) -> Result<HashMap<TopicPartition, i64>> {
        let r = self.lookup(partitions.iter().map(|tp| (tp.clone(), ts)).collect())?;
        Ok(r.into_iter()
            .filter_map(|(tp, o)| o.map(|(off, _)| (tp, off)))
            .collect())
    }

    /// For each partition, the earliest offset whose record timestamp is at or after the
    /// given one (milliseconds since the epoch); `None` when no such record exists.
    pub fn offsets_for_times(
        &mut self,
        query: &HashMap<TopicPartition, i64>,
    ) -> Result<HashMap<TopicPartition, Option<OffsetAndTimestamp>>> {
        for (tp, ts) in query {
            if *ts < 0 {
                return Err(Error::config(format!("negative timestamp {ts} for {tp}")));
            }
        }
        let r = self.lookup(query.iter().map(|(tp, ts)| (tp.clone(), *ts)).collect())?;
        Ok(r.into_iter()
            .map(|(tp, o)| {
                (
                    tp,
                    o.map(|(offset, timestamp)| OffsetAndTimestamp { offset, timestamp }),
                )
            })
            .collect())
    }

    // ----- offsets and commits ------------------------------------------------------------

    fn check_group(&self, what: &str) -> Result<()> {
        if self.cfg.group_id.is_none() {
            return Err(Error::config(format!("{what} needs a group.id")));
        }
        Ok(())
    }

    /// The consumed positions of the assigned partitions that have one: what
    /// [`commit_sync`](Consumer::commit_sync) commits. Never past a record `poll` has not
    /// returned.
    pub fn consumed_offsets(&self) -> HashMap<TopicPartition, OffsetAndMetadata> {
        self.parts
            .iter()
            .filter_map(|(tp, p)| {
                p.position.map(|offset| {
                    (
                        tp.clone(),
                        OffsetAndMetadata {
                            offset,
                            leader_epoch: p.leader_epoch,
                            metadata: String::new(),
                        },
                    )
                })
            })
            .collect()
    }

    fn to_commit(
        offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<BTreeMap<TopicPartition, Committed>> {
        offsets
            .iter()
            .map(|(tp, o)| {
                if o.offset < 0 {
                    return Err(Error::config(format!(
                        "cannot commit negative offset {} for {tp}",
                        o.offset
                    )));
                }
                Ok((
                    tp.clone(),
                    Committed {
                        offset: o.offset,
                        leader_epoch: LeaderEpoch(o.leader_epoch.unwrap_or(-1)),
                        metadata: Some(o.metadata.clone()),
                    },
                ))
            })
            .collect()
    }

    /// Commits the consumed positions of every assigned partition (the offset after the
    /// last record `poll` returned for it) to the group, and waits for the answer, up to
    /// `default.api.timeout.ms`. Needs a `group.id`.
    ///
    /// In manual-assignment mode the consumer commits as a non-member (generation -1),
    /// which the broker accepts while the group has no active members; otherwise the
    /// commit fails with [`ErrorKind::CommitFailed`], saying so.
    ///
    /// Errors: [`ErrorKind::Config`] without a `group.id`; [`ErrorKind::CommitFailed`];
    /// [`ErrorKind::Broker`] with the Kafka code for other refusals;
    /// [`ErrorKind::Timeout`] naming the last problem; [`ErrorKind::Wakeup`].
    pub fn commit_sync(&mut self) -> Result<()> {
        let offsets = self.consumed_offsets();
        self.commit_offsets_sync(&offsets)
    }

    /// Commits the given offsets (each the offset of the next record to read) and waits for
    /// the answer, up to `default.api.timeout.ms`. The partitions need not be assigned.
    /// Errors as for [`commit_sync`](Consumer::commit_sync).
    pub fn commit_offsets_sync(
        &mut self,
        offsets: &HashMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<()> {
        self.check_group("commit_sync")?;
        let offsets = Self::to_commit(offsets)?;
        let r = self.ask("committing offsets", |id, deadline, reply| {
            Command::Commit {
                id,
                offsets,
                deadline,
                reply: Some(reply),
            }
        });
        self.drain();
        self.run_commit_callbacks();
        r
    }

    /// Commits the consumed positions of every assigned partition without waiting. The
    /// result goes to `callback` (if any), on this thread, during a later `poll`,
    /// `commit_sync` or `close`; commits are applied in the order they were made.
    pub fn commit_async(&mut self, callback: Option<CommitCallback>) -> Result<()> {
        let offsets = self.consumed_offsets();
        self.commit_offsets_async(offsets, callback)
    }

    /// Commits the given offsets without waiting; see [`commit_async`](Consumer::commit_async).
    pub fn commit_offsets_async(
        &mut self,
        offsets: HashMap<TopicPartition, OffsetAndMetadata>,
        callback: Option<CommitCallback>,
    ) -> Result<()> {
        self.check_open()?;
        self.check_group("commit_async")?;
        let to_commit = Self::to_commit(&offsets)?;
        let id = self.next_call.take_next();
        let deadline = deadline_after(self.cfg.default_api_timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        self.async_commits.insert(id, (offsets, callback));
        self.send(Command::Commit {
            id,
            offsets: to_commit,
            deadline,
            reply: None,
        })
    }

    /// Runs the callbacks of asynchronous commits that finished.
    fn run_commit_callbacks(&mut self) {
        while let Some((id, result)) = self.commits_done.pop_front() {
            let Some((offsets, callback)) = self.async_commits.remove(&id) else {
                continue;
            };
            match callback {
                Some(cb) => cb(&offsets, result),
                None => {
                    if let Err(e) = result {
                        log::warn!("asynchronous commit failed: {e}");
                    }
                }
            }
        }
    }

    /// The offsets the group has committed for these partitions (`None`: nothing
    /// committed). Blocks up to `default.api.timeout.ms`. Needs a `group.id`; the
    /// partitions need not be assigned.
    pub fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, Option<OffsetAndMetadata>>> {
        self.check_group("committed")?;
        let partitions = partitions.to_vec();
        let r = self.ask("reading committed offsets", |id, deadline, reply| {
            Command::Committed {
                id,
                partitions,
                deadline,
                reply,
            }
        })?;
        Ok(r.into_iter()
            .map(|(tp, c)| {
                let c = c.map(|c| OffsetAndMetadata {
                    offset: c.offset,
                    leader_epoch: c.leader_epoch.known(),
                    metadata: c.metadata.unwrap_or_default(),
                });
                (tp, c)
            })
            .collect())
    }

    /// A snapshot of the consumer's figures: records and bytes consumed, fetches, commits,
    /// rebalances, the largest lag and smallest lead, connections and requests per broker,
    /// the prefetch buffers (see [`Metrics`], and [`Metrics::iter`] for exporters).
    ///
    /// Cheap enough to call from the poll loop: no round trip to the I/O thread (it reads
    /// what the I/O thread has counted, under a short lock), nothing taken from the records
    /// waiting for `poll`, and O(brokers) whatever the number of partitions. Figures the
    /// user side keeps (records consumed, lag, lead) are as of the last call into the
    /// consumer (`poll`, `partition_metrics`, ...).
    pub fn metrics(&self) -> Metrics {
        let now = Instant::now();
        let mut m = Metrics::empty(&self.cfg.client_id);
        m.prefetched_bytes = self.io.budget.used();
        m.buffered_records = self.queue.records;
        m.fetch_blocked_by_memory = self.io.budget.is_starved();
        m.assigned_partitions = self.assignment.len();
        self.stats.fill(&mut m, now);
        self.io.metrics.with(|io| io.fill(&mut m, now));
        m
    }

    /// Each assigned partition's position, ends, lag, lead, buffered records and source,
    /// sorted by partition. O(partitions): for a dashboard of partitions, or a look at a
    /// few in a test; [`metrics`](Consumer::metrics) has the aggregates. It first takes in
    /// what the I/O thread has handed over since the last call (without returning any
    /// record: `poll` still gets them all), so ends and buffered records are current.
    pub fn partition_metrics(&mut self) -> Vec<PartitionMetrics> {
        self.drain();
        let mut buffered: HashMap<&TopicPartition, usize> = HashMap::new();
        for q in &self.queue.chunks {
            *buffered.entry(&q.chunk.tp).or_default() += q.chunk.records.len() - q.next;
        }
        let mut partitions: Vec<PartitionMetrics> = self
            .parts
            .iter()
            .map(|(tp, p)| {
                let LagLead { lag, lead } = p.lag_lead();
                PartitionMetrics {
                    partition: tp.clone(),
                    position: p.position,
                    end_offset: p.end_offset,
                    log_start_offset: p.log_start,
                    lag,
                    lead,
                    buffered_records: buffered.get(tp).copied().unwrap_or(0),
                    paused: p.paused,
                    fetched_from: p.fetched_from.map(|n| n.0),
                }
            })
            .collect();
        partitions.sort_by(|a, b| a.partition.cmp(&b.partition));
        partitions
    }

    /// The partitions of `topic`, from the cluster's metadata. A topic whose metadata the
    /// consumer fetched within the last `metadata.max.age.ms` (one it is assigned or
    /// subscribed to, or one an earlier call asked about) is answered from its metadata
    /// cache at once, as in the Java client; otherwise this sends a Metadata request and
    /// blocks up to `default.api.timeout.ms` for its answer. A topic that does not exist is
    /// an error of kind [`ErrorKind::UnknownTopicOrPartition`] (asked afresh on each call).
    pub fn partitions_for(&mut self, topic: &str) -> Result<Vec<TopicPartition>> {
        self.check_open()?;
        self.take_wakeup()?;
        // A thread that stopped is reported by the round trip below, never hidden by the
        // cache.
        if self.io.is_running() {
            if let Some(parts) = self.io.topics.partitions(topic, Instant::now()) {
                return Ok(parts);
            }
        }
        let topic = topic.to_owned();
        self.ask("the metadata request", |id, deadline, reply| {
            Command::Partitions {
                id,
                topic,
                deadline,
                reply,
            }
        })
    }

    /// Waits for asynchronous commits under way (running their callbacks), then stops the
    /// I/O thread and closes every connection, all within 30 seconds. Buffered records are
    /// dropped. See [`close_timeout`](Consumer::close_timeout).
    pub fn close(self) -> Result<()> {
        self.close_timeout(DROP_CLOSE_TIMEOUT)
    }

    /// Like [`close`](Consumer::close), waiting at most `timeout` for the I/O thread to
    /// stop (it is left to finish on its own after that, and the error says so).
    pub fn close_timeout(mut self, timeout: Duration) -> Result<()> {
        self.shutdown(timeout)
    }

    fn shutdown(&mut self, timeout: Duration) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let deadline = deadline_after(timeout);
        // Commits and the leave below may take most of the timeout, not more.
        self.close_deadline = Instant::now().checked_add(Self::leave_budget(timeout));
        if self.subscribed() && self.stopped.is_none() && !self.group.in_callback {
            // Give the partitions up (commit, revoke) and leave within most of the timeout;
            // stopping the thread gets the rest.
            let leave_by = Instant::now().checked_add(Self::leave_budget(timeout));
            if let Err(e) = self.leave_group(leave_by) {
                log::warn!("leaving the group on close: {e}");
            }
            self.group.subscribed = None;
        } else if self.stopped.is_none() && !self.group.in_callback {
            // Manually assigned partitions: commit what poll returned (auto-commit), as
            // the Java client does on close.
            self.auto_commit_sync("on close");
        }
        self.closed = true;
        self.queue.clear();
        self.note_unassigned();
        // Asynchronous commits under way finish first (their callbacks run here), as in the
        // Java client, within the same timeout.
        loop {
            self.drain();
            self.run_commit_callbacks();
            if self.async_commits.is_empty() || self.stopped.is_some() {
                break;
            }
            let next = match deadline {
                Some(d) => self.io.events.recv_deadline(d).ok(),
                None => self.io.events.recv().ok(),
            };
            match next {
                Some(ev) => self.event(ev),
                None => break,
            }
        }
        let left = deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
        self.io.shutdown(left)
    }

    /// Injects a panic on the I/O thread (tests of the panic path).
    #[cfg(any(test, feature = "__testing"))]
    #[doc(hidden)]
    pub fn inject_io_panic(&mut self) {
        let _ = self.io.send(Command::Panic);
    }
}

impl Drop for Consumer {
    /// Closes the consumer as [`Consumer::close`] does; errors are ignored.
    fn drop(&mut self) {
        let _ = self.shutdown(DROP_CLOSE_TIMEOUT);
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("assignment", &self.assignment)
            .field("buffered_chunks", &self.queue.chunks.len())
            .field("closed", &self.closed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The records of chunks that arrived before an error come first, then the error, then
    /// the records of later chunks, even when all three are drained at once (a truncation
    /// is reported before the records read again from where the logs diverge).
    #[test]
    fn an_error_comes_after_the_records_before_it_and_before_the_records_after_it() {
        // Nothing listens on port 1: the I/O thread only retries its bootstrap.
        let mut c = Consumer::new(ConsumerConfig::new("127.0.0.1:1")).unwrap();
        let tp = TopicPartition::new("t", 0);
        c.assign(std::slice::from_ref(&tp)).unwrap();
        let epoch = c.parts[&tp].epoch;
        c.event(Event::Chunk(crate::fetch::chunk::test_chunk(
            tp.clone(),
            epoch,
            0,
            5,
        )));
        c.event(Event::Error(
            Error::new(ErrorKind::Corrupt, "a bad batch").with_partition(tp.clone()),
            Some(epoch),
        ));
        c.event(Event::Chunk(crate::fetch::chunk::test_chunk(
            tp.clone(),
            epoch,
            5,
            5,
        )));

        let offsets = |c: &mut Consumer| -> Result<Vec<i64>> {
            let records = c.poll(Duration::ZERO)?;
            Ok(records.iter().map(|r| r.offset()).collect())
        };
        assert_eq!(offsets(&mut c).unwrap(), vec![0, 1, 2, 3, 4]);
        let e = offsets(&mut c).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
        assert_eq!(offsets(&mut c).unwrap(), vec![5, 6, 7, 8, 9]);
        assert_eq!(offsets(&mut c).unwrap(), Vec::<i64>::new());
        c.close_timeout(Duration::from_secs(5)).unwrap();
    }

    #[test]
    fn consumer_and_handles_are_send() {
        fn send<T: Send>() {}
        send::<Consumer>();
        send::<WakeupHandle>();
        fn sync<T: Sync>() {}
        sync::<WakeupHandle>();
    }
}
