//! The public consumer: the user side of the channels to the I/O thread.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Sender};

use crate::config::ConsumerConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::io::{self, Command, Event, IoHandle, SeekTo};
use crate::protocol::api::list_offsets;
use crate::record::{Chunk, ConsumerRecords, TopicPartition};

/// An offset found by [`Consumer::offsets_for_times`], with the timestamp of its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndTimestamp {
    /// The offset of the first record at or after the requested timestamp.
    pub offset: i64,
    /// That record's timestamp.
    pub timestamp: i64,
}

/// A snapshot of the consumer's buffers, from [`Consumer::metrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Bytes fetched by the I/O thread and not yet released by the application (bounded
    /// by `fetch.buffer.bytes`, plus at most one response in flight).
    pub prefetched_bytes: usize,
    /// Records fetched and waiting to be returned by `poll`.
    pub buffered_records: usize,
}

#[derive(Debug)]
struct UserPart {
    /// Bumped by every seek, resume and (re)assignment; data from an older epoch is stale.
    epoch: u64,
    /// Offset of the next record `poll` will return; `None` until known.
    position: Option<i64>,
    paused: bool,
    /// No position, and `auto.offset.reset` is none: `position()` fails at once.
    no_offset: bool,
}

/// Interrupts a blocked [`Consumer::poll`] from another thread.
///
/// ```no_run
/// # use kafka_consumer::{Consumer, ConsumerConfig, ErrorKind};
/// # use std::time::Duration;
/// let mut consumer = Consumer::new(ConsumerConfig::new("127.0.0.1:9092"))?;
/// let wakeup = consumer.wakeup_handle();
/// std::thread::spawn(move || wakeup.wakeup());
/// match consumer.poll(Duration::from_secs(60)) {
///     Err(e) if e.kind() == &ErrorKind::Wakeup => log::info!("woken up, shutting down"),
///     Err(e) => return Err(e),
///     Ok(records) => log::info!("{} records", records.len()),
/// }
/// # Ok::<(), kafka_consumer::Error>(())
/// ```
#[derive(Clone)]
pub struct WakeupHandle {
    flag: Arc<AtomicBool>,
    tx: Sender<Event>,
}

