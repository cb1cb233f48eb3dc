//! Secured clusters, against the test broker's secured listeners (`scripts/broker.sh`: SSL,
//! mutual TLS, SASL_PLAINTEXT, SASL_SSL, a SASL_SSL listener with a short
//! `connections.max.reauth.ms`, and an SSL listener whose certificate names another host;
//! PEM files under `target/kafka/certs/`). Records are written over PLAINTEXT by the Java
//! test producer and read by our consumer over the secured listener.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::*;
use kafka_consumer::{
    Consumer, ConsumerConfig, ErrorKind, OAuthBearerToken, OAuthBearerTokenProvider, OffsetReset,
    SaslMechanism, SecurityProtocol, UnsecuredJwsProvider,
};

/// Listener ports, as offsets from the PLAINTEXT port (see scripts/broker.sh).
const SSL: u16 = 10;
const MTLS: u16 = 11;
const SASL_PLAINTEXT: u16 = 12;
const SASL_SSL: u16 = 13;
const REAUTH: u16 = 14;
const SSL_WRONGNAME: u16 = 15;

fn listener(offset: u16) -> String {
    let b = bootstrap();
    let (host, port) = b.rsplit_once(':').expect("host:port");
    let port: u16 = port.parse().expect("port");
    format!("{host}:{}", port + offset)
}

fn cert(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/kafka/certs")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: scripts/broker.sh makes it",
        p.display()
    );
    p.display().to_string()
}

/// A consumer configuration for the listener at `offset`, from properties.
fn config(offset: u16, props: &[(&str, &str)]) -> ConsumerConfig {
    init_log();
    let mut c = ConsumerConfig::new(&listener(offset))
        .client_id("it-security")
        .auto_offset_reset(OffsetReset::Earliest)
        .default_api_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(10))
        .connection_setup_timeout(Duration::from_secs(5));
    for (k, v) in props {
        c = c.set(k, v).expect("valid test config");
    }
    c
}

fn ssl_props() -> Vec<(&'static str, String)> {
    vec![
        ("security.protocol", "SSL".into()),
        ("ssl.truststore.type", "PEM".into()),
        ("ssl.truststore.location", cert("ca.pem")),
    ]
}

fn with<'a>(props: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    props.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn jaas(module: &str, user: &str, password: &str) -> String {
    format!(
        "org.apache.kafka.common.security.{module} required username=\"{user}\" password=\"{password}\";"
    )
}

/// Writes `count` records to a new topic of `partitions` partitions.
fn topic_with(prefix: &str, partitions: i32, count: u64) -> String {
    let topic = unique_topic(prefix);
    Produce::new(&topic, partitions, count).run();
    topic
}

/// Reads every record of `topic` (`count` of them) with `consumer`; checks each sequence
/// number arrives exactly once, with its key and value.
fn read_all(consumer: &mut Consumer, topic: &str, partitions: i32, count: u64, limit: Duration) {
    consumer
        .assign(&all_partitions(topic, partitions))
        .expect("assign");
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + limit;
    while (seen.len() as u64) < count {
        assert!(
            Instant::now() < deadline,
            "read {} of {count} records of {topic}",
            seen.len()
        );
        let records = consumer.poll(Duration::from_millis(300)).expect("poll");
        for r in &records {
            let i = seq(&r);
            let e = expected(i, partitions, 0);
            assert_eq!(r.partition(), e.partition);
            assert_eq!(
                r.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                e.key
            );
            assert_eq!(
                r.value().map(|v| String::from_utf8_lossy(v).into_owned()),
                e.value
            );
            assert!(seen.insert(i), "record {i} delivered twice");
        }
    }
    assert_eq!(seen.len() as u64, count);
}

fn consume_all_over(config: ConsumerConfig, prefix: &str) {
    let topic = topic_with(prefix, 3, 300);
    let mut c = new_consumer(config);
    read_all(&mut c, &topic, 3, 300, Duration::from_secs(60));
    c.close().expect("close");
}

