#![allow(non_camel_case_types)]
//! Kafka error codes that a consumer meets, with the Java client's retriable flag.

use std::fmt;

macro_rules! error_codes {
    ($($name:ident = $code:literal, $retriable:literal, $text:literal;)*) => {
        /// A Kafka protocol error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            /// No error.
            None,
            $(
                #[doc = $text]
                $name,
            )*
            /// A code this crate does not know by name.
            Other(i16),
        }

        impl ErrorCode {
            /// The error for a wire code (0 is [`ErrorCode::None`]).
            pub fn from_code(code: i16) -> ErrorCode {
                match code {
                    0 => ErrorCode::None,
                    $($code => ErrorCode::$name,)*
                    c => ErrorCode::Other(c),
                }
            }

            /// The wire code.
            pub fn code(self) -> i16 {
                match self {
                    ErrorCode::None => 0,
                    $(ErrorCode::$name => $code,)*
                    ErrorCode::Other(c) => c,
                }
            }

            /// Whether the Java client treats this error as retriable.
            pub fn is_retriable(self) -> bool {
                match self {
                    $(ErrorCode::$name => $retriable,)*
                    _ => false,
                }
            }

            /// The Kafka name, e.g. `OFFSET_OUT_OF_RANGE`.
            pub fn name(self) -> &'static str {
                match self {
                    ErrorCode::None => "NONE",
                    $(ErrorCode::$name => stringify!($name),)*
                    ErrorCode::Other(_) => "UNKNOWN_CODE",
                }
            }
        }
    };
}

error_codes! {
    UNKNOWN_SERVER_ERROR = -1, false, "The server hit an unexpected error.";
    OFFSET_OUT_OF_RANGE = 1, false, "The requested offset is outside the range the broker has.";
    CORRUPT_MESSAGE = 2, true, "A message failed its CRC check or is otherwise corrupt.";
    UNKNOWN_TOPIC_OR_PARTITION = 3, true, "The broker does not host this topic or partition.";
    INVALID_FETCH_SIZE = 4, false, "The requested fetch size is invalid.";
    LEADER_NOT_AVAILABLE = 5, true, "A leader election is in progress.";
    NOT_LEADER_OR_FOLLOWER = 6, true, "The broker is not the leader (or a follower) for this partition.";
    REQUEST_TIMED_OUT = 7, true, "The request timed out.";
    BROKER_NOT_AVAILABLE = 8, false, "The broker is not available.";
    REPLICA_NOT_AVAILABLE = 9, true, "The replica is not available.";
    MESSAGE_TOO_LARGE = 10, false, "The message is larger than the broker accepts.";
    OFFSET_METADATA_TOO_LARGE = 12, false, "The committed offset metadata is larger than the broker accepts.";
    NETWORK_EXCEPTION = 13, true, "The server disconnected before a response was received.";
    COORDINATOR_LOAD_IN_PROGRESS = 14, true, "The coordinator is loading.";
    COORDINATOR_NOT_AVAILABLE = 15, true, "The coordinator is not available.";
    NOT_COORDINATOR = 16, true, "This broker is not the coordinator.";
    INVALID_TOPIC_EXCEPTION = 17, false, "The topic name is invalid.";
    ILLEGAL_GENERATION = 22, false, "The group generation id is not the current one.";
    INCONSISTENT_GROUP_PROTOCOL = 23, false, "The member's protocols are incompatible with the group's (or empty).";
    INVALID_GROUP_ID = 24, false, "The group id is invalid.";
    UNKNOWN_MEMBER_ID = 25, false, "The coordinator does not know this member.";
    INVALID_SESSION_TIMEOUT = 26, false, "The session timeout is outside the range the broker allows.";
    REBALANCE_IN_PROGRESS = 27, false, "The group is rebalancing; the member must rejoin.";
    INVALID_COMMIT_OFFSET_SIZE = 28, false, "The size of the offset commit data is invalid.";
    TOPIC_AUTHORIZATION_FAILED = 29, false, "Not authorized to access the topic.";
    GROUP_AUTHORIZATION_FAILED = 30, false, "Not authorized to access the group.";
    CLUSTER_AUTHORIZATION_FAILED = 31, false, "Not authorized for the cluster.";
    UNSUPPORTED_SASL_MECHANISM = 33, false, "The broker does not enable the requested SASL mechanism.";
    ILLEGAL_SASL_STATE = 34, false, "The SASL request is not valid in the connection's authentication state.";
    UNSUPPORTED_VERSION = 35, false, "The broker does not support this version of the API.";
    INVALID_REQUEST = 42, false, "The broker rejected the request as malformed.";
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43, false, "The message format does not support this request.";
    KAFKA_STORAGE_ERROR = 56, true, "The broker hit a storage error.";
    SASL_AUTHENTICATION_FAILED = 58, false, "SASL authentication failed (the broker's message says why).";
    GROUP_ID_NOT_FOUND = 69, false, "The group does not exist.";
    FETCH_SESSION_ID_NOT_FOUND = 70, true, "The fetch session id is not known to the broker.";
    INVALID_FETCH_SESSION_EPOCH = 71, true, "The fetch session epoch is not the expected one.";
    FENCED_LEADER_EPOCH = 74, true, "The leader epoch in the request is older than the broker's.";
    UNKNOWN_LEADER_EPOCH = 75, true, "The leader epoch in the request is newer than the broker's.";
    UNSUPPORTED_COMPRESSION_TYPE = 76, false, "The requesting client does not support the compression type.";
    OFFSET_NOT_AVAILABLE = 78, true, "The leader's high watermark is not yet known.";
    MEMBER_ID_REQUIRED = 79, false, "The member must rejoin with the member id the coordinator assigned.";
    PREFERRED_LEADER_NOT_AVAILABLE = 80, true, "The preferred leader is not available.";
    GROUP_MAX_SIZE_REACHED = 81, false, "The group has reached its maximum size.";
    FENCED_INSTANCE_ID = 82, false, "Another member with the same group.instance.id has registered.";
    UNSTABLE_OFFSET_COMMIT = 88, true, "The partition has a pending transactional offset commit.";
    UNKNOWN_TOPIC_ID = 100, true, "The topic id is not known to the broker.";
    INCONSISTENT_TOPIC_ID = 103, true, "The topic id does not match the topic name.";
    FETCH_SESSION_TOPIC_ID_ERROR = 106, true, "The fetch session changed between name- and id-based topics.";
    OFFSET_MOVED_TO_TIERED_STORAGE = 109, false, "The offset is in tiered storage.";
    FENCED_MEMBER_EPOCH = 110, false, "The member epoch is fenced; the member must abandon its partitions and rejoin.";
    UNRELEASED_INSTANCE_ID = 111, false, "The instance id is still used by another member of the group.";
    UNSUPPORTED_ASSIGNOR = 112, false, "The group does not support the assignor or its version range.";
    STALE_MEMBER_EPOCH = 113, false, "The member epoch is stale; retry after the next heartbeat brings the current one.";
    INVALID_REGULAR_EXPRESSION = 128, false, "The subscription regular expression is invalid.";
    REBOOTSTRAP_REQUIRED = 129, false, "The client must rebootstrap.";
}