impl WakeupHandle {
    /// Makes the current (or, if none is running, the next) blocking call of the consumer
    /// return an error of kind [`ErrorKind::Wakeup`]. Safe to call from any thread.
    pub fn wakeup(&self) {
        self.flag.store(true, Ordering::Release);
        let _ = self.tx.send(Event::Wakeup);
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
pub struct Consumer {
    cfg: ConsumerConfig,
    io: IoHandle,
    parts: HashMap<TopicPartition, UserPart>,
    assignment: Vec<TopicPartition>,
    /// Chunks handed over by the I/O thread, in arrival order, with the next record index.
    queue: VecDeque<(Arc<Chunk>, usize)>,
    errors: VecDeque<Error>,
    wakeup: Arc<AtomicBool>,
    next_epoch: u64,
    closed: bool,
}

impl Consumer {
    /// Validates the configuration and starts the I/O thread. Connecting happens in the
    /// background; a broker that cannot be reached shows up as timeouts, not here.
    pub fn new(config: ConsumerConfig) -> Result<Consumer> {
        config.validate()?;
        let io = io::spawn(config.clone())?;
        Ok(Consumer {
            cfg: config,
            io,
            parts: HashMap::new(),
            assignment: Vec::new(),
            queue: VecDeque::new(),
            errors: VecDeque::new(),
            wakeup: Arc::new(AtomicBool::new(false)),
            next_epoch: 1,
            closed: false,
        })
    }

    fn epoch(&mut self) -> u64 {
        self.next_epoch += 1;
        self.next_epoch
    }

    fn check_open(&self) -> Result<()> {
        if self.closed {
            Err(Error::closed())
        } else {
            Ok(())
        }
    }

    /// Assigns exactly these partitions (replacing any previous assignment). Partitions that
    /// stay assigned keep their position; new ones start from `auto.offset.reset` unless
    /// you [`seek`](Consumer::seek). Duplicates are ignored.
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<()> {
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
        self.parts.retain(|tp, _| seen.contains(tp));
        let mut list = Vec::with_capacity(wanted.len());
        for tp in &wanted {
            let epoch = match self.parts.get(tp) {
                Some(p) => p.epoch,
                None => {
                    let e = self.epoch();
                    self.parts.insert(
                        tp.clone(),
                        UserPart {
                            epoch: e,
                            position: None,
                            paused: false,
                            no_offset: false,
                        },
                    );
                    e
                }
            };
            list.push((tp.clone(), epoch, SeekTo::Default));
        }
        self.queue.retain(|(c, _)| seen.contains(&c.tp));
        self.errors
            .retain(|e| e.partition().is_none_or(|tp| seen.contains(tp)));
        self.assignment = wanted;
        self.io.send(Command::Assign(list))
    }

    /// The partitions currently assigned, in the order given to [`assign`](Consumer::assign).
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment.clone()
    }

    fn part_mut(&mut self, tp: &TopicPartition) -> Result<&mut UserPart> {
        self.parts.get_mut(tp).ok_or_else(|| {
            Error::new(
                ErrorKind::NotAssigned,
                format!("partition {tp} is not assigned"),
            )
            .with_partition(tp.clone())
        })
    }

    fn seek_to(&mut self, tp: &TopicPartition, to: SeekTo) -> Result<()> {
        self.check_open()?;
        let epoch = self.epoch();
        let p = self.part_mut(tp)?;
        p.epoch = epoch;
        p.no_offset = false;
        p.position = match to {
            SeekTo::Offset(o) => Some(o),
            _ => None,
        };
        self.queue.retain(|(c, _)| c.tp != *tp);
        self.errors.retain(|e| e.partition() != Some(tp));
        self.io.send(Command::Seek(tp.clone(), epoch, to))
    }

    /// Sets the offset the next `poll` reads `tp` from. Records already fetched from the
    /// old position are discarded. An offset outside the log is handled on the next fetch
    /// by `auto.offset.reset`.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(Error::config(format!(
                "cannot seek {tp} to negative offset {offset}"
            )));
        }
        self.seek_to(tp, SeekTo::Offset(offset))
    }

    /// Moves these partitions to their first offset (evaluated lazily, on the next `poll`
    /// or `position`).
    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        partitions
            .iter()
            .try_for_each(|tp| self.seek_to(tp, SeekTo::Beginning))
    }

    /// Moves these partitions to their end (the high watermark, or the last stable offset
    /// under read_committed), evaluated lazily.
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        partitions
            .iter()
            .try_for_each(|tp| self.seek_to(tp, SeekTo::End))
    }

    /// Stops returning records of these partitions from `poll` (and stops fetching them)
    /// until [`resume`](Consumer::resume). Positions do not change.
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.check_open()?;
        for tp in partitions {
            self.part_mut(tp)?.paused = true;
        }
        let set: HashSet<&TopicPartition> = partitions.iter().collect();
        // Buffered data is dropped; resume fetches again from the position.
        self.queue.retain(|(c, _)| !set.contains(&c.tp));
        self.io.send(Command::Pause(partitions.to_vec()))
    }

    /// Resumes paused partitions from their current positions.
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.check_open()?;
        for tp in partitions {
            let p = self.part_mut(tp)?;
            if !p.paused {
                continue;
            }
            p.paused = false;
            // Buffered data was dropped at pause: fetch again from the position.
            let to = p.position.map_or(SeekTo::Default, SeekTo::Offset);
            self.seek_to(tp, to)?;
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

    /// A handle that interrupts a blocked `poll` from another thread.
    pub fn wakeup_handle(&self) -> WakeupHandle {
        WakeupHandle {
            flag: Arc::clone(&self.wakeup),
            tx: self.io.events_tx.clone(),
        }
    }

    fn take_wakeup(&self) -> Result<()> {
        if self.wakeup.swap(false, Ordering::AcqRel) {
            Err(Error::wakeup())
        } else {
            Ok(())
        }
    }

    /// Applies one event from the I/O thread. Returns true for a wakeup.
    fn event(&mut self, ev: Event) -> bool {
        match ev {
            Event::Chunk(c) => {
                if self
                    .parts
                    .get(&c.tp)
                    .is_some_and(|p| p.epoch == c.epoch && !p.paused)
                {
                    self.queue.push_back((Arc::new(c), 0));
                }
            }
            Event::Error(e, epoch) => {
                let stale = match (e.partition(), epoch) {
                    (Some(tp), Some(epoch)) => self.parts.get(tp).is_none_or(|p| p.epoch != epoch),
                    _ => false,
                };
                // One pending error per partition and kind: a partition that keeps
                // failing (corrupt data, offset out of range) must not grow the queue.
                let duplicate = e.partition().is_some()
                    && self
                        .errors
                        .iter()
                        .any(|q| q.partition() == e.partition() && q.kind() == e.kind());
                if !stale && e.kind() == &ErrorKind::NoOffset {
                    if let Some(p) = e.partition().and_then(|tp| self.parts.get_mut(tp)) {
                        p.no_offset = true;
                    }
                }
                if !stale && !duplicate {
                    self.errors.push_back(e);
                }
            }
            Event::Wakeup => return true,
        }
        false
    }

    /// Moves everything already in the channel into the queue without blocking.
    fn drain(&mut self) -> Result<()> {
        while let Ok(ev) = self.io.events.try_recv() {
            if self.event(ev) {
                self.take_wakeup()?;
            }
        }
        Ok(())
    }

    /// Waits for the next event until `deadline`. Returns false on timeout.
    fn wait(&mut self, deadline: Instant) -> Result<bool> {
        match self.io.events.recv_deadline(deadline) {
            Ok(ev) => {
                if self.event(ev) {
                    self.take_wakeup()?;
                }
                Ok(true)
            }
            Err(RecvTimeoutError::Timeout) => Ok(false),
            Err(RecvTimeoutError::Disconnected) => Err(Error::closed()),
        }
    }

    /// Returns fetched records: at most `max.poll.records`, immediately when some are
    /// already buffered, otherwise as soon as some arrive or `timeout` passes (then empty).
    ///
    /// Errors: [`ErrorKind::Wakeup`] after [`WakeupHandle::wakeup`];
    /// [`ErrorKind::Corrupt`] for a batch that failed its CRC check (names the partition;
    /// records before it were returned, the position stays at the bad batch);
    /// [`ErrorKind::OffsetOutOfRange`] / [`ErrorKind::NoOffset`] when `auto.offset.reset`
    /// is `none`; [`ErrorKind::UnknownTopicOrPartition`] for an assigned partition that
    /// does not exist. The consumer stays usable after any of these.
    pub fn poll(&mut self, timeout: Duration) -> Result<ConsumerRecords> {
        self.check_open()?;
        self.take_wakeup()?;
        let deadline = Instant::now() + timeout;
        self.release_budget();
        loop {
            self.drain()?;
            let records = self.collect();
            if !records.is_empty() {
                return Ok(records);
            }
            if let Some(e) = self.errors.pop_front() {
                return Err(e);
            }
            if !self.wait(deadline)? {
                return Ok(ConsumerRecords::default());
            }
        }
    }

    fn release_budget(&self) {
        if self.io.shared.starved.load(Ordering::Acquire) {
            let _ = self.io.shared.waker.wake();
        }
    }

    /// Takes up to `max.poll.records` records from the front of the queue, dropping stale
    /// chunks and advancing positions.
    fn collect(&mut self) -> ConsumerRecords {
        let max = self.cfg.max_poll_records;
        let mut out = ConsumerRecords::default();
        let mut n = 0;
        let mut freed = false;
        while n < max {
            let Some((chunk, idx)) = self.queue.front_mut() else {
                break;
            };
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
                freed = true;
                continue;
            }
            let take = (max - n).min(chunk.records.len() - *idx);
            if take > 0 {
                out.push(Arc::clone(chunk), *idx, *idx + take);
                *idx += take;
                n += take;
                p.position = Some(chunk.records[*idx - 1].offset + 1);
            }
            if *idx == chunk.records.len() {
                p.position = Some(chunk.next_offset);
                self.queue.pop_front();
                freed = true;
            }
        }
        if freed {
            self.release_budget();
        }
        out
    }

    /// The offset of the next record `poll` will return for `tp`. If the position is not
    /// known yet (just assigned, or after `seek_to_beginning`/`seek_to_end`), waits up to
    /// `default.api.timeout.ms` for it to be resolved.
    pub fn position(&mut self, tp: &TopicPartition) -> Result<i64> {
        self.check_open()?;
        let deadline = Instant::now() + self.cfg.default_api_timeout;
        loop {
            let p = self.part_mut(tp)?;
            if let Some(pos) = p.position {
                return Ok(pos);
            }
            if p.no_offset {
                return Err(Error::new(
                    ErrorKind::NoOffset,
                    format!("partition {tp} has no position and auto.offset.reset is none"),
                )
                .with_partition(tp.clone()));
            }
            let epoch = p.epoch;
            self.drain()?;
            if let Some((c, _)) = self
                .queue
                .iter()
                .find(|(c, _)| c.tp == *tp && c.epoch == epoch)
            {
                let pos = c.fetch_offset;
                self.part_mut(tp)?.position = Some(pos);
                return Ok(pos);
            }
            if let Some(i) = self.errors.iter().position(|e| e.partition() == Some(tp)) {
                if let Some(e) = self.errors.remove(i) {
                    return Err(e);
                }
            }
            if !self.wait(deadline)? {
                return Err(Error::timeout(format!(
                    "the position of {tp} was not resolved in time"
                )));
            }
        }
    }

    /// Sends a command that the I/O thread answers on a one-shot channel by `deadline`
    /// (`default.api.timeout.ms` from now), and waits for the answer.
    fn ask<T>(
        &mut self,
        what: &str,
        command: impl FnOnce(Instant, Sender<Result<T>>) -> Command,
    ) -> Result<T> {
        self.check_open()?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let deadline = Instant::now() + self.cfg.default_api_timeout;
        self.io.send(command(deadline, tx))?;
        // The I/O thread answers by the deadline; allow a little slack for the hand-off.
        match rx.recv_deadline(deadline + Duration::from_secs(1)) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(Error::timeout(format!("{what} timed out"))),
            Err(RecvTimeoutError::Disconnected) => Err(Error::closed()),
        }
    }

    fn lookup(
        &mut self,
        query: Vec<(TopicPartition, i64)>,
    ) -> Result<HashMap<TopicPartition, Option<(i64, i64)>>> {
        self.ask("listing offsets", |deadline, reply| Command::Lookup {
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

    /// A snapshot of the prefetch buffers.
    pub fn metrics(&mut self) -> Metrics {
        let _ = self.drain();
        Metrics {
            prefetched_bytes: self.io.shared.budget.load(Ordering::Acquire),
            buffered_records: self.queue.iter().map(|(c, i)| c.records.len() - i).sum(),
        }
    }

    /// The partitions of `topic`, from the cluster's metadata. Blocks up to
    /// `default.api.timeout.ms`; a topic that does not exist is an error of kind
    /// [`ErrorKind::UnknownTopicOrPartition`].
    pub fn partitions_for(&mut self, topic: &str) -> Result<Vec<TopicPartition>> {
        let topic = topic.to_owned();
        self.ask("the metadata request", |deadline, reply| {
            Command::Partitions {
                topic,
                deadline,
                reply,
            }
        })
    }

    /// Stops the I/O thread and closes every connection. Buffered records are dropped.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        let _ = self.io.send(Command::Shutdown);
        self.queue.clear();
        if let Some(t) = self.io.thread.take() {
            t.join()
                .map_err(|_| Error::new(ErrorKind::Closed, "the I/O thread panicked"))?;
        }
        Ok(())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("assignment", &self.assignment)
            .field("buffered_chunks", &self.queue.len())
            .field("closed", &self.closed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_and_handles_are_send() {
        fn send<T: Send>() {}
        send::<Consumer>();
        send::<WakeupHandle>();
        fn sync<T: Sync>() {}
        sync::<WakeupHandle>();
    }
}