/// Polls until `poll` fails; returns the error and how long it took.
fn first_error(consumer: &mut Consumer, limit: Duration) -> (kafka_consumer::Error, Duration) {
    let start = Instant::now();
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            Err(e) => return (e, start.elapsed()),
            Ok(r) => assert!(
                r.is_empty() || start.elapsed() < limit,
                "records instead of an error"
            ),
        }
        assert!(
            start.elapsed() < limit,
            "no error from poll within {limit:?}"
        );
    }
}

/// A consumer whose connections must fail: assigns a partition (so it connects) and
/// returns the first error `poll` reports, checking it came within the request timeout.
fn fails_with(config: ConsumerConfig, kind: ErrorKind, says: &[&str]) -> kafka_consumer::Error {
    let (mut c, io) = IoThread::of(config);
    c.assign(&[kafka_consumer::TopicPartition::new("any-topic", 0)])
        .expect("assign");
    let (e, took) = first_error(&mut c, Duration::from_secs(10));
    assert_eq!(e.kind(), kind, "{e}");
    let text = e.to_string();
    for s in says {
        assert!(text.contains(s), "`{text}` does not say `{s}`");
    }
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // Reconnects back off: once the backoff reaches its maximum the I/O thread is idle.
    std::thread::sleep(Duration::from_secs(2));
    let busy = io.busy_fraction_over(Duration::from_secs(2));
    assert!(
        busy < 0.05,
        "the I/O thread is busy ({busy:.3}) after {text}"
    );
    c.close().expect("close");
    e
}

// ----- consuming over each secured listener ---------------------------------------------

#[test]
fn consumes_over_one_way_tls_with_a_pem_truststore() {
    consume_all_over(config(SSL, &with(&ssl_props())), "sec-ssl");
}

#[test]
fn consumes_over_tls_with_the_librdkafka_names_and_inline_pem() {
    let ca = std::fs::read_to_string(cert("ca.pem")).expect("ca.pem");
    let c = config(
        SSL,
        &[("security.protocol", "ssl"), ("ssl.ca.pem", ca.as_str())],
    );
    consume_all_over(c, "sec-ssl-rd");
}

#[test]
fn consumes_over_mutual_tls_with_a_java_pem_keystore() {
    let mut props = ssl_props();
    props.push(("ssl.keystore.type", "PEM".into()));
    props.push(("ssl.keystore.location", cert("client-bundle.pem")));
    consume_all_over(config(MTLS, &with(&props)), "sec-mtls");
}

#[test]
fn consumes_over_mutual_tls_with_librdkafka_certificate_and_key_files() {
    let c = config(
        MTLS,
        &[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", &cert("ca.pem")),
            ("ssl.certificate.location", &cert("client.pem")),
            ("ssl.key.location", &cert("client.key")),
        ],
    );
    consume_all_over(c, "sec-mtls-rd");
}

#[test]
fn consumes_over_sasl_plaintext_with_plain_and_both_scram_mechanisms() {
    for (mechanism, module) in [
        ("PLAIN", "plain.PlainLoginModule"),
        ("SCRAM-SHA-256", "scram.ScramLoginModule"),
        ("SCRAM-SHA-512", "scram.ScramLoginModule"),
    ] {
        let c = config(
            SASL_PLAINTEXT,
            &[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", mechanism),
                ("sasl.jaas.config", &jaas(module, "alice", "alice-secret")),
            ],
        );
        consume_all_over(c, &format!("sec-{}", mechanism.to_lowercase()));
    }
}

#[test]
fn consumes_over_sasl_ssl_with_scram_sha_512_set_by_builder_methods() {
    let c = config(SASL_SSL, &[])
        .security_protocol(SecurityProtocol::SaslSsl)
        .ssl_ca_file(cert("ca.pem"))
        .sasl_credentials(SaslMechanism::ScramSha512, "alice", "alice-secret");
    consume_all_over(c, "sec-sasl-ssl-scram");
}

/// Unsecured JWS tokens that live `lifetime`, counting how often they are asked for.
struct CountingProvider {
    inner: UnsecuredJwsProvider,
    calls: Arc<AtomicUsize>,
}

impl OAuthBearerTokenProvider for CountingProvider {
    fn token(&self) -> Result<OAuthBearerToken, Box<dyn std::error::Error + Send + Sync>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.token()
    }
}

