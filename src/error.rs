//! The one public error type.

use std::fmt;
use std::sync::Arc;

use crate::protocol::error_code::ErrorCode;
use crate::protocol::records::RecordError;
use crate::protocol::wire::DecodeError;
use crate::types::TopicPartition;

/// What went wrong, broadly. Match on this to decide what to do.
///
/// ```
/// # use kafka_consumer::{Error, ErrorKind};
/// fn retry_later(e: &Error) -> bool {
///     matches!(e.kind(), ErrorKind::Timeout | ErrorKind::Wakeup)
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A configuration key is unknown or its value is invalid.
    Config,
    /// [`WakeupHandle::wakeup`](crate::WakeupHandle::wakeup) interrupted a call.
    Wakeup,
    /// The consumer was closed, or its I/O thread stopped.
    Closed,
    /// An operation did not finish within its timeout.
    Timeout,
    /// The broker answered with a Kafka error code.
    Broker,
    /// A broker response or record batch could not be decoded.
    Protocol,
    /// A record batch failed its CRC check (`check.crcs`), or its records contradict the
    /// batch (offsets out of order or past the batch's end). [`Error::offset`] says where;
    /// [`Error::skip_to`] where to seek to skip the batch.
    Corrupt,
    /// A record batch needs more memory than `fetch.buffer.bytes` allows.
    /// [`Error::skip_to`] says where to seek to skip it.
    RecordTooLarge,
    /// A partition holds data in a format this crate does not read (magic 0/1 message sets,
    /// or a codec whose cargo feature is disabled), or a broker speaks no version of an API
    /// this crate needs (the message names the API and both version ranges).
    Unsupported,
    /// The position of a partition is out of range and `auto.offset.reset` is `none`.
    OffsetOutOfRange,
    /// A partition has no position and `auto.offset.reset` is `none`.
    NoOffset,
    /// A partition's log was truncated below records this consumer had read (KIP-320): an
    /// unclean leader election, or records the old leader held that never reached the new
    /// one. [`Error::offset`] is the position before (the offset after the last record
    /// `poll` returned), [`Error::divergent_offset`] the first offset where the log now
    /// differs from what was read (`None` when the leader could not say). The records
    /// `poll` returned from there on are no longer in the log.
    ///
    /// Unless `auto.offset.reset` is `none`, reading has already resumed at the divergent
    /// offset (where it is unknown: where `auto.offset.reset` says), and the error only
    /// reports what happened. With `none` the partition stops until you
    /// [`seek`](crate::Consumer::seek).
    LogTruncation,
    /// The topic or partition does not exist.
    UnknownTopicOrPartition,
    /// The group refused a commit for good (for example: a consumer with manually
    /// assigned partitions committed to a group that has active members). The message
    /// says what to do.
    CommitFailed,
    /// The consumer's group membership stopped for good, for a reason rejoining would not
    /// fix: the broker refused a setting (`session.timeout.ms`, the assignors of
    /// `partition.assignment.strategy`, `group.remote.assignor`), the consumer may not use
    /// the group, the group is full, another consumer with the same `group.instance.id`
    /// fenced this one, or the broker lacks what `group.protocol` needs. The message names
    /// the group and what to change; [`Error::kafka_code`] has the broker's code, if it sent
    /// one.
    ///
    /// [`Consumer::poll`](crate::Consumer::poll) returns it once, after running
    /// `on_partitions_lost` for the partitions the consumer owned; from then on the consumer
    /// owns no partition and `poll` waits out its timeout and returns no records, as the
    /// Java client does with a member in its fatal state. To go on, fix the cause and call
    /// `subscribe` again (which joins as a new member), or `unsubscribe` (or `close`).
    GroupFatal,
    /// The partition is not assigned to this consumer.
    NotAssigned,
    /// The call does not fit the consumer's state: `assign` while subscribed (or the
    /// other way round), or `poll`, `subscribe`, `unsubscribe`, `assign` from inside a
    /// rebalance callback.
    InvalidState,
    /// A [`RebalanceListener`](crate::RebalanceListener) method panicked; the message has
    /// the panic's text. The rebalance went on as if the method had returned.
    Listener,
    /// An operating-system I/O error (for example the I/O thread could not start).
    Io,
    /// A broker refused to authenticate the consumer (SASL: a wrong password or unknown
    /// user, a mechanism the broker does not enable, a token the broker refuses or a token
    /// provider that failed), or the consumer refused the broker (a SCRAM server signature
    /// that does not verify). The message names the broker and the mechanism.
    Authentication,
    /// A TLS connection could not be set up: the broker's certificate is not trusted, has
    /// expired or does not name the host; the broker refused the client certificate; or
    /// one end speaks TLS and the other does not. The message names the broker and says
    /// which.
    Tls,
}

