//! Secrets never reach the logs: consumers log in with every mechanism (and with a wrong
//! password, and with a client key given inline) while the library logs at `trace`, and
//! no password, token or key text appears in what it logged, in its errors, or in the
//! `Debug` of the configuration.

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use kafka_consumer::{
    ConsumerConfig, OAuthBearerTokenProvider, OffsetReset, SecurityProtocol, UnsecuredJwsProvider,
};

static CAPTURED: Mutex<String> = Mutex::new(String::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        let line = format!("{} {}: {}\n", r.level(), r.target(), r.args());
        CAPTURED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_str(&line);
    }
    fn flush(&self) {}
}

static LOGGER: Capture = Capture;

/// Unsecured tokens, remembering each one it hands out.
struct Recording {
    inner: UnsecuredJwsProvider,
    tokens: std::sync::Arc<Mutex<Vec<String>>>,
}

impl OAuthBearerTokenProvider for Recording {
    fn token(
        &self,
    ) -> Result<kafka_consumer::OAuthBearerToken, Box<dyn std::error::Error + Send + Sync>> {
        let t = self.inner.token()?;
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t.value.expose().to_owned());
        Ok(t)
    }
}

fn port(offset: u16) -> String {
    let (host, port) = bootstrap().rsplit_once(':').expect("host:port");
    format!("{host}:{}", port.parse::<u16>().expect("port") + offset)
}

fn cert(name: &str) -> String {
    format!("{}/target/kafka/certs/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Reads `topic` for a while (or until an error) with `config`; returns errors' texts.
fn exercise(config: ConsumerConfig, topic: &str) -> String {
    let mut out = format!("{config:?}\n");
    let mut c = new_consumer(config);
    c.assign(&all_partitions(topic, 1)).expect("assign");
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        match c.poll(Duration::from_millis(200)) {
            Ok(_) => {}
            Err(e) => {
                out.push_str(&format!("{e} {e:?}\n"));
                break;
            }
        }
    }
    c.close().expect("close");
    out
}

#[test]
fn no_secret_reaches_the_trace_log_an_error_or_debug() {
    log::set_logger(&LOGGER).expect("the only logger");
    log::set_max_level(log::LevelFilter::Trace);
    let topic = unique_topic("sec-logs");
    Produce::new(&topic, 1, 20).run();

    let base = |offset: u16| {
        ConsumerConfig::new(&port(offset))
            .auto_offset_reset(OffsetReset::Earliest)
            .request_timeout(Duration::from_secs(5))
    };
    let jaas = |module: &str, user: &str, pw: &str| {
        format!("org.apache.kafka.common.security.{module} required username=\"{user}\" password=\"{pw}\";")
    };
    let mut reported = String::new();
    for (mechanism, module, password) in [
        ("PLAIN", "plain.PlainLoginModule", "alice-secret"),
        ("SCRAM-SHA-256", "scram.ScramLoginModule", "alice-secret"),
        ("SCRAM-SHA-512", "scram.ScramLoginModule", "alice-secret"),
        ("SCRAM-SHA-512", "scram.ScramLoginModule", "wrong-Pa55word"),
        ("PLAIN", "plain.PlainLoginModule", "wrong-Pa55word"),
    ] {
        let mut c = base(13);
        for (k, v) in [
            ("security.protocol", "SASL_SSL".to_owned()),
            ("ssl.truststore.location", cert("ca.pem")),
            ("sasl.mechanism", mechanism.to_owned()),
            ("sasl.jaas.config", jaas(module, "alice", password)),
        ] {
            c = c.set(k, &v).expect("valid");
        }
        reported.push_str(&exercise(c, &topic));
    }
    let handed_out = std::sync::Arc::new(Mutex::new(Vec::new()));
    let c = base(13)
        .security_protocol(SecurityProtocol::SaslSsl)
        .ssl_ca_file(cert("ca.pem"))
        .sasl_oauthbearer(Recording {
            inner: UnsecuredJwsProvider::new("alice"),
            tokens: std::sync::Arc::clone(&handed_out),
        });
    reported.push_str(&exercise(c, &topic));
    let key = std::fs::read_to_string(cert("client.key")).expect("client.key");
    let chain = std::fs::read_to_string(cert("client.pem")).expect("client.pem");
    let c = base(11)
        .security_protocol(SecurityProtocol::Ssl)
        .ssl_ca_file(cert("ca.pem"))
        .ssl_client_certificate_pem(&chain, key.as_str());
    reported.push_str(&exercise(c, &topic));

    let logged = CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(logged.contains("TRACE"), "the library logged at trace");
    assert!(logged.contains("authenticat"), "the logins were logged");
    let key_body: String = key
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .join("");
    // An unsecured token's signature part is empty; its claims part is what it carries.
    let tokens = handed_out.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(!tokens.is_empty(), "the provider was asked for a token");
    let mut secrets = vec![
        ("a password", "alice-secret".to_owned()),
        ("a wrong password", "wrong-Pa55word".to_owned()),
        ("the client key", key_body[..40].to_owned()),
    ];
    for t in &tokens {
        secrets.push(("a token", t.split('.').nth(1).expect("claims").to_owned()));
    }
    for (what, secret) in &secrets {
        assert!(!logged.contains(secret.as_str()), "{what} in the log");
        assert!(
            !reported.contains(secret.as_str()),
            "{what} in an error or Debug:\n{reported}"
        );
    }
}