#[test]
fn consumes_over_sasl_ssl_with_oauthbearer_and_refreshes_the_token() {
    let calls = Arc::new(AtomicUsize::new(0));
    let provider = CountingProvider {
        inner: UnsecuredJwsProvider::new("alice").lifetime(Duration::from_secs(4)),
        calls: Arc::clone(&calls),
    };
    let topic = topic_with("sec-oauth", 2, 200);
    let c = config(SASL_SSL, &[])
        .security_protocol(SecurityProtocol::SaslSsl)
        .ssl_ca_file(cert("ca.pem"))
        .sasl_oauthbearer(provider);
    let mut c = new_consumer(c);
    read_all(&mut c, &topic, 2, 200, Duration::from_secs(60));
    // Past two token lifetimes: the provider was asked again ahead of each expiry, and new
    // records still arrive on the re-authenticated connections.
    let until = Instant::now() + Duration::from_secs(9);
    while Instant::now() < until {
        c.poll(Duration::from_millis(300)).expect("poll");
    }
    let more = unique_topic("sec-oauth-late");
    Produce::new(&more, 1, 50).run();
    read_all(&mut c, &more, 1, 50, Duration::from_secs(30));
    let n = calls.load(Ordering::SeqCst);
    assert!(
        n >= 3,
        "the token provider was called {n} times in ~12 s of 4 s tokens"
    );
    c.close().expect("close");
}

#[test]
fn consumes_over_sasl_ssl_with_the_java_unsecured_oauthbearer_properties() {
    let mut props = ssl_props();
    props[0].1 = "SASL_SSL".into();
    props.push(("sasl.mechanism", "OAUTHBEARER".into()));
    props.push((
        "sasl.jaas.config",
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"alice\";".into(),
    ));
    consume_all_over(config(SASL_SSL, &with(&props)), "sec-oauth-java");
}

#[test]
fn a_read_across_several_reauthentications_delivers_every_record_once() {
    // The listener limits sessions to 6 s (connections.max.reauth.ms): reading for 20 s
    // re-authenticates every connection about three times, while a fetch is usually in
    // flight; nothing may be lost, repeated, or wait for a new connection.
    let topic = unique_topic("sec-reauth");
    let partitions = 2;
    Produce::new(&topic, partitions, 100).run();
    let c = config(
        REAUTH,
        &[
            ("security.protocol", "SASL_SSL"),
            ("ssl.truststore.location", &cert("ca.pem")),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            (
                "sasl.jaas.config",
                &jaas("scram.ScramLoginModule", "alice", "alice-secret"),
            ),
            ("fetch.max.wait.ms", "100"),
        ],
    );
    let (mut c, io) = IoThread::of(c);
    c.assign(&all_partitions(&topic, partitions))
        .expect("assign");
    let mut seen = BTreeSet::new();
    let start = Instant::now();
    let mut produced = 100;
    let mut connections = None;
    while start.elapsed() < Duration::from_secs(20) {
        if connections.is_none() && seen.len() >= 100 {
            connections = Some(client_ports(REAUTH));
        }
        for r in &c.poll(Duration::from_millis(200)).expect("poll") {
            assert!(seen.insert(seq(&r)), "record {} twice", seq(&r));
        }
        if start.elapsed() > Duration::from_secs(produced / 20) && produced < 400 {
            let mut p = Produce::new(&topic, partitions, 100);
            p.start = produced;
            p.run();
            produced += 100;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while (seen.len() as u64) < produced {
        assert!(
            Instant::now() < deadline,
            "{} of {produced} records",
            seen.len()
        );
        for r in &c.poll(Duration::from_millis(200)).expect("poll") {
            assert!(seen.insert(seq(&r)), "record {} twice", seq(&r));
        }
    }
    assert_eq!(seen.len() as u64, produced);
    // The same connections throughout: re-authenticated, never replaced.
    let first = connections.expect("connections seen");
    assert!(!first.is_empty(), "no connection to the listener seen");
    assert_eq!(client_ports(REAUTH), first, "connections were replaced");
    let busy = io.busy_fraction_over(Duration::from_secs(2));
    assert!(busy < 0.05, "the I/O thread is busy ({busy:.3})");
    c.close().expect("close");
}

/// The local ports of the established TCP connections to the listener at `offset`
/// (Linux `/proc/net/tcp`): only this test connects to it.
fn client_ports(offset: u16) -> BTreeSet<u16> {
    let remote = listener(offset);
    let port: u16 = remote
        .rsplit_once(':')
        .expect("port")
        .1
        .parse()
        .expect("port");
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = u16::from_str_radix(f.get(1)?.rsplit_once(':')?.1, 16).ok()?;
            let rem = u16::from_str_radix(f.get(2)?.rsplit_once(':')?.1, 16).ok()?;
            (rem == port && *f.get(3)? == "01").then_some(local)
        })
        .collect()
}

