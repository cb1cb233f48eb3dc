//! Consumer configuration: a builder, and the Java / librdkafka property names.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::group::assignor::{self, Assignor};
use crate::security::{
    parse_jaas, OAuthBearerTokenProvider, Pem, SaslMechanism, SaslSettings, Secret,
    SecurityProtocol, TlsSettings, TokenProviderHandle, UnsecuredJwsProvider,
};
use crate::types::OffsetReset;

/// Which records a fetch may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IsolationLevel {
    /// Everything up to the high watermark, including records of open and aborted transactions.
    ReadUncommitted,
    /// Only committed records, up to the last stable offset; aborted transactions are filtered.
    ReadCommitted,
}

impl IsolationLevel {
    pub(crate) fn wire(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Configuration of a [`Consumer`](crate::Consumer).
///
/// Build it with methods, or from the property names the Java client and librdkafka use:
///
/// ```
/// use kafka_consumer::{ConsumerConfig, OffsetReset};
///
/// let a = ConsumerConfig::new("127.0.0.1:9092").auto_offset_reset(OffsetReset::Earliest);
/// let b = ConsumerConfig::from_properties([
///     ("bootstrap.servers", "127.0.0.1:9092"),
///     ("auto.offset.reset", "earliest"),
/// ])?;
/// assert_eq!(a.bootstrap_servers(), b.bootstrap_servers());
/// # Ok::<(), kafka_consumer::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub(crate) bootstrap: Vec<String>,
    pub(crate) client_id: String,
    pub(crate) group_id: Option<String>,
    pub(crate) auto_offset_reset: OffsetReset,
    pub(crate) isolation_level: IsolationLevel,
    pub(crate) check_crcs: bool,
    pub(crate) max_poll_records: usize,
    pub(crate) fetch_min_bytes: i32,
    pub(crate) fetch_max_bytes: i32,
    pub(crate) fetch_max_wait: Duration,
    pub(crate) max_partition_fetch_bytes: i32,
    pub(crate) fetch_buffer_bytes: usize,
    pub(crate) request_timeout: Duration,
    pub(crate) default_api_timeout: Duration,
    pub(crate) reconnect_backoff: Duration,
    pub(crate) reconnect_backoff_max: Duration,
    pub(crate) retry_backoff: Duration,
    pub(crate) retry_backoff_max: Duration,
    pub(crate) metadata_max_age: Duration,
    pub(crate) connection_setup_timeout: Duration,
    pub(crate) client_rack: String,
    pub(crate) group_protocol: GroupProtocol,
    /// `group.remote.assignor` (consumer protocol; None: the broker's default).
    pub(crate) group_remote_assignor: Option<String>,
    pub(crate) group_instance_id: Option<String>,
    pub(crate) session_timeout: Duration,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) max_poll_interval: Duration,
    pub(crate) assignment_strategy: Vec<String>,
    pub(crate) enable_auto_commit: bool,
    pub(crate) auto_commit_interval: Duration,
    /// The classic-protocol settings set explicitly (by property or builder method), which
    /// `group.protocol=consumer` refuses, as the Java client does.
    pub(crate) explicit: ClassicSettings,
    pub(crate) security_protocol: SecurityProtocol,
    pub(crate) tls: TlsSettings,
    pub(crate) sasl: SaslSettings,
    /// librdkafka's `enable.sasl.oauthbearer.unsecure.jwt` and `sasl.oauthbearer.config`.
    pub(crate) oauthbearer_unsecured: Option<UnsecuredJwsProvider>,
    pub(crate) oauthbearer_unsecured_enabled: bool,
}

/// Which classic-protocol group settings were set explicitly. Their defaults work with
/// both protocols; a value set on purpose is an error under `group.protocol=consumer`,
/// where the broker controls them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClassicSettings {
    pub session_timeout: bool,
    pub heartbeat_interval: bool,
    pub assignment_strategy: bool,
}

/// Which group protocol a subscribing consumer speaks (`group.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupProtocol {
    /// The classic protocol (JoinGroup, SyncGroup, Heartbeat), with client-side assignors
    /// (`partition.assignment.strategy`). The default, as in the Java client.
    Classic,
    /// The consumer group protocol of KIP-848 (ConsumerGroupHeartbeat): the broker
    /// assigns (`group.remote.assignor`), controls the session and heartbeat timing
    /// (`group.consumer.session.timeout.ms`, `group.consumer.heartbeat.interval.ms`), and
    /// rebalances are incremental. Needs Kafka 4.0 or later. `session.timeout.ms`,
    /// `heartbeat.interval.ms` and `partition.assignment.strategy` must not be set with it.
    Consumer,
}

impl ConsumerConfig {
    /// A configuration with the Java client's defaults and the given bootstrap servers
    /// (`host:port`, comma-separated for several).
    pub fn new(bootstrap_servers: &str) -> ConsumerConfig {
        ConsumerConfig {
            bootstrap: split_list(bootstrap_servers),
            client_id: "kafka-consumer".to_owned(),
            group_id: None,
            auto_offset_reset: OffsetReset::Latest,
            isolation_level: IsolationLevel::ReadUncommitted,
            check_crcs: true,
            max_poll_records: 500,
            fetch_min_bytes: 1,
            fetch_max_bytes: 52_428_800,
            fetch_max_wait: Duration::from_millis(500),
            max_partition_fetch_bytes: 1_048_576,
            fetch_buffer_bytes: 32 * 1024 * 1024,
            request_timeout: Duration::from_millis(30_000),
            default_api_timeout: Duration::from_millis(60_000),
            reconnect_backoff: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_millis(1_000),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_millis(1_000),
            metadata_max_age: Duration::from_millis(300_000),
            connection_setup_timeout: Duration::from_millis(10_000),
            client_rack: String::new(),
            group_protocol: GroupProtocol::Classic,
            group_remote_assignor: None,
            group_instance_id: None,
            session_timeout: Duration::from_millis(45_000),
            heartbeat_interval: Duration::from_millis(3_000),
            max_poll_interval: Duration::from_millis(300_000),
            assignment_strategy: vec!["range".to_owned(), "cooperative-sticky".to_owned()],
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_millis(5_000),
            explicit: ClassicSettings::default(),
            security_protocol: SecurityProtocol::Plaintext,
            tls: TlsSettings::default(),
            sasl: SaslSettings::default(),
            oauthbearer_unsecured: None,
            oauthbearer_unsecured_enabled: false,
        }
    }