#[derive(Debug, Clone)]
struct Inner {
    kind: ErrorKind,
    message: String,
    code: Option<ErrorCode>,
    partition: Option<TopicPartition>,
    offset: Option<i64>,
    skip_to: Option<i64>,
    divergent_offset: Option<i64>,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// The error type of every fallible call in this crate.
///
/// It says what kind of failure it is ([`Error::kind`]), whether retrying may help
/// ([`Error::is_retriable`]), the Kafka error code if a broker sent one
/// ([`Error::kafka_code`]), the partition it concerns if any ([`Error::partition`]), and
/// the underlying cause through [`std::error::Error::source`].
#[derive(Clone)]
pub struct Error(Box<Inner>);

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error(Box::new(Inner {
            kind,
            message: message.into(),
            code: None,
            partition: None,
            offset: None,
            skip_to: None,
            divergent_offset: None,
            source: None,
        }))
    }

    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, message)
    }

    pub(crate) fn closed() -> Error {
        Error::new(ErrorKind::Closed, "the consumer is closed")
    }

    /// The consumer can no longer work because its I/O thread stopped for `cause`.
    pub(crate) fn stopped(cause: &Error) -> Error {
        Error::new(
            ErrorKind::Closed,
            format!("the consumer's I/O thread stopped: {cause}"),
        )
        .with_source(cause.clone())
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Unsupported, message)
    }

    pub(crate) fn wakeup() -> Error {
        Error::new(ErrorKind::Wakeup, "interrupted by wakeup()")
    }

    pub(crate) fn timeout(what: impl Into<String>) -> Error {
        Error::new(ErrorKind::Timeout, what)
    }

    pub(crate) fn broker(code: ErrorCode, what: impl Into<String>) -> Error {
        let kind = match code {
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION | ErrorCode::UNKNOWN_TOPIC_ID => {
                ErrorKind::UnknownTopicOrPartition
            }
            ErrorCode::OFFSET_OUT_OF_RANGE => ErrorKind::OffsetOutOfRange,
            _ => ErrorKind::Broker,
        };
        let mut e = Error::new(kind, what);
        e.0.code = Some(code);
        e
    }

    pub(crate) fn decode(e: DecodeError, what: impl Into<String>) -> Error {
        Error::new(ErrorKind::Protocol, what).with_source(e)
    }

    pub(crate) fn io(e: std::io::Error, what: impl Into<String>) -> Error {
        Error::new(ErrorKind::Io, what).with_source(e)
    }

    /// A record batch of `tp` at `offset` could not be read; `skip_to` is the offset after
    /// the batch, when its header could be read.
    pub(crate) fn records(
        e: RecordError,
        tp: &TopicPartition,
        offset: i64,
        skip_to: Option<i64>,
    ) -> Error {
        let kind = match e.without_offset() {
            RecordError::CrcMismatch { .. } | RecordError::OffsetOrder(_) => ErrorKind::Corrupt,
            RecordError::UnsupportedMagic(_)
            | RecordError::CodecDisabled(_)
            | RecordError::UnknownCompression(_) => ErrorKind::Unsupported,
            _ => ErrorKind::Protocol,
        };
        let hint = match skip_to {
            Some(next) => format!("; seek to {next} to skip the batch"),
            None => String::new(),
        };
        let mut err = Error::new(
            kind,
            format!("partition {tp} at offset {offset}: {e}{hint}"),
        )
        .with_partition(tp.clone())
        .with_offset(offset)
        .with_source(e);
        err.0.skip_to = skip_to;
        err
    }

    pub(crate) fn with_partition(mut self, tp: TopicPartition) -> Error {
        self.0.partition = Some(tp);
        self
    }

    pub(crate) fn set_kind(&mut self, kind: ErrorKind) {
        self.0.kind = kind;
    }

    pub(crate) fn with_offset(mut self, offset: i64) -> Error {
        self.0.offset = Some(offset);
        self
    }

    pub(crate) fn with_skip_to(mut self, skip_to: i64) -> Error {
        self.0.skip_to = Some(skip_to);
        self
    }

    pub(crate) fn with_divergent_offset(mut self, offset: i64) -> Error {
        self.0.divergent_offset = Some(offset);
        self
    }

    pub(crate) fn with_source(
        mut self,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        self.0.source = Some(Arc::new(e));
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// Whether the same call may succeed if retried later (a timeout, a retriable broker
    /// error, a wakeup).
    pub fn is_retriable(&self) -> bool {
        match self.0.kind {
            ErrorKind::Timeout | ErrorKind::Wakeup | ErrorKind::UnknownTopicOrPartition => true,
            ErrorKind::Broker => self.0.code.is_some_and(ErrorCode::is_retriable),
            _ => false,
        }
    }

    /// The Kafka error code the broker sent, if this error came from one.
    pub fn kafka_code(&self) -> Option<i16> {
        self.0.code.map(ErrorCode::code)
    }

    /// The partition this error concerns, if it concerns one.
    pub fn partition(&self) -> Option<&TopicPartition> {
        self.0.partition.as_ref()
    }

    /// The offset this error concerns, if it concerns one (for a record batch that could
    /// not be read: where it starts).
    pub fn offset(&self) -> Option<i64> {
        self.0.offset
    }

    /// For a record batch that could not be read: the offset after it, where
    /// [`seek`](crate::Consumer::seek) skips it.
    pub fn skip_to(&self) -> Option<i64> {
        self.0.skip_to
    }

    /// For [`ErrorKind::LogTruncation`]: the first offset where the partition's log differs
    /// from what this consumer read, if the leader could say.
    pub fn divergent_offset(&self) -> Option<i64> {
        self.0.divergent_offset
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)?;
        if let Some(code) = self.0.code {
            write!(f, " ({code})")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.0.kind)
            .field("message", &self.0.message)
            .field("code", &self.0.code)
            .field("partition", &self.0.partition)
            .field("offset", &self.0.offset)
            .field("divergent_offset", &self.0.divergent_offset)
            .field("source", &self.0.source)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_code_and_partition() {
        let tp = TopicPartition::new("t", 3);
        let e = Error::broker(ErrorCode::NOT_LEADER_OR_FOLLOWER, format!("fetch {tp}"))
            .with_partition(tp.clone());
        assert_eq!(e.to_string(), "fetch t-3 (NOT_LEADER_OR_FOLLOWER (6))");
        assert!(e.is_retriable());
        assert_eq!(e.kafka_code(), Some(6));
        assert_eq!(e.partition(), Some(&tp));
    }

    #[test]
    fn errors_are_send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Error>();
    }
}