// ----- failures: clear, bounded, no busy loop ---------------------------------------------

#[test]
fn a_wrong_password_is_one_authentication_error_naming_the_broker_and_mechanism() {
    let c = config(
        SASL_PLAINTEXT,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            (
                "sasl.jaas.config",
                &jaas("scram.ScramLoginModule", "alice", "not-the-password"),
            ),
        ],
    );
    let e = fails_with(
        c,
        ErrorKind::Authentication,
        &["SCRAM-SHA-512", &listener(SASL_PLAINTEXT)],
    );
    assert!(!e.to_string().contains("not-the-password"));
}

#[test]
fn a_blocking_call_fails_with_the_authentication_error_not_at_its_timeout() {
    let c = config(
        SASL_PLAINTEXT,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            (
                "sasl.jaas.config",
                &jaas("plain.PlainLoginModule", "alice", "wrong"),
            ),
            ("default.api.timeout.ms", "60000"),
        ],
    );
    let mut c = new_consumer(c);
    let start = Instant::now();
    let e = c.partitions_for("any-topic").expect_err("refused login");
    assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    c.close().expect("close");
}

#[test]
fn an_unknown_user_with_plain_is_an_authentication_error() {
    let c = config(
        SASL_PLAINTEXT,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "mallory"),
            ("sasl.password", "whatever"),
        ],
    );
    fails_with(
        c,
        ErrorKind::Authentication,
        &["PLAIN", &listener(SASL_PLAINTEXT)],
    );
}

#[test]
fn a_broker_certificate_from_an_unknown_ca_is_a_tls_error_that_says_so() {
    let c = config(
        SSL,
        &[
            ("security.protocol", "SSL"),
            ("ssl.truststore.location", &cert("other-ca.pem")),
        ],
    );
    fails_with(c, ErrorKind::Tls, &["trusted CA", &listener(SSL)]);
}

#[test]
fn a_certificate_for_another_host_is_a_tls_error_unless_hostname_checks_are_off() {
    let props = ssl_props();
    fails_with(
        config(SSL_WRONGNAME, &with(&props)),
        ErrorKind::Tls,
        &["does not name", "ssl.endpoint.identification.algorithm"],
    );
    let mut off = props.clone();
    off.push(("ssl.endpoint.identification.algorithm", String::new()));
    consume_all_over(config(SSL_WRONGNAME, &with(&off)), "sec-noname");
}

#[test]
fn mutual_tls_without_a_client_certificate_is_a_tls_error() {
    fails_with(
        config(MTLS, &with(&ssl_props())),
        ErrorKind::Tls,
        &["certificate", &listener(MTLS)],
    );
}

#[test]
fn an_expired_client_certificate_is_refused_with_a_tls_error() {
    let c = config(
        MTLS,
        &[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", &cert("ca.pem")),
            ("ssl.certificate.location", &cert("expired-client.pem")),
            ("ssl.key.location", &cert("expired-client.key")),
        ],
    );
    fails_with(c, ErrorKind::Tls, &["refused our client certificate"]);
}

#[test]
fn a_plaintext_client_on_a_tls_listener_gets_a_clear_error_not_a_huge_frame() {
    fails_with(
        config(SSL, &[]),
        ErrorKind::Tls,
        &["answered with TLS", "security.protocol"],
    );
}