    /// Builds a configuration from `(key, value)` properties. `bootstrap.servers` is required.
    /// An unknown key or a bad value is an error of kind [`Config`](crate::ErrorKind::Config).
    pub fn from_properties<'a, I>(props: I) -> Result<ConsumerConfig>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut c = ConsumerConfig::new("");
        for (k, v) in props {
            c.apply(k, v)?;
        }
        if c.bootstrap.is_empty() {
            return Err(Error::config("bootstrap.servers is required"));
        }
        Ok(c)
    }

    /// Sets one property by its Java (or librdkafka) name.
    ///
    /// Accepted keys: `bootstrap.servers` (`metadata.broker.list`), `client.id`, `group.id`,
    /// `auto.offset.reset`, `isolation.level`, `check.crcs`, `max.poll.records`,
    /// `fetch.min.bytes`, `fetch.max.bytes`, `fetch.max.wait.ms` (`fetch.wait.max.ms`),
    /// `max.partition.fetch.bytes` (`fetch.message.max.bytes`), `fetch.buffer.bytes`
    /// (`queued.max.messages.kbytes`, in KiB), `request.timeout.ms` (`socket.timeout.ms`),
    /// `default.api.timeout.ms`, `reconnect.backoff.ms`, `reconnect.backoff.max.ms`,
    /// `retry.backoff.ms`, `metadata.max.age.ms` (`topic.metadata.refresh.interval.ms`),
    /// `socket.connection.setup.timeout.ms`, `client.rack`; for groups: `group.protocol`
    /// (`classic` or `consumer`), `group.instance.id`, `max.poll.interval.ms`,
    /// `enable.auto.commit`, `auto.commit.interval.ms`; for the classic protocol only:
    /// `session.timeout.ms`, `heartbeat.interval.ms`, `partition.assignment.strategy`
    /// (comma-separated names `range`, `roundrobin`, `cooperative-sticky`, or the Java
    /// class names); for the consumer protocol only: `group.remote.assignor`.
    ///
    /// A setting of the other protocol is accepted here and refused when the consumer is
    /// created (the combination is what is wrong, and the keys may come in any order).
    ///
    /// Security: `security.protocol` (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`);
    /// `sasl.mechanism` (`sasl.mechanisms`): `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`,
    /// `OAUTHBEARER`; `sasl.jaas.config` (`PlainLoginModule` / `ScramLoginModule` with
    /// `username` and `password`, `OAuthBearerLoginModule` with
    /// `unsecuredLoginStringClaim_sub` for unsecured test tokens), `sasl.username`,
    /// `sasl.password`, `enable.sasl.oauthbearer.unsecure.jwt`, `sasl.oauthbearer.config`
    /// (`principal=NAME [lifeSeconds=N] [scope=a,b]`); TLS with PEM files or text only:
    /// `ssl.truststore.type` and `ssl.keystore.type` (`PEM`), `ssl.truststore.location`
    /// (`ssl.ca.location`), `ssl.truststore.certificates` (`ssl.ca.pem`),
    /// `ssl.keystore.location` (key and chain in one file), `ssl.keystore.key`
    /// (`ssl.key.pem`), `ssl.keystore.certificate.chain` (`ssl.certificate.pem`),
    /// `ssl.certificate.location`, `ssl.key.location`, `ssl.key.password` (refused: encrypted
    /// keys are not supported), `ssl.endpoint.identification.algorithm` (`https`, or empty
    /// for no hostname check), `enable.ssl.certificate.verification`, `ssl.protocol` and
    /// `ssl.enabled.protocols` (`TLSv1.2`, `TLSv1.3`). Passwords, keys and tokens are kept
    /// as [`Secret`]s: never logged, never shown by `Debug`.
    ///
    /// Like the typed methods it takes the configuration and gives it back, so the two
    /// chain (in a loop: `config = config.set(key, value)?`):
    ///
    /// ```
    /// use kafka_consumer::{ConsumerConfig, OffsetReset};
    ///
    /// let config = ConsumerConfig::new("127.0.0.1:9092")
    ///     .set("group.id", "billing")?
    ///     .set("max.poll.records", "100")?
    ///     .auto_offset_reset(OffsetReset::Earliest);
    /// # Ok::<(), kafka_consumer::Error>(())
    /// ```
    ///
    /// Errors: [`Config`](crate::ErrorKind::Config) for an unknown key or a bad value (the
    /// message names the key), [`Unsupported`](crate::ErrorKind::Unsupported) for GSSAPI.
    pub fn set(mut self, key: &str, value: &str) -> Result<ConsumerConfig> {
        self.apply(key, value)?;
        Ok(self)
    }

    /// [`ConsumerConfig::set`] in place.
    fn apply(&mut self, key: &str, value: &str) -> Result<()> {
        let v = value.trim();
        match key {
            "bootstrap.servers" | "metadata.broker.list" => {
                self.bootstrap = split_list(v);
                for s in &self.bootstrap {
                    parse_host_port(s).map_err(|e| Error::config(format!("`{key}`: {e}")))?;
                }
            }
            "client.id" => self.client_id = v.to_owned(),
            "group.id" => self.group_id = (!v.is_empty()).then(|| v.to_owned()),
            "auto.offset.reset" => {
                self.auto_offset_reset = match v.to_ascii_lowercase().as_str() {
                    "earliest" | "smallest" | "beginning" => OffsetReset::Earliest,
                    "latest" | "largest" | "end" => OffsetReset::Latest,
                    "none" | "error" => OffsetReset::None,
                    _ => return Err(bad(key, v, "earliest, latest or none")),
                }
            }
            "isolation.level" => {
                self.isolation_level = match v.to_ascii_lowercase().as_str() {
                    "read_uncommitted" => IsolationLevel::ReadUncommitted,
                    "read_committed" => IsolationLevel::ReadCommitted,
                    _ => return Err(bad(key, v, "read_committed or read_uncommitted")),
                }
            }
            "check.crcs" => self.check_crcs = parse_bool(key, v)?,
            "max.poll.records" => {
                self.max_poll_records = parse_num(key, v, 1, i32::MAX as i64)? as usize
            }
            "fetch.min.bytes" => {
                self.fetch_min_bytes = parse_num(key, v, 0, i32::MAX as i64)? as i32
            }
            "fetch.max.bytes" => {
                self.fetch_max_bytes = parse_num(key, v, 0, i32::MAX as i64)? as i32
            }
            "fetch.max.wait.ms" | "fetch.wait.max.ms" => self.fetch_max_wait = parse_ms(key, v)?,
            "max.partition.fetch.bytes" | "fetch.message.max.bytes" => {
                self.max_partition_fetch_bytes = parse_num(key, v, 1, i32::MAX as i64)? as i32
            }
            "fetch.buffer.bytes" => {
                self.fetch_buffer_bytes = parse_num(key, v, 1, i64::MAX)? as usize
            }
            "queued.max.messages.kbytes" => {
                self.fetch_buffer_bytes = parse_num(key, v, 1, i64::MAX / 1024)? as usize * 1024
            }
            "request.timeout.ms" | "socket.timeout.ms" => self.request_timeout = parse_ms(key, v)?,
            "default.api.timeout.ms" => self.default_api_timeout = parse_ms(key, v)?,
            "reconnect.backoff.ms" => self.reconnect_backoff = parse_ms(key, v)?,
            "reconnect.backoff.max.ms" => self.reconnect_backoff_max = parse_ms(key, v)?,
            "retry.backoff.ms" => self.retry_backoff = parse_ms(key, v)?,
            "retry.backoff.max.ms" => self.retry_backoff_max = parse_ms(key, v)?,
            "metadata.max.age.ms" | "topic.metadata.refresh.interval.ms" => {
                self.metadata_max_age = parse_ms(key, v)?
            }
            "socket.connection.setup.timeout.ms" => {
                self.connection_setup_timeout = parse_ms(key, v)?
            }
            "client.rack" => self.client_rack = v.to_owned(),
            "group.protocol" => {
                self.group_protocol = match v.to_ascii_lowercase().as_str() {
                    "classic" => GroupProtocol::Classic,
                    "consumer" => GroupProtocol::Consumer,
                    _ => return Err(bad(key, v, "classic, consumer")),
                }
            }
            "group.remote.assignor" => {
                if !v.is_empty() {
                    check_remote_assignor(v)?;
                }
                self.group_remote_assignor = (!v.is_empty()).then(|| v.to_owned())
            }
            "group.instance.id" => self.group_instance_id = (!v.is_empty()).then(|| v.to_owned()),
            "session.timeout.ms" => {
                self.session_timeout = parse_ms(key, v)?;
                self.explicit.session_timeout = true;
            }
            "heartbeat.interval.ms" => {
                self.heartbeat_interval = parse_ms(key, v)?;
                self.explicit.heartbeat_interval = true;
            }
            "max.poll.interval.ms" => self.max_poll_interval = parse_ms(key, v)?,
            "partition.assignment.strategy" => {
                self.assignment_strategy = split_list(v);
                self.explicit.assignment_strategy = true;
            }
            "enable.auto.commit" => self.enable_auto_commit = parse_bool(key, v)?,
            "auto.commit.interval.ms" => self.auto_commit_interval = parse_ms(key, v)?,
            _ => return self.set_security(key, value),
        }
        Ok(())
    }

    /// The security settings: `security.protocol`, SASL and TLS, by their Java and
    /// librdkafka names. Values are not trimmed where they may be secrets or PEM text.
    fn set_security(&mut self, key: &str, value: &str) -> Result<()> {
        let v = value.trim();
        let path = || Pem::File(v.into());
        let inline = || Pem::Inline(Secret::new(value));
        match key {
            "security.protocol" => {
                self.security_protocol = SecurityProtocol::parse(v)
                    .ok_or_else(|| bad(key, v, "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"))?
            }
            "sasl.mechanism" | "sasl.mechanisms" => {
                self.sasl.mechanism = Some(parse_mechanism(key, v)?);
            }
            "sasl.jaas.config" => self.set_jaas(value)?,
            "sasl.username" => self.sasl.username = Some(v.to_owned()),
            "sasl.password" => self.sasl.password = Some(Secret::new(value)),
            "enable.sasl.oauthbearer.unsecure.jwt" => {
                self.oauthbearer_unsecured_enabled = parse_bool(key, v)?
            }
            "sasl.oauthbearer.config" => {
                self.oauthbearer_unsecured = Some(parse_rdkafka_oauthbearer(v)?)
            }
            "ssl.truststore.type" | "ssl.keystore.type" => {
                self.tls.store_types.retain(|(k, _)| k != key);
                if !v.eq_ignore_ascii_case("PEM") {
                    self.tls.store_types.push((key.to_owned(), v.to_owned()));
                }
            }
            "ssl.truststore.location" | "ssl.ca.location" => {
                // librdkafka's `probe` means the system's roots, as no setting does.
                self.tls.ca = (!v.is_empty() && v != "probe").then(path)
            }
            "ssl.truststore.certificates" | "ssl.ca.pem" => self.tls.ca = Some(inline()),
            "ssl.keystore.location" => self.tls.keystore = Some(path()),
            "ssl.keystore.key" | "ssl.key.pem" => self.tls.private_key = Some(inline()),
            "ssl.keystore.certificate.chain" | "ssl.certificate.pem" => {
                self.tls.certificate_chain = Some(inline())
            }
            "ssl.certificate.location" => self.tls.certificate_chain = Some(path()),
            "ssl.key.location" => self.tls.private_key = Some(path()),
            "ssl.key.password" | "ssl.keystore.password" => {
                self.tls.key_password = (!value.is_empty()).then(|| Secret::new(value))
            }
            "ssl.truststore.password" => {
                if !value.is_empty() {
                    return Err(Error::config(
                        "`ssl.truststore.password` is not used: trust stores are PEM files, \
                         which have no password (leave it unset)",
                    ));
                }
            }
            "ssl.endpoint.identification.algorithm" => {
                self.tls.verify_hostname = match v.to_ascii_lowercase().as_str() {
                    "https" => true,
                    "" | "none" => false,
                    _ => return Err(bad(key, v, "https, or empty to turn the check off")),
                }
            }
            "enable.ssl.certificate.verification" => {
                self.tls.verify_certificate = parse_bool(key, v)?
            }
            "ssl.protocol" | "ssl.enabled.protocols" => {
                for p in split_list(v) {
                    if !matches!(p.as_str(), "TLS" | "TLSv1.2" | "TLSv1.3") {
                        return Err(bad(
                            key,
                            &p,
                            "TLSv1.2 or TLSv1.3 (both are enabled; older versions are not supported)",
                        ));
                    }
                }
            }
            _ => return Err(Error::config(format!("unknown configuration key `{key}`"))),
        }
        Ok(())
    }

    /// `sasl.jaas.config`: the PLAIN and SCRAM login modules give the user name and
    /// password; the OAUTHBEARER one, with `unsecuredLoginStringClaim_sub`, the unsecured
    /// token provider for tests and local brokers.
    fn set_jaas(&mut self, value: &str) -> Result<()> {
        let jaas =
            parse_jaas(value).map_err(|e| Error::config(format!("`sasl.jaas.config`: {e}")))?;
        match jaas.simple_name() {
            "PlainLoginModule" | "ScramLoginModule" => {
                let (Some(user), Some(password)) =
                    (jaas.option("username"), jaas.option("password"))
                else {
                    return Err(Error::config(format!(
                        "`sasl.jaas.config`: {} needs username=\"...\" and password=\"...\"",
                        jaas.simple_name()
                    )));
                };
                self.sasl.username = Some(user.to_owned());
                self.sasl.password = Some(Secret::new(password));
            }
            "OAuthBearerLoginModule" => {
                if let Some(sub) = jaas.option("unsecuredLoginStringClaim_sub") {
                    let mut p = UnsecuredJwsProvider::new(sub);
                    if let Some(secs) = jaas.option("unsecuredLoginLifetimeSeconds") {
                        let secs = parse_num("unsecuredLoginLifetimeSeconds", secs, 1, 1 << 32)?;
                        p = p.lifetime(Duration::from_secs(secs as u64));
                    }
                    if let Some(scope) = jaas.option("unsecuredLoginListClaim_scope") {
                        // Java separates list claims by their first character.
                        let mut chars = scope.chars();
                        if let Some(sep) = chars.next() {
                            let items: Vec<&str> = chars
                                .as_str()
                                .split(sep)
                                .filter(|s| !s.is_empty())
                                .collect();
                            p = p.scope(&items);
                        }
                    }
                    self.sasl.token_provider = Some(TokenProviderHandle(std::sync::Arc::new(p)));
                }
            }
            "Krb5LoginModule" => {
                return Err(Error::unsupported(
                    "`sasl.jaas.config`: GSSAPI (Kerberos) is not supported (it needs a C \
                     library); use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER",
                ))
            }
            other => {
                return Err(Error::config(format!(
                    "`sasl.jaas.config`: login module {other} is not supported; use \
                     PlainLoginModule, ScramLoginModule or OAuthBearerLoginModule (for other \
                     token sources, such as a cloud IAM login, supply the tokens with \
                     ConsumerConfig::sasl_oauthbearer)"
                )))
            }
        }
        self.sasl.login_module = Some(jaas.simple_name().to_owned());
        Ok(())
    }

    /// The bootstrap servers, as given.
    pub fn bootstrap_servers(&self) -> &[String] {
        &self.bootstrap
    }

    /// Sets `client.id`, sent with every request and shown in broker logs.
    pub fn client_id(mut self, id: &str) -> Self {
        self.client_id = id.to_owned();
        self
    }

    /// Sets `group.id`: the group whose committed offsets position newly assigned
    /// partitions and to which [`Consumer::commit_sync`](crate::Consumer::commit_sync) and
    /// friends commit. With manually assigned partitions the consumer is not a member of
    /// the group; it commits as the Java client does in that mode.
    pub fn group_id(mut self, id: &str) -> Self {
        self.group_id = Some(id.to_owned());
        self
    }

    /// Sets `auto.offset.reset` (default [`OffsetReset::Latest`], as in the Java client).
    pub fn auto_offset_reset(mut self, r: OffsetReset) -> Self {
        self.auto_offset_reset = r;
        self
    }

    /// Sets `isolation.level` (default read_uncommitted, as in the Java client).
    pub fn isolation_level(mut self, l: IsolationLevel) -> Self {
        self.isolation_level = l;
        self
    }

    /// Sets `check.crcs`: verify the CRC-32C of every record batch (default true).
    pub fn check_crcs(mut self, on: bool) -> Self {
        self.check_crcs = on;
        self
    }

    /// Sets `max.poll.records`, the most records one `poll` returns (default 500; at least 1).
    pub fn max_poll_records(mut self, n: usize) -> Self {
        self.max_poll_records = n.max(1);
        self
    }

    /// Sets `fetch.min.bytes` (default 1).
    pub fn fetch_min_bytes(mut self, n: i32) -> Self {
        self.fetch_min_bytes = n.max(0);
        self
    }

    /// Sets `fetch.max.bytes`, the soft limit of one fetch response (default 50 MiB).
    pub fn fetch_max_bytes(mut self, n: i32) -> Self {
        self.fetch_max_bytes = n.max(0);
        self
    }

    /// Sets `fetch.max.wait.ms`, how long the broker may hold a fetch waiting for data.
    pub fn fetch_max_wait(mut self, d: Duration) -> Self {
        self.fetch_max_wait = saturate(d);
        self
    }

    /// Sets `max.partition.fetch.bytes` (default 1 MiB).
    pub fn max_partition_fetch_bytes(mut self, n: i32) -> Self {
        self.max_partition_fetch_bytes = n.max(1);
        self
    }

    /// Sets `fetch.buffer.bytes`: how much memory fetched data may take while it waits for
    /// the application (response frames, decompressed batches, record indexes, spare
    /// buffers) before the I/O thread stops fetching ahead (default 32 MiB). This bounds
    /// memory when the application is slower than the broker. A fetch asks only for what
    /// fits beside the data already waiting (and what it will decode into), so a much
    /// smaller value means smaller fetches and more round trips.
    pub fn fetch_buffer_bytes(mut self, n: usize) -> Self {
        self.fetch_buffer_bytes = n.max(1);
        self
    }

    /// Sets `request.timeout.ms` (default 30 s).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = saturate(d);
        self
    }

    /// Sets `default.api.timeout.ms`, the timeout of blocking calls such as
    /// [`Consumer::end_offsets`](crate::Consumer::end_offsets) (default 60 s).
    pub fn default_api_timeout(mut self, d: Duration) -> Self {
        self.default_api_timeout = saturate(d);
        self
    }

    /// Sets `reconnect.backoff.ms` and `reconnect.backoff.max.ms`.
    pub fn reconnect_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.reconnect_backoff = saturate(initial);
        self.reconnect_backoff_max = saturate(max.max(initial));
        self
    }

    /// Sets `retry.backoff.max.ms`, the longest a retry waits after repeated failures
    /// (default 1 s).
    pub fn retry_backoff_max(mut self, d: Duration) -> Self {
        self.retry_backoff_max = saturate(d);
        self
    }

    /// Sets `socket.connection.setup.timeout.ms`: how long resolving a broker's name, or
    /// connecting to one of its addresses, may take (default 10 s).
    pub fn connection_setup_timeout(mut self, d: Duration) -> Self {
        self.connection_setup_timeout = saturate(d);
        self
    }

    /// Sets `retry.backoff.ms` (default 100 ms).
    pub fn retry_backoff(mut self, d: Duration) -> Self {
        self.retry_backoff = saturate(d);
        self
    }

    /// Sets `metadata.max.age.ms` (default 5 minutes): how often the metadata of the topics
    /// in use is refreshed, and how old the metadata `partitions_for` answers from its cache
    /// may be.
    pub fn metadata_max_age(mut self, d: Duration) -> Self {
        self.metadata_max_age = saturate(d);
        self
    }

    /// Sets `client.rack` (sent with fetches; default empty).
    pub fn client_rack(mut self, rack: &str) -> Self {
        self.client_rack = rack.to_owned();
        self
    }

    /// Sets `security.protocol` (default [`SecurityProtocol::Plaintext`]). `Ssl` and
    /// `SaslSsl` need one of the TLS cargo features (`tls-graviola`, `tls-ring`).
    pub fn security_protocol(mut self, p: SecurityProtocol) -> Self {
        self.security_protocol = p;
        self
    }

    /// Sets `sasl.mechanism` and the user name and password it logs in with (PLAIN and
    /// SCRAM; as `sasl.jaas.config` with `PlainLoginModule` / `ScramLoginModule`, or
    /// librdkafka's `sasl.username` and `sasl.password`). The password is never logged nor
    /// shown by `Debug`.
    pub fn sasl_credentials(
        mut self,
        mechanism: SaslMechanism,
        username: &str,
        password: impl Into<Secret>,
    ) -> Self {
        self.sasl.mechanism = Some(mechanism);
        self.sasl.username = Some(username.to_owned());
        self.sasl.password = Some(password.into());
        self
    }

    /// Sets `sasl.mechanism=OAUTHBEARER` with the provider of its tokens. The provider runs
    /// on a helper thread of the consumer, never on the I/O thread: see
    /// [`OAuthBearerTokenProvider`].
    pub fn sasl_oauthbearer(mut self, provider: impl OAuthBearerTokenProvider) -> Self {
        self.sasl.mechanism = Some(SaslMechanism::OAuthBearer);
        self.sasl.token_provider = Some(TokenProviderHandle(std::sync::Arc::new(provider)));
        self
    }

    /// Trusts the CA certificates in the PEM file at `path` (Java `ssl.truststore.location`
    /// with `ssl.truststore.type=PEM`, librdkafka `ssl.ca.location`) instead of the
    /// operating system's roots.
    pub fn ssl_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.ca = Some(Pem::File(path.into()));
        self
    }

    /// Trusts the CA certificates in `pem` (Java `ssl.truststore.certificates`, librdkafka
    /// `ssl.ca.pem`).
    pub fn ssl_ca_pem(mut self, pem: &str) -> Self {
        self.tls.ca = Some(Pem::Inline(Secret::new(pem)));
        self
    }

    /// Mutual TLS: the client certificate chain (leaf first) and its private key, from PEM
    /// files (librdkafka `ssl.certificate.location` and `ssl.key.location`). The key must
    /// not be encrypted.
    pub fn ssl_client_certificate_files(
        mut self,
        chain: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls.certificate_chain = Some(Pem::File(chain.into()));
        self.tls.private_key = Some(Pem::File(key.into()));
        self
    }

    /// Mutual TLS: the client certificate chain and private key as PEM text (Java
    /// `ssl.keystore.certificate.chain` and `ssl.keystore.key`, librdkafka
    /// `ssl.certificate.pem` and `ssl.key.pem`). The key is never logged nor shown by `Debug`.
    pub fn ssl_client_certificate_pem(mut self, chain: &str, key: impl Into<Secret>) -> Self {
        self.tls.certificate_chain = Some(Pem::Inline(Secret::new(chain)));
        self.tls.private_key = Some(Pem::Inline(key.into()));
        self
    }

    /// Whether the broker's certificate must name the host connected to (default true; Java
    /// `ssl.endpoint.identification.algorithm`: `https`, or empty for off). Turn it off only
    /// for brokers whose certificates name no usable host: the chain is still verified.
    pub fn ssl_hostname_verification(mut self, on: bool) -> Self {
        self.tls.verify_hostname = on;
        self
    }

    /// Sets `group.protocol`, the protocol [`Consumer::subscribe`](crate::Consumer::subscribe)
    /// joins the group with (default [`GroupProtocol::Classic`]). Each protocol has settings
    /// of its own: setting one of the other protocol's is an error of kind
    /// [`Config`](crate::ErrorKind::Config) when the consumer is created.
    pub fn group_protocol(mut self, p: GroupProtocol) -> Self {
        self.group_protocol = p;
        self
    }

    /// Sets `group.remote.assignor` (consumer protocol only; an error with
    /// `group.protocol=classic`): the broker-side assignor the member asks for, `uniform`
    /// or `range` on a stock broker (a name the broker does not know makes it answer
    /// UNSUPPORTED_ASSIGNOR). Empty: unset, the broker's default
    /// (`group.consumer.assignors`). A name is letters, digits, `.`, `_` and `-`; another
    /// one is an error of kind [`Config`](crate::ErrorKind::Config) when the consumer is
    /// created.
    pub fn group_remote_assignor(mut self, name: &str) -> Self {
        let name = name.trim();
        self.group_remote_assignor = (!name.is_empty()).then(|| name.to_owned());
        self
    }

    /// Sets `group.instance.id` (both protocols): a static member (KIP-345) keeps its
    /// partitions through a restart within the session timeout, and does not leave the
    /// group when it closes.
    pub fn group_instance_id(mut self, id: &str) -> Self {
        self.group_instance_id = Some(id.to_owned());
        self
    }

    /// Sets `session.timeout.ms` (classic protocol only; default 45 s): how long the
    /// coordinator waits for a heartbeat before it removes the member. The broker bounds
    /// it (`group.min.session.timeout.ms`, `group.max.session.timeout.ms`). With
    /// `group.protocol=consumer` the broker sets it (`group.consumer.session.timeout.ms`),
    /// and setting it here is an error when the consumer is created.
    pub fn session_timeout(mut self, d: Duration) -> Self {
        self.session_timeout = saturate(d);
        self.explicit.session_timeout = true;
        self
    }

    /// Sets `heartbeat.interval.ms` (classic protocol only; default 3 s); below
    /// `session.timeout.ms`. Heartbeats come from the I/O thread, however long the
    /// application takes between polls. With `group.protocol=consumer` the broker sets it
    /// (`group.consumer.heartbeat.interval.ms`), and setting it here is an error when the
    /// consumer is created.
    pub fn heartbeat_interval(mut self, d: Duration) -> Self {
        self.heartbeat_interval = saturate(d);
        self.explicit.heartbeat_interval = true;
        self
    }

    /// Sets `max.poll.interval.ms` (both protocols; default 5 min): a member that does not
    /// call `poll` for longer leaves the group (its partitions go to others); its next
    /// `poll` reports them lost and rejoins. Also the rebalance timeout the member gives
    /// the coordinator.
    pub fn max_poll_interval(mut self, d: Duration) -> Self {
        self.max_poll_interval = saturate(d);
        self
    }

    /// Sets `partition.assignment.strategy` (classic protocol only): the assignors this
    /// member offers, in order of preference (`range`, `roundrobin`,
    /// `cooperative-sticky`). Default `range, cooperative-sticky`, as in the Java client.
    /// The group uses the first one every member offers; cooperative rebalancing needs
    /// every listed assignor to support it. With `group.protocol=consumer` the broker
    /// assigns (choose its assignor with
    /// [`group_remote_assignor`](Self::group_remote_assignor)), and setting this is an
    /// error when the consumer is created.
    pub fn partition_assignment_strategy(mut self, names: &[&str]) -> Self {
        self.assignment_strategy = names.iter().map(|n| (*n).to_owned()).collect();
        self.explicit.assignment_strategy = true;
        self
    }

    /// Sets `enable.auto.commit` (both protocols; default true): the consumer commits what `poll` has
    /// returned every `auto.commit.interval.ms`, before partitions are revoked, and when it
    /// closes.
    pub fn enable_auto_commit(mut self, on: bool) -> Self {
        self.enable_auto_commit = on;
        self
    }

    /// Sets `auto.commit.interval.ms` (both protocols; default 5 s).
    pub fn auto_commit_interval(mut self, d: Duration) -> Self {
        self.auto_commit_interval = saturate(d);
        self
    }

    /// Checks what subscribing needs: a `group.id` (the settings were checked by
    /// [`validate`](Self::validate)).
    pub(crate) fn validate_group(&self) -> Result<()> {
        if self.group_id.is_none() {
            return Err(Error::config(
                "subscribing needs a group.id (set it with ConsumerConfig::group_id or the group.id property)",
            ));
        }
        Ok(())
    }

    /// Checks that the group settings can work together, and that none of the other
    /// protocol's settings was set (as the Java client's `ConsumerConfig` does).
    fn validate_group_settings(&self) -> Result<()> {
        if self.max_poll_interval.is_zero() {
            return Err(Error::config("max.poll.interval.ms is 0"));
        }
        if self.enable_auto_commit && self.auto_commit_interval.is_zero() {
            return Err(Error::config(
                "auto.commit.interval.ms is 0 with enable.auto.commit=true",
            ));
        }
        match self.group_protocol {
            GroupProtocol::Classic => self.validate_classic(),
            GroupProtocol::Consumer => self.validate_consumer(),
        }
    }

    /// `group.protocol=classic`: the client-side timing and assignors can work, and no
    /// consumer-protocol setting is set.
    fn validate_classic(&self) -> Result<()> {
        if let Some(name) = &self.group_remote_assignor {
            return Err(Error::config(format!(
                "group.remote.assignor (`{name}`) cannot be set when group.protocol=classic: it chooses the broker-side assignor of group.protocol=consumer; with the classic protocol use partition.assignment.strategy"
            )));
        }
        if self.session_timeout.is_zero() {
            return Err(Error::config("session.timeout.ms is 0"));
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.session_timeout {
            return Err(Error::config(format!(
                "heartbeat.interval.ms ({} ms) must be above 0 and below session.timeout.ms ({} ms)",
                self.heartbeat_interval.as_millis(),
                self.session_timeout.as_millis()
            )));
        }
        self.assignors().map(|_| ())
    }

    /// `group.protocol=consumer`: the broker controls the timing and the assignment, so
    /// the classic settings must not be set; the remote assignor is a plausible name.
    fn validate_consumer(&self) -> Result<()> {
        let refused = [
            (
                self.explicit.session_timeout,
                "session.timeout.ms",
                "the broker sets the session timeout (group.consumer.session.timeout.ms)",
            ),
            (
                self.explicit.heartbeat_interval,
                "heartbeat.interval.ms",
                "the broker sets the heartbeat interval (group.consumer.heartbeat.interval.ms)",
            ),
            (
                self.explicit.assignment_strategy,
                "partition.assignment.strategy",
                "the broker assigns the partitions; choose its assignor with group.remote.assignor",
            ),
        ];
        for (set, key, instead) in refused {
            if set {
                return Err(Error::config(format!(
                    "{key} cannot be set when group.protocol=consumer: it is a classic-protocol setting, and under the consumer protocol {instead}"
                )));
            }
        }
        match &self.group_remote_assignor {
            Some(name) => check_remote_assignor(name),
            None => Ok(()),
        }
    }

    /// The configured assignors, in order (built by [`assignor::by_names`]).
    pub(crate) fn assignors(&self) -> Result<Vec<Box<dyn Assignor>>> {
        assignor::by_names(&self.assignment_strategy)
    }

    /// Checks that the settings can work together; the error names the setting and why.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.bootstrap.is_empty() {
            return Err(Error::config("bootstrap.servers is required"));
        }
        for s in &self.bootstrap {
            parse_host_port(s).map_err(|e| Error::config(format!("bootstrap.servers: {e}")))?;
        }
        let positive = [
            ("request.timeout.ms", self.request_timeout),
            ("default.api.timeout.ms", self.default_api_timeout),
            (
                "socket.connection.setup.timeout.ms",
                self.connection_setup_timeout,
            ),
        ];
        for (key, d) in positive {
            if d.is_zero() {
                return Err(Error::config(format!(
                    "{key} is 0: no answer could ever arrive in time"
                )));
            }
        }
        if self.fetch_buffer_bytes < MIN_FETCH_BUFFER_BYTES {
            return Err(Error::config(format!(
                "fetch.buffer.bytes is {}: it must hold at least one record batch's records (at least {MIN_FETCH_BUFFER_BYTES})",
                self.fetch_buffer_bytes
            )));
        }
        if self.fetch_max_bytes == 0 {
            return Err(Error::config(
                "fetch.max.bytes is 0: no fetch could return data",
            ));
        }
        if self.group_id.as_deref() == Some("") {
            return Err(Error::config("group.id is empty"));
        }
        self.validate_security()?;
        self.validate_group_settings()
    }

    /// The security settings fit together and this build supports them.
    fn validate_security(&self) -> Result<()> {
        let protocol = self.security_protocol;
        if protocol.uses_tls() && !cfg!(feature = "tls") {
            return Err(Error::unsupported(format!(
                "security.protocol={protocol} needs TLS, which this build of kafka-consumer \
                 lacks: enable its cargo feature `tls-graviola` (no C) or `tls-ring`"
            )));
        }
        if !protocol.uses_sasl() {
            if self.sasl.mechanism.is_some() || self.sasl.login_module.is_some() {
                log::warn!(
                    "SASL settings are ignored with security.protocol={protocol} (use SASL_SSL or SASL_PLAINTEXT)"
                );
            }
            return Ok(());
        }
        let Some(mechanism) = self.sasl.mechanism else {
            return Err(Error::config(format!(
                "security.protocol={protocol} needs sasl.mechanism: PLAIN, SCRAM-SHA-256, \
                 SCRAM-SHA-512 or OAUTHBEARER (GSSAPI, the Java client's default, is not supported)"
            )));
        };
        match mechanism {
            SaslMechanism::Plain | SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                if matches!(
                    mechanism,
                    SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512
                ) && !cfg!(feature = "scram")
                {
                    return Err(Error::unsupported(format!(
                        "sasl.mechanism={mechanism} needs the `scram` cargo feature of kafka-consumer"
                    )));
                }
                if self.sasl.login_module.as_deref() == Some("OAuthBearerLoginModule") {
                    return Err(Error::config(format!(
                        "sasl.mechanism={mechanism} does not go with OAuthBearerLoginModule in \
                         sasl.jaas.config: use {}",
                        if mechanism == SaslMechanism::Plain {
                            "PlainLoginModule"
                        } else {
                            "ScramLoginModule"
                        }
                    )));
                }
                if self.sasl.username.as_deref().unwrap_or("").is_empty()
                    || self.sasl.password.is_none()
                {
                    return Err(Error::config(format!(
                        "sasl.mechanism={mechanism} needs a user name and password: \
                         sasl.jaas.config (`{} required username=\"...\" password=\"...\";`), \
                         sasl.username and sasl.password, or ConsumerConfig::sasl_credentials",
                        if mechanism == SaslMechanism::Plain {
                            "org.apache.kafka.common.security.plain.PlainLoginModule"
                        } else {
                            "org.apache.kafka.common.security.scram.ScramLoginModule"
                        }
                    )));
                }
            }
            SaslMechanism::OAuthBearer => {
                if self.token_provider().is_none() {
                    return Err(Error::config(
                        "sasl.mechanism=OAUTHBEARER needs a token provider: \
                         ConsumerConfig::sasl_oauthbearer(provider), or for tests and local \
                         brokers the unsecured tokens of sasl.jaas.config \
                         (`OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"alice\";`) \
                         or librdkafka's enable.sasl.oauthbearer.unsecure.jwt=true with \
                         sasl.oauthbearer.config=principal=alice",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The OAUTHBEARER token provider: the one given, or the unsecured one the properties
    /// describe.
    pub(crate) fn token_provider(&self) -> Option<std::sync::Arc<dyn OAuthBearerTokenProvider>> {
        if let Some(p) = &self.sasl.token_provider {
            return Some(std::sync::Arc::clone(&p.0));
        }
        match &self.oauthbearer_unsecured {
            Some(p) if self.oauthbearer_unsecured_enabled => Some(std::sync::Arc::new(p.clone())),
            _ => None,
        }
    }
}

/// A `sasl.mechanism` value.
fn parse_mechanism(key: &str, v: &str) -> Result<SaslMechanism> {
    if v.eq_ignore_ascii_case("GSSAPI") {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "`{key}`: GSSAPI (Kerberos) is not supported (it needs a C library); use PLAIN, \
                 SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
            ),
        ));
    }
    SaslMechanism::parse(v)
        .ok_or_else(|| bad(key, v, "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"))
}

/// librdkafka's `sasl.oauthbearer.config` for its unsecured tokens:
/// `principal=alice [lifeSeconds=3600] [scope=a,b]` (other keys are refused).
fn parse_rdkafka_oauthbearer(v: &str) -> Result<UnsecuredJwsProvider> {
    let key = "sasl.oauthbearer.config";
    let mut principal = None;
    let mut lifetime = None;
    let mut scope: Vec<String> = Vec::new();
    for item in v.split_whitespace() {
        let Some((k, val)) = item.split_once('=') else {
            return Err(bad(key, item, "space-separated key=value pairs"));
        };
        match k {
            "principal" => principal = Some(val.to_owned()),
            "lifeSeconds" => lifetime = Some(parse_num(key, val, 1, 1 << 32)? as u64),
            "scope" => scope = val.split(',').map(str::to_owned).collect(),
            _ => {
                return Err(Error::config(format!(
                    "`{key}`: `{k}` is not supported (principal, lifeSeconds, scope are)"
                )))
            }
        }
    }
    let principal = principal
        .filter(|p| !p.is_empty())
        .ok_or_else(|| Error::config(format!("`{key}` needs principal=NAME")))?;
    let mut p = UnsecuredJwsProvider::new(&principal);
    if let Some(secs) = lifetime {
        p = p.lifetime(Duration::from_secs(secs));
    }
    let scope: Vec<&str> = scope.iter().map(String::as_str).collect();
    Ok(p.scope(&scope))
}

/// The smallest `fetch.buffer.bytes` accepted.
const MIN_FETCH_BUFFER_BYTES: usize = 1024;

/// The longest duration a setting takes: `i32::MAX` milliseconds (about 24.8 days), as in
/// the Java client, whose time settings are `int`s.
const MAX_SETTING: Duration = Duration::from_millis(i32::MAX as u64);

fn saturate(d: Duration) -> Duration {
    d.min(MAX_SETTING)
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Splits `host:port` (IPv6 as `[::1]:9092`), with an optional `PLAINTEXT://` in front.
/// Rejects, with the reason, what could never connect: another scheme (`SSL://`, `http://`),
/// an IPv6 address without brackets, port 0, a missing host or port.
pub(crate) fn parse_host_port(s: &str) -> Result<(String, u16)> {
    let bad = |why: &str| Error::config(format!("bootstrap server `{s}` {why}"));
    let mut rest = s;
    if let Some((scheme, after)) = s.split_once("://") {
        match scheme.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => rest = after,
            "SSL" | "SASL_SSL" | "SASL_PLAINTEXT" => {
                return Err(bad(&format!(
                    "uses {scheme}, which this client does not support yet (only PLAINTEXT)"
                )))
            }
            _ => {
                return Err(bad(&format!(
                "has an unknown scheme `{scheme}://` (expected host:port or PLAINTEXT://host:port)"
            )))
            }
        }
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| bad("has an unclosed `[`"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| bad("has no port after the IPv6 address"))?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad("has a bracketed host that is not an IPv6 address"));
        }
        (host, port)
    } else {
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| bad("is not host:port"))?;
        if host.contains(':') {
            return Err(bad(
                "has more than one `:` (write an IPv6 address in brackets: [::1]:9092)",
            ));
        }
        (host, port)
    };
    let port: u16 = match port.parse() {
        Ok(0) => return Err(bad("has port 0")),
        Ok(p) => p,
        Err(_) => return Err(bad(&format!("has a bad port `{port}`"))),
    };
    if host.is_empty() {
        return Err(bad("has no host"));
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':');
    if !host.chars().all(ok) {
        return Err(bad("has characters a host name cannot have"));
    }
    Ok((host.to_owned(), port))
}