impl ErrorCode {
    /// Whether this is an error at all.
    pub fn is_err(self) -> bool {
        self != ErrorCode::None
    }

    /// Whether a fetch or list-offsets answer with this error means our view of who leads
    /// the partition is stale and metadata must be refreshed.
    pub fn needs_metadata_refresh(self) -> bool {
        matches!(
            self,
            ErrorCode::NOT_LEADER_OR_FOLLOWER
                | ErrorCode::LEADER_NOT_AVAILABLE
                | ErrorCode::REPLICA_NOT_AVAILABLE
                | ErrorCode::KAFKA_STORAGE_ERROR
                | ErrorCode::FENCED_LEADER_EPOCH
                | ErrorCode::OFFSET_NOT_AVAILABLE
                | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                | ErrorCode::UNKNOWN_TOPIC_ID
                | ErrorCode::INCONSISTENT_TOPIC_ID
                | ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorCode::Other(c) => write!(f, "error code {c}"),
            e => write!(f, "{} ({})", e.name(), e.code()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for c in -1..=130 {
            assert_eq!(ErrorCode::from_code(c).code(), c);
        }
        assert_eq!(ErrorCode::from_code(6), ErrorCode::NOT_LEADER_OR_FOLLOWER);
        assert!(ErrorCode::NOT_LEADER_OR_FOLLOWER.is_retriable());
        assert!(!ErrorCode::OFFSET_OUT_OF_RANGE.is_retriable());
        assert_eq!(
            ErrorCode::OFFSET_OUT_OF_RANGE.to_string(),
            "OFFSET_OUT_OF_RANGE (1)"
        );
    }

    #[test]
    fn group_errors_carry_the_java_clients_retriable_flag() {
        use ErrorCode::*;
        let retriable = [
            COORDINATOR_LOAD_IN_PROGRESS,
            COORDINATOR_NOT_AVAILABLE,
            NOT_COORDINATOR,
            UNSTABLE_OFFSET_COMMIT,
        ];
        let fatal = [
            OFFSET_METADATA_TOO_LARGE,
            ILLEGAL_GENERATION,
            INCONSISTENT_GROUP_PROTOCOL,
            INVALID_GROUP_ID,
            UNKNOWN_MEMBER_ID,
            INVALID_SESSION_TIMEOUT,
            REBALANCE_IN_PROGRESS,
            INVALID_COMMIT_OFFSET_SIZE,
            GROUP_AUTHORIZATION_FAILED,
            GROUP_ID_NOT_FOUND,
            MEMBER_ID_REQUIRED,
            GROUP_MAX_SIZE_REACHED,
            FENCED_INSTANCE_ID,
            FENCED_MEMBER_EPOCH,
            UNRELEASED_INSTANCE_ID,
            UNSUPPORTED_ASSIGNOR,
            STALE_MEMBER_EPOCH,
            INVALID_REGULAR_EXPRESSION,
        ];
        for e in retriable {
            assert!(e.is_retriable(), "{e}");
        }
        for e in fatal {
            assert!(!e.is_retriable(), "{e}");
        }
        let codes: Vec<i16> = retriable.iter().chain(&fatal).map(|e| e.code()).collect();
        assert_eq!(
            codes,
            [
                14, 15, 16, 88, 12, 22, 23, 24, 25, 26, 27, 28, 30, 69, 79, 81, 82, 110, 111, 112,
                113, 128
            ]
        );
        for c in codes {
            assert!(!matches!(ErrorCode::from_code(c), Other(_)), "{c}");
        }
        assert_eq!(STALE_MEMBER_EPOCH.to_string(), "STALE_MEMBER_EPOCH (113)");
    }
}