#[test]
fn a_tls_client_on_a_plaintext_listener_gets_a_clear_error() {
    let mut c = config(0, &with(&ssl_props()));
    c = c.connection_setup_timeout(Duration::from_secs(3));
    fails_with(c, ErrorKind::Tls, &["TLS", "listener"]);
}

#[test]
fn a_mechanism_the_listener_does_not_enable_lists_what_it_offers() {
    let c = config(SASL_PLAINTEXT, &[])
        .security_protocol(SecurityProtocol::SaslPlaintext)
        .sasl_oauthbearer(UnsecuredJwsProvider::new("alice"));
    fails_with(
        c,
        ErrorKind::Authentication,
        &["OAUTHBEARER", "PLAIN", "SCRAM-SHA-512"],
    );
}

#[test]
fn a_token_provider_that_fails_is_reported_from_poll() {
    struct Broken;
    impl OAuthBearerTokenProvider for Broken {
        fn token(&self) -> Result<OAuthBearerToken, Box<dyn std::error::Error + Send + Sync>> {
            Err("the identity provider is down".into())
        }
    }
    let c = config(SASL_SSL, &[])
        .security_protocol(SecurityProtocol::SaslSsl)
        .ssl_ca_file(cert("ca.pem"))
        .sasl_oauthbearer(Broken);
    fails_with(
        c,
        ErrorKind::Authentication,
        &["token provider", "the identity provider is down"],
    );
}

#[test]
fn an_expired_token_is_refused_by_the_broker() {
    struct Expired;
    impl OAuthBearerTokenProvider for Expired {
        fn token(&self) -> Result<OAuthBearerToken, Box<dyn std::error::Error + Send + Sync>> {
            // {"alg":"none"} . {"sub":"alice","iat":1000,"exp":1060} . (no signature):
            // a token that expired in 1970, which the client believes is fresh.
            Ok(OAuthBearerToken {
                value: "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImlhdCI6MTAwMCwiZXhwIjoxMDYwfQ."
                    .into(),
                expires_at: SystemTime::now() + Duration::from_secs(3600),
                principal: "alice".into(),
                extensions: Vec::new(),
            })
        }
    }
    let c = config(SASL_SSL, &[])
        .security_protocol(SecurityProtocol::SaslSsl)
        .ssl_ca_file(cert("ca.pem"))
        .sasl_oauthbearer(Expired);
    fails_with(c, ErrorKind::Authentication, &["OAUTHBEARER"]);
}

// ----- settings --------------------------------------------------------------------------

#[test]
fn unsupported_key_stores_and_encrypted_keys_are_refused_when_the_consumer_is_built() {
    let mut props = ssl_props();
    props.push(("ssl.keystore.type", "PKCS12".into()));
    props.push(("ssl.keystore.location", cert("client.p12")));
    let Err(e) = Consumer::new(config(MTLS, &with(&props))) else {
        panic!("a PKCS12 key store was accepted")
    };
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("PEM"), "{e}");

    let c = config(
        MTLS,
        &[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", &cert("ca.pem")),
            ("ssl.certificate.location", &cert("client.pem")),
            ("ssl.key.location", &cert("client-encrypted.key")),
        ],
    );
    let Err(e) = Consumer::new(c) else {
        panic!("an encrypted key was accepted")
    };
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("openssl pkcs8"), "{e}");
}

// ----- groups ----------------------------------------------------------------------------

/// The same properties work for the Java client and ours.
fn sasl_ssl_props() -> Vec<(String, String)> {
    vec![
        ("security.protocol".into(), "SASL_SSL".into()),
        ("sasl.mechanism".into(), "SCRAM-SHA-512".into()),
        (
            "sasl.jaas.config".into(),
            jaas("scram.ScramLoginModule", "alice", "alice-secret"),
        ),
        ("ssl.truststore.type".into(), "PEM".into()),
        ("ssl.truststore.location".into(), cert("ca.pem")),
    ]
}