/// A `group.remote.assignor` name the broker could know: not blank, and letters, digits,
/// `.`, `_`, `-` only (the broker answers UNSUPPORTED_ASSIGNOR for one it does not have).
fn check_remote_assignor(name: &str) -> Result<()> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.trim().is_empty() || !name.chars().all(ok) {
        return Err(bad(
            "group.remote.assignor",
            name,
            "an assignor name of letters, digits, `.`, `_` and `-` (the broker's are `uniform` and `range`), or empty for the broker's default",
        ));
    }
    Ok(())
}

fn bad(key: &str, v: &str, expected: &str) -> Error {
    Error::config(format!("`{key}` = `{v}` is invalid: expected {expected}"))
}

fn parse_bool(key: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(bad(key, v, "true or false")),
    }
}

fn parse_num(key: &str, v: &str, min: i64, max: i64) -> Result<i64> {
    match v.parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(key, v, &format!("an integer from {min} to {max}"))),
    }
}

fn parse_ms(key: &str, v: &str) -> Result<Duration> {
    parse_num(key, v, 0, i32::MAX as i64).map(|n| Duration::from_millis(n as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn java_and_librdkafka_names_are_accepted() {
        let c = ConsumerConfig::from_properties([
            ("metadata.broker.list", "a:1,b:2"),
            ("auto.offset.reset", "smallest"),
            ("fetch.wait.max.ms", "100"),
            ("isolation.level", "read_committed"),
            ("check.crcs", "false"),
            ("queued.max.messages.kbytes", "1024"),
        ])
        .unwrap();
        assert_eq!(c.bootstrap, vec!["a:1", "b:2"]);
        assert_eq!(c.auto_offset_reset, OffsetReset::Earliest);
        assert_eq!(c.fetch_max_wait, Duration::from_millis(100));
        assert_eq!(c.isolation_level, IsolationLevel::ReadCommitted);
        assert!(!c.check_crcs);
        assert_eq!(c.fetch_buffer_bytes, 1024 * 1024);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let e = ConsumerConfig::from_properties([("bootstrap.servers", "a:1"), ("nope", "1")])
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.to_string().contains("nope"));
        for (k, v) in [
            ("max.poll.records", "0"),
            ("max.poll.records", "ten"),
            ("auto.offset.reset", "sometimes"),
            ("check.crcs", "yes"),
            ("bootstrap.servers", "localhost"),
            ("bootstrap.servers", "localhost:99999"),
            ("fetch.max.wait.ms", "-1"),
        ] {
            let e = ConsumerConfig::new("a:1").set(k, v).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{k}={v}");
            assert!(e.to_string().contains(k), "{e}");
        }
        let e = ConsumerConfig::from_properties([("client.id", "x")]).unwrap_err();
        assert!(e.to_string().contains("bootstrap.servers"));
    }

    #[test]
    fn host_port_parsing() {
        assert_eq!(parse_host_port("h:1").unwrap(), ("h".into(), 1));
        assert_eq!(parse_host_port("[::1]:9092").unwrap(), ("::1".into(), 9092));
        assert_eq!(
            parse_host_port("plaintext://broker-1.example:9092").unwrap(),
            ("broker-1.example".into(), 9092)
        );
        for (bad, why) in [
            (":9", "no host"),
            ("SSL://host:9093", "SSL"),
            ("SASL_SSL://host:9093", "SASL_SSL"),
            ("http://host:9092", "unknown scheme"),
            ("a:b:9092", "more than one"),
            ("::1:9092", "more than one"),
            ("host:0", "port 0"),
            ("host:65536", "bad port"),
            ("host:", "bad port"),
            ("host", "not host:port"),
            ("[::1:9092", "unclosed"),
            ("[nope]:9092", "not an IPv6"),
            ("ho st:9092", "characters"),
        ] {
            let e = parse_host_port(bad).expect_err(bad);
            assert!(e.to_string().contains(why), "{bad}: {e}");
            let e = ConsumerConfig::new("a:1")
                .set("bootstrap.servers", bad)
                .expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::Config);
        }
    }

    #[test]
    fn nonsense_settings_are_rejected_with_the_reason_and_long_durations_saturate() {
        let ok = ConsumerConfig::new("h:1");
        assert!(ok.validate().is_ok());
        for (cfg, key) in [
            (
                ConsumerConfig::new("h:1").request_timeout(Duration::ZERO),
                "request.timeout.ms",
            ),
            (
                ConsumerConfig::new("h:1").default_api_timeout(Duration::ZERO),
                "default.api.timeout.ms",
            ),
            (
                ConsumerConfig::new("h:1").fetch_buffer_bytes(10),
                "fetch.buffer.bytes",
            ),
            (
                ConsumerConfig::new("h:1").fetch_max_bytes(0),
                "fetch.max.bytes",
            ),
            (ConsumerConfig::new("h:1").group_id(""), "group.id"),
            (ConsumerConfig::new("SSL://h:1"), "SSL"),
        ] {
            let e = cfg.validate().expect_err(key);
            assert_eq!(e.kind(), ErrorKind::Config);
            assert!(e.to_string().contains(key), "{key}: {e}");
        }
        let c = ConsumerConfig::new("h:1")
            .set("request.timeout.ms", "0")
            .expect("set accepts, validate rejects");
        assert!(c.validate().is_err());
        let c = ConsumerConfig::new("h:1")
            .request_timeout(Duration::MAX)
            .default_api_timeout(Duration::MAX)
            .fetch_max_wait(Duration::MAX)
            .metadata_max_age(Duration::MAX)
            .retry_backoff(Duration::MAX)
            .retry_backoff_max(Duration::MAX)
            .connection_setup_timeout(Duration::MAX)
            .reconnect_backoff(Duration::MAX, Duration::MAX);
        assert!(c.validate().is_ok());
        assert_eq!(c.request_timeout, MAX_SETTING);
        assert_eq!(c.default_api_timeout, MAX_SETTING);
    }

    #[test]
    fn group_protocol_accepts_classic_and_consumer_in_any_case_and_names_both_otherwise() {
        for (v, want) in [
            ("classic", GroupProtocol::Classic),
            ("CONSUMER", GroupProtocol::Consumer),
            (" Consumer ", GroupProtocol::Consumer),
        ] {
            let c = ConsumerConfig::from_properties([
                ("bootstrap.servers", "h:1"),
                ("group.protocol", v),
            ])
            .unwrap();
            assert_eq!(c.group_protocol, want, "{v}");
            assert!(c.validate().is_ok(), "{v}: the defaults work");
        }
        let e = ConsumerConfig::new("h:1")
            .set("group.protocol", "eager")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        let msg = e.to_string();
        assert!(
            msg.contains("group.protocol") && msg.contains("classic, consumer"),
            "{msg}"
        );
    }

    #[test]
    fn group_remote_assignor_takes_a_plain_name_and_empty_means_the_broker_default() {
        let c = ConsumerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("group.protocol", "consumer"),
            ("group.remote.assignor", "uniform"),
        ])
        .unwrap();
        assert_eq!(c.group_remote_assignor.as_deref(), Some("uniform"));
        assert!(c.validate().is_ok());
        for name in ["range", "my.custom_assignor-2"] {
            let c = ConsumerConfig::new("h:1")
                .group_protocol(GroupProtocol::Consumer)
                .group_remote_assignor(name);
            assert_eq!(c.group_remote_assignor.as_deref(), Some(name));
            assert!(c.validate().is_ok(), "{name}");
        }
        for empty in ["", "  "] {
            let c = ConsumerConfig::new("h:1")
                .set("group.remote.assignor", empty)
                .unwrap();
            assert_eq!(c.group_remote_assignor, None, "`{empty}` is unset");
            let c = ConsumerConfig::new("h:1").group_remote_assignor(empty);
            assert_eq!(c.group_remote_assignor, None, "`{empty}` is unset");
            assert!(c.validate().is_ok(), "unset works with classic too");
        }
        for bad in ["uni form", "range,uniform", "org/x", "é"] {
            let e = ConsumerConfig::new("h:1")
                .set("group.remote.assignor", bad)
                .expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::Config);
            assert!(e.to_string().contains("group.remote.assignor"), "{e}");
            let e = ConsumerConfig::new("h:1")
                .group_protocol(GroupProtocol::Consumer)
                .group_remote_assignor(bad)
                .validate()
                .expect_err(bad);
            assert_eq!(e.kind(), ErrorKind::Config);
            assert!(e.to_string().contains("group.remote.assignor"), "{e}");
        }
    }

    #[test]
    fn classic_settings_set_explicitly_are_refused_under_the_consumer_protocol() {
        let consumer = || ConsumerConfig::new("h:1").group_protocol(GroupProtocol::Consumer);
        for (cfg, key, says) in [
            (
                consumer().session_timeout(Duration::from_secs(30)),
                "session.timeout.ms",
                "group.consumer.session.timeout.ms",
            ),
            (
                consumer().heartbeat_interval(Duration::from_secs(1)),
                "heartbeat.interval.ms",
                "group.consumer.heartbeat.interval.ms",
            ),
            (
                consumer().partition_assignment_strategy(&["range"]),
                "partition.assignment.strategy",
                "group.remote.assignor",
            ),
        ] {
            let e = cfg.validate().expect_err(key);
            assert_eq!(e.kind(), ErrorKind::Config);
            let msg = e.to_string();
            assert!(
                msg.contains(key) && msg.contains("classic-protocol setting") && msg.contains(says),
                "{key}: {msg}"
            );
        }
        // The same by property, in either order, even with the default value.
        for (key, v) in [
            ("session.timeout.ms", "45000"),
            ("heartbeat.interval.ms", "3000"),
            ("partition.assignment.strategy", "range,cooperative-sticky"),
        ] {
            for protocol_first in [true, false] {
                let mut props = vec![("bootstrap.servers", "h:1"), (key, v)];
                let protocol = ("group.protocol", "consumer");
                if protocol_first {
                    props.insert(1, protocol);
                } else {
                    props.push(protocol);
                }
                let c = ConsumerConfig::from_properties(props).unwrap();
                let e = c.validate().expect_err(key);
                assert_eq!(e.kind(), ErrorKind::Config);
                assert!(e.to_string().contains(key), "{e}");
            }
        }
        // Not set: the defaults are fine, with or without the other group settings.
        let c = consumer()
            .group_id("g")
            .group_instance_id("i-1")
            .max_poll_interval(Duration::from_secs(60))
            .enable_auto_commit(true)
            .auto_commit_interval(Duration::from_secs(1));
        assert!(c.validate().is_ok());
        // The settings both protocols use keep their checks.
        for (cfg, key) in [
            (
                consumer().max_poll_interval(Duration::ZERO),
                "max.poll.interval.ms",
            ),
            (
                consumer().auto_commit_interval(Duration::ZERO),
                "auto.commit.interval.ms",
            ),
        ] {
            let e = cfg.validate().expect_err(key);
            assert!(e.to_string().contains(key), "{e}");
        }
    }

    #[test]
    fn the_remote_assignor_is_refused_under_the_classic_protocol() {
        for cfg in [
            ConsumerConfig::new("h:1").group_remote_assignor("uniform"),
            ConsumerConfig::from_properties([
                ("bootstrap.servers", "h:1"),
                ("group.remote.assignor", "uniform"),
                ("group.protocol", "classic"),
            ])
            .unwrap(),
        ] {
            let e = cfg.validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config);
            let msg = e.to_string();
            assert!(
                msg.contains("group.remote.assignor")
                    && msg.contains("cannot be set when group.protocol=classic"),
                "{msg}"
            );
        }
    }

    #[test]
    fn classic_only_checks_run_only_for_the_classic_protocol() {
        // Classic: the timing and the assignors are checked.
        for (cfg, key) in [
            (
                ConsumerConfig::new("h:1").heartbeat_interval(Duration::from_secs(60)),
                "heartbeat.interval.ms",
            ),
            (
                ConsumerConfig::new("h:1").session_timeout(Duration::ZERO),
                "session.timeout.ms",
            ),
            (
                ConsumerConfig::new("h:1").partition_assignment_strategy(&["sticky-ish"]),
                "partition.assignment.strategy",
            ),
            (
                ConsumerConfig::new("h:1").partition_assignment_strategy(&[]),
                "partition.assignment.strategy",
            ),
        ] {
            let e = cfg.validate().expect_err(key);
            assert_eq!(e.kind(), ErrorKind::Config);
            assert!(e.to_string().contains(key), "{key}: {e}");
        }
        let c = ConsumerConfig::new("h:1")
            .session_timeout(Duration::from_secs(10))
            .heartbeat_interval(Duration::from_secs(2))
            .partition_assignment_strategy(&["roundrobin"]);
        assert!(
            c.validate().is_ok(),
            "explicit classic settings with classic"
        );
        // Consumer: classic values left at their defaults are not looked at.
        let mut c = ConsumerConfig::new("h:1").group_protocol(GroupProtocol::Consumer);
        c.heartbeat_interval = Duration::from_secs(60);
        c.assignment_strategy.clear();
        assert!(c.validate().is_ok());
    }

    fn props(list: &[(&str, &str)]) -> Result<ConsumerConfig> {
        let mut all = vec![("bootstrap.servers", "h:1")];
        all.extend_from_slice(list);
        ConsumerConfig::from_properties(all)
    }

    #[test]
    fn java_security_properties_are_accepted_and_secrets_stay_out_of_debug() {
        let c = props(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "PLAIN"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3cr3t-pw";"#,
            ),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", "/etc/kafka/ca.pem"),
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.key", "-----BEGIN PRIVATE KEY-----\nk3y-m4t3r14l\n-----END PRIVATE KEY-----"),
            ("ssl.keystore.certificate.chain", "-----BEGIN CERTIFICATE-----"),
            ("ssl.endpoint.identification.algorithm", ""),
            ("ssl.enabled.protocols", "TLSv1.2,TLSv1.3"),
        ])
        .unwrap();
        assert_eq!(c.security_protocol, SecurityProtocol::SaslSsl);
        assert_eq!(c.sasl.mechanism, Some(SaslMechanism::Plain));
        assert_eq!(c.sasl.username.as_deref(), Some("alice"));
        assert_eq!(
            c.sasl.password.as_ref().map(Secret::expose),
            Some("s3cr3t-pw")
        );
        assert_eq!(c.tls.ca, Some(Pem::File("/etc/kafka/ca.pem".into())));
        assert!(!c.tls.verify_hostname);
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("s3cr3t-pw") && !debug.contains("k3y-m4t3r14l"),
            "{debug}"
        );
        assert!(debug.contains("[redacted]"));
    }

    #[test]
    fn librdkafka_security_properties_are_accepted() {
        let c = props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanisms", "scram-sha-256"),
            ("sasl.username", "bob"),
            ("sasl.password", "pw"),
            ("ssl.ca.location", "probe"),
            ("ssl.certificate.location", "/c.pem"),
            ("ssl.key.location", "/k.pem"),
            ("enable.ssl.certificate.verification", "false"),
        ])
        .unwrap();
        assert_eq!(c.sasl.mechanism, Some(SaslMechanism::ScramSha256));
        assert_eq!(c.sasl.username.as_deref(), Some("bob"));
        assert_eq!(c.tls.ca, None, "probe: the system's roots");
        assert_eq!(c.tls.certificate_chain, Some(Pem::File("/c.pem".into())));
        assert_eq!(c.tls.private_key, Some(Pem::File("/k.pem".into())));
        assert!(!c.tls.verify_certificate);
        let c = props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "OAUTHBEARER"),
            ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
            (
                "sasl.oauthbearer.config",
                "principal=alice lifeSeconds=60 scope=a,b",
            ),
        ])
        .unwrap();
        assert!(c.token_provider().is_some());
        c.validate_security().unwrap();
    }

    #[test]
    fn bad_security_settings_are_refused_with_the_reason() {
        for (list, says) in [
            (vec![("security.protocol", "TLS")], "SASL_SSL"),
            (vec![("sasl.mechanism", "GSSAPI")], "Kerberos"),
            (vec![("sasl.mechanism", "SCRAM-SHA-1")], "SCRAM-SHA-512"),
            (
                vec![(
                    "sasl.jaas.config",
                    "PlainLoginModule required username=\"a\";",
                )],
                "password",
            ),
            (
                vec![(
                    "sasl.jaas.config",
                    "software.amazon.msk.auth.iam.IAMLoginModule required;",
                )],
                "sasl_oauthbearer",
            ),
            (
                vec![("ssl.endpoint.identification.algorithm", "http")],
                "https",
            ),
            (vec![("ssl.enabled.protocols", "TLSv1.1")], "TLSv1.2"),
            (vec![("ssl.truststore.password", "changeit")], "PEM"),
            (
                vec![("sasl.oauthbearer.config", "lifeSeconds=10")],
                "principal",
            ),
        ] {
            let e = props(&list)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(says), "{list:?}: `{e}`");
        }
        for (c, says) in [
            (
                ConsumerConfig::new("h:1").security_protocol(SecurityProtocol::SaslPlaintext),
                "sasl.mechanism",
            ),
            (
                props(&[
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", "PLAIN"),
                ])
                .unwrap(),
                "user name and password",
            ),
            (
                props(&[
                    ("security.protocol", "SASL_PLAINTEXT"),
                    ("sasl.mechanism", "OAUTHBEARER"),
                ])
                .unwrap(),
                "token provider",
            ),
        ] {
            let e = c.validate().expect_err(says);
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn tls_and_scram_need_their_cargo_features() {
        let tls = ConsumerConfig::new("h:1").security_protocol(SecurityProtocol::Ssl);
        let tls_built = cfg!(feature = "tls");
        match tls.validate() {
            Ok(()) => assert!(tls_built),
            Err(e) => {
                assert!(!tls_built);
                assert_eq!(e.kind(), ErrorKind::Unsupported);
                assert!(e.to_string().contains("tls-graviola"), "{e}");
            }
        }
        let scram = ConsumerConfig::new("h:1")
            .security_protocol(SecurityProtocol::SaslPlaintext)
            .sasl_credentials(SaslMechanism::ScramSha512, "u", "p");
        let scram_built = cfg!(feature = "scram");
        match scram.validate() {
            Ok(()) => assert!(scram_built),
            Err(e) => {
                assert!(!scram_built);
                assert!(e.to_string().contains("`scram` cargo feature"), "{e}");
            }
        }
    }
}