#[test]
fn a_group_of_ours_and_a_java_consumer_shares_partitions_over_sasl_ssl_with_both_protocols() {
    use common::java_member::*;
    for protocol in ["classic", "consumer"] {
        const N: i32 = 6;
        const COUNT: u64 = 120;
        let topic = unique_topic(&format!("sec-group-{protocol}"));
        let group = unique_topic(&format!("g-sec-{protocol}"));
        Produce::new(&topic, N, COUNT).run();
        let mut opts = JavaMemberOptions::new(&group, &[&topic]);
        opts.bootstrap = Some(listener(SASL_SSL));
        opts.protocol = protocol.into();
        opts.props = sasl_ssl_props();
        let mut java = JavaMember::start(&opts);
        java.wait_records(1, Duration::from_secs(60));
        let mut ours = JavaMember::start_ours(&opts);
        let both = [&java, &ours];
        wait_split(
            &both,
            &topic,
            N,
            true,
            "Java and ours share the topic",
            Duration::from_secs(60),
        );
        wait_consumed(&both, &topic, N, COUNT, Duration::from_secs(60));
        assert_all_consumed(&both, &topic, N, COUNT, true);
        ours.close();
        java.close();
    }
}

// ----- authorization ---------------------------------------------------------------------

/// bob: a SCRAM user without ACLs but those a test grants.
fn bob(extra: &[(&str, &str)]) -> Consumer {
    let jaas = jaas("scram.ScramLoginModule", "bob", "bob-secret");
    let mut props = vec![
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "SCRAM-SHA-256"),
        ("sasl.jaas.config", jaas.as_str()),
    ];
    props.extend_from_slice(extra);
    new_consumer(config(SASL_PLAINTEXT, &props))
}

fn grant(resource: &str, name: &str, operation: &str) {
    let out = admin(
        "acl-add",
        &[
            ("--principal", "User:bob"),
            ("--resource", resource),
            ("--name", name),
            ("--operation", operation),
        ],
    );
    assert!(out.contains("acl added"), "{out}");
}

#[test]
fn without_read_on_a_topic_poll_names_it_and_the_readable_topic_keeps_flowing() {
    let readable = topic_with("sec-acl-ok", 1, 50);
    let denied = topic_with("sec-acl-denied", 1, 50);
    grant("topic", &readable, "READ");
    grant("topic", &denied, "DESCRIBE");
    let mut c = bob(&[]);
    c.assign(&[
        kafka_consumer::TopicPartition::new(readable.as_str(), 0),
        kafka_consumer::TopicPartition::new(denied.as_str(), 0),
    ])
    .expect("assign");
    let mut got = 0;
    let mut refused = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < 50 || refused.is_none() {
        assert!(
            Instant::now() < deadline,
            "{got} records, error: {refused:?}"
        );
        match c.poll(Duration::from_millis(200)) {
            Ok(records) => {
                for r in &records {
                    assert_eq!(r.topic(), readable);
                    got += 1;
                }
            }
            Err(e) => refused = Some(e),
        }
    }
    let e = refused.expect("an error");
    assert_eq!(e.kafka_code(), Some(29), "TOPIC_AUTHORIZATION_FAILED: {e}");
    assert!(e.to_string().contains(&denied), "{e}");
    c.close().expect("close");
}

#[test]
fn without_describe_on_a_topic_its_metadata_is_refused_by_name() {
    let hidden = topic_with("sec-acl-hidden", 1, 1);
    let mut c = bob(&[]);
    let e = c.partitions_for(&hidden).expect_err("no DESCRIBE");
    assert_eq!(e.kafka_code(), Some(29), "{e}");
    assert!(e.to_string().contains(&hidden), "{e}");
    c.close().expect("close");
}

#[test]
fn without_read_on_the_group_subscribing_fails_naming_the_group() {
    let topic = topic_with("sec-acl-group", 1, 10);
    grant("topic", &topic, "READ");
    let group = unique_topic("g-sec-acl");
    let mut c = bob(&[("group.id", group.as_str())]);
    c.subscribe(&[topic.as_str()]).expect("subscribe");
    let (e, _) = first_error(&mut c, Duration::from_secs(30));
    assert_eq!(e.kafka_code(), Some(30), "GROUP_AUTHORIZATION_FAILED: {e}");
    assert!(e.to_string().contains(&group), "{e}");
    c.close().expect("close");
}
