//! The authenticator driven through whole exchanges, against answers encoded as a broker
//! sends them.

use super::*;
use crate::protocol::api::sasl_handshake::SaslHandshakeResponse;
use crate::protocol::frame::{decode_request, encode_request_frame, encode_response};
use crate::protocol::message::Bytes;
use crate::types::ApiVersion;

const PASSWORD: &str = "pencil-Sesame-42";
const TOKEN: &str = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.";

/// A broker that speaks SaslHandshake v0-v1 and SaslAuthenticate v0-`max`.
fn versions(max: i16) -> Versions {
    Versions::new([(18, 0, 4), (17, 0, 1), (36, 0, max)])
}

fn password() -> Credentials {
    Credentials::Password {
        username: "alice".into(),
        password: Secret::from(PASSWORD),
    }
}

fn token_with(extensions: &[(&str, &str)], value: &str) -> Credentials {
    Credentials::Token(OAuthBearerToken {
        value: Secret::from(value),
        expires_at: std::time::UNIX_EPOCH,
        principal: "alice".into(),
        extensions: extensions
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    })
}

fn token() -> Credentials {
    token_with(&[], TOKEN)
}

fn credentials_for(mechanism: SaslMechanism) -> Credentials {
    match mechanism {
        SaslMechanism::OAuthBearer => token(),
        _ => password(),
    }
}

const NONCE: [u8; 24] = [7; 24];

/// The request `req` as the broker decodes it.
fn sent<A: Api>(req: &SaslRequest) -> (i16, A) {
    assert_eq!(req.api_key, A::KEY);
    assert_eq!(req.flexible, req.version >= ApiVersion(A::FLEXIBLE_FROM));
    let frame = encode_request_frame(
        req.api_key,
        req.version.get(),
        req.flexible,
        9,
        "c",
        &req.body,
    );
    let (v, _, a) = decode_request::<A>(&frame[4..]).unwrap();
    (v, a)
}

/// The auth bytes of a SaslAuthenticate request, and its version.
fn auth_bytes_of(step: Step) -> (i16, Vec<u8>) {
    match step {
        Step::Send(req) => {
            let (v, a) = sent::<SaslAuthenticateRequest>(&req);
            (v, a.auth_bytes.0)
        }
        Step::Done { .. } => panic!("expected a request, got Done"),
    }
}

fn handshake_answer(error_code: i16, mechanisms: &[&str]) -> Vec<u8> {
    let resp = SaslHandshakeResponse {
        error_code,
        mechanisms: mechanisms.iter().map(|m| (*m).to_owned()).collect(),
    };
    encode_response::<SaslHandshakeRequest>(&resp, 1, 9)[4..].to_vec()
}

fn authenticate_answer(
    v: i16,
    error_code: i16,
    error_message: Option<&str>,
    auth_bytes: &[u8],
    session_lifetime_ms: i64,
) -> Vec<u8> {
    let resp = SaslAuthenticateResponse {
        error_code,
        error_message: error_message.map(Into::into),
        auth_bytes: Bytes(auth_bytes.to_vec()),
        session_lifetime_ms,
    };
    encode_response::<SaslAuthenticateRequest>(&resp, v, 9)[4..].to_vec()
}

fn ok_answer(v: i16, auth_bytes: &[u8]) -> Vec<u8> {
    authenticate_answer(v, 0, None, auth_bytes, 0)
}

/// An authenticator past the handshake: the first SaslAuthenticate request's auth bytes.
fn past_handshake(
    mechanism: SaslMechanism,
    credentials: Credentials,
    max: i16,
) -> (Authenticator, Vec<u8>) {
    let mut a = Authenticator::new(mechanism, credentials, NONCE);
    let req = a.start(&versions(max)).unwrap();
    let (v, hs) = sent::<SaslHandshakeRequest>(&req);
    assert_eq!((v, hs.mechanism.as_str()), (1, mechanism.name()));
    let step = a
        .handle_response(&handshake_answer(0, &[mechanism.name()]))
        .unwrap();
    let (_, bytes) = auth_bytes_of(step);
    (a, bytes)
}

fn done(step: Step) -> Option<Duration> {
    match step {
        Step::Done { session_lifetime } => session_lifetime,
        Step::Send(req) => panic!("expected Done, got {req:?}"),
    }
}

fn error_of<T: fmt::Debug>(r: Result<T, AuthError>) -> AuthError {
    r.expect_err("expected an error")
}

// ---- PLAIN and the exchange's frame ----------------------------------------------------

#[test]
fn plain_sends_the_handshake_then_one_authenticate_with_an_empty_authzid() {
    let (mut a, bytes) = past_handshake(SaslMechanism::Plain, password(), 2);
    assert_eq!(bytes, format!("\0alice\0{PASSWORD}").as_bytes());
    assert_eq!(done(a.handle_response(&ok_answer(2, b"")).unwrap()), None);
    assert_eq!(a.mechanism(), SaslMechanism::Plain);
    // Auth bytes on PLAIN's success answer mean nothing and are ignored.
    let (mut a, _) = past_handshake(SaslMechanism::Plain, password(), 2);
    assert_eq!(done(a.handle_response(&ok_answer(2, b"x")).unwrap()), None);
}

#[test]
fn the_handshake_is_v1_and_authenticate_the_highest_version_both_speak() {
    for (broker_max, want) in [(0, 0), (1, 1), (2, 2), (9, 2)] {
        let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
        let req = a.start(&versions(broker_max)).unwrap();
        assert_eq!(
            (req.api_key, req.version, req.flexible),
            (17, ApiVersion(1), false)
        );
        let step = a.handle_response(&handshake_answer(0, &["PLAIN"])).unwrap();
        let Step::Send(req) = step else {
            panic!("no request")
        };
        assert_eq!(
            (req.api_key, req.version, req.flexible),
            (36, ApiVersion(want), want >= 2)
        );
        sent::<SaslAuthenticateRequest>(&req);
        assert_eq!(
            done(a.handle_response(&ok_answer(want, b"")).unwrap()),
            None
        );
    }
}

#[test]
fn a_broker_without_handshake_v1_or_authenticate_is_unsupported() {
    for (ranges, want) in [
        (
            vec![(17, 0, 0), (36, 0, 1)],
            "SASL PLAIN: the broker speaks SaslHandshake v0-v0, this client needs v1-v1 (Kafka 1.0 or later)",
        ),
        (
            vec![(36, 0, 1)],
            "SASL PLAIN: the broker does not support the SaslHandshake API (Kafka 1.0 or later is needed)",
        ),
        (
            vec![(17, 0, 1)],
            "SASL PLAIN: the broker does not support the SaslAuthenticate API (Kafka 1.0 or later is needed)",
        ),
        (
            vec![(17, 0, 1), (36, 3, 4)],
            "SASL PLAIN: the broker speaks SaslAuthenticate v3-v4, this client needs v0-v2 (Kafka 1.0 or later)",
        ),
    ] {
        let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
        let e = error_of(a.start(&Versions::new(ranges)));
        assert_eq!(e.kind, AuthErrorKind::Unsupported);
        assert_eq!(e.message, want);
    }
}

#[test]
fn an_unsupported_mechanism_names_what_the_broker_offers() {
    let mut a = Authenticator::new(SaslMechanism::ScramSha512, password(), NONCE);
    let result = a.start(&versions(2));
    if cfg!(not(feature = "scram")) {
        assert_eq!(error_of(result).kind, AuthErrorKind::Unsupported);
        return;
    }
    result.unwrap();
    let e = error_of(a.handle_response(&handshake_answer(33, &["PLAIN", "OAUTHBEARER"])));
    assert_eq!(e.kind, AuthErrorKind::Unsupported);
    assert_eq!(
        e.message,
        "the broker does not enable SASL mechanism SCRAM-SHA-512; it offers PLAIN, OAUTHBEARER"
    );
    let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
    a.start(&versions(2)).unwrap();
    let e = error_of(a.handle_response(&handshake_answer(33, &[])));
    assert_eq!(
        e.message,
        "the broker does not enable SASL mechanism PLAIN; it offers none"
    );
}

#[test]
fn illegal_sasl_state_is_a_protocol_error_in_both_apis() {
    let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
    a.start(&versions(1)).unwrap();
    let e = error_of(a.handle_response(&handshake_answer(34, &[])));
    assert_eq!(e.kind, AuthErrorKind::Protocol);
    assert_eq!(
        e.message,
        "SASL PLAIN: the broker answered SaslHandshake with ILLEGAL_SASL_STATE (34)"
    );
    let (mut a, _) = past_handshake(SaslMechanism::Plain, password(), 1);
    let e = error_of(a.handle_response(&authenticate_answer(1, 34, Some("no"), b"", 0)));
    assert_eq!(e.kind, AuthErrorKind::Protocol);
    assert_eq!(
        e.message,
        "SASL PLAIN: the broker answered SaslAuthenticate with ILLEGAL_SASL_STATE (34): no"
    );
}

#[test]
fn other_error_codes_are_protocol_errors_that_name_the_code() {
    let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
    a.start(&versions(1)).unwrap();
    let e = error_of(a.handle_response(&handshake_answer(-1, &["PLAIN"])));
    assert_eq!(e.kind, AuthErrorKind::Protocol);
    assert!(e.message.ends_with("with UNKNOWN_SERVER_ERROR (-1)"), "{e}");
    let (mut a, _) = past_handshake(SaslMechanism::Plain, password(), 2);
    let e = error_of(a.handle_response(&authenticate_answer(2, 999, None, b"", 0)));
    assert_eq!(e.kind, AuthErrorKind::Protocol);
    assert!(
        e.message.ends_with("SaslAuthenticate with error code 999"),
        "{e}"
    );
}

#[test]
fn authentication_failed_carries_the_brokers_message() {
    let kafka = "Authentication failed during authentication due to invalid credentials with \
                 SASL mechanism PLAIN";
    for v in 0..=2 {
        let (mut a, _) = past_handshake(SaslMechanism::Plain, password(), v);
        let e = error_of(a.handle_response(&authenticate_answer(v, 58, Some(kafka), b"", 0)));
        assert_eq!(e.kind, AuthErrorKind::Failed);
        assert_eq!(
            e.message,
            format!("SASL PLAIN authentication failed: {kafka}")
        );
    }
    let (mut a, _) = past_handshake(SaslMechanism::Plain, password(), 2);
    let e = error_of(a.handle_response(&authenticate_answer(2, 58, None, b"", 0)));
    assert_eq!(
        e.message,
        "SASL PLAIN authentication failed: the broker gave no reason"
    );
}

#[test]
fn the_session_lifetime_is_reported_only_when_positive() {
    for (v, ms, want) in [
        (1, 3_600_000, Some(Duration::from_secs(3600))),
        (2, 1, Some(Duration::from_millis(1))),
        (2, 0, None),
        (2, -5, None),
        (0, 3_600_000, None), // v0 carries no lifetime
    ] {
        let (mut a, _) = past_handshake(SaslMechanism::Plain, password(), v);
        let step = a
            .handle_response(&authenticate_answer(v, 0, None, b"", ms))
            .unwrap();
        assert_eq!(done(step), want, "v{v} {ms}");
    }
}

#[test]
fn undecodable_answers_are_protocol_errors() {
    let good = handshake_answer(0, &["PLAIN"]);
    let mut trailing = good.clone();
    trailing.push(0);
    for bad in [
        &good[..0],
        &good[..3],
        &good[..good.len() - 1],
        &trailing[..],
    ] {
        let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
        a.start(&versions(2)).unwrap();
        let e = error_of(a.handle_response(bad));
        assert_eq!(e.kind, AuthErrorKind::Protocol);
        assert!(
            e.message
                .starts_with("SASL PLAIN: undecodable SaslHandshake answer: "),
            "{e}"
        );
    }
    // A v1 answer where v2 (flexible) was negotiated, and the other way round.
    for (sent_v, answer_v) in [(2, 1), (1, 2), (0, 1)] {
        let (mut a, _) = past_handshake(SaslMechanism::Plain, password(), sent_v);
        let e = error_of(a.handle_response(&authenticate_answer(answer_v, 0, Some("m"), b"ab", 5)));
        assert_eq!(
            e.kind,
            AuthErrorKind::Protocol,
            "v{sent_v} answered v{answer_v}"
        );
        assert!(
            e.message.contains("undecodable SaslAuthenticate answer"),
            "{e}"
        );
    }
}

#[test]
fn after_an_error_every_call_returns_the_same_error() {
    let (mut a, _) = past_handshake(SaslMechanism::Plain, password(), 2);
    let e = error_of(a.handle_response(&authenticate_answer(2, 58, Some("bad"), b"", 0)));
    assert_eq!(error_of(a.handle_response(&ok_answer(2, b""))), e);
    assert_eq!(error_of(a.start(&versions(2))), e);
    assert_eq!(error_of(a.handle_response(b"")), e);
    // The same for an error from start.
    let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
    let e = error_of(a.start(&Versions::default()));
    assert_eq!(error_of(a.handle_response(&handshake_answer(0, &[]))), e);
}

#[test]
fn calls_outside_the_exchange_are_protocol_errors() {
    let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
    let e = error_of(a.handle_response(&handshake_answer(0, &[])));
    assert_eq!(e.kind, AuthErrorKind::Protocol);
    assert_eq!(
        e.message,
        "SASL PLAIN: an answer came before the exchange started"
    );
    let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
    a.start(&versions(2)).unwrap();
    let e = error_of(a.start(&versions(2)));
    assert!(e.message.contains("already started"), "{e}");
    // An extra round after Done.
    let (mut a, _) = past_handshake(SaslMechanism::Plain, password(), 2);
    done(a.handle_response(&ok_answer(2, b"")).unwrap());
    let e = error_of(a.handle_response(&ok_answer(2, b"")));
    assert_eq!(e.kind, AuthErrorKind::Protocol);
    assert_eq!(
        e.message,
        "SASL PLAIN: an answer came after authentication completed"
    );
}

#[test]
fn reauthentication_runs_the_same_exchange_from_the_handshake() {
    // A second authenticator on the same (live) connection: its own handshake and rounds,
    // the same bytes as the first login, whatever the first one went through.
    let login = |max| {
        let mut a = Authenticator::new(SaslMechanism::Plain, password(), NONCE);
        let hs = a.start(&versions(max)).unwrap().body;
        let (_, bytes) = auth_bytes_of(a.handle_response(&handshake_answer(0, &[])).unwrap());
        let lifetime = done(
            a.handle_response(&authenticate_answer(max, 0, None, b"", 60_000))
                .unwrap(),
        );
        (hs, bytes, lifetime)
    };
    let first = login(2);
    assert_eq!(login(2), first);
    assert_eq!(first.2, Some(Duration::from_secs(60)));
}

#[test]
fn credentials_the_mechanism_cannot_carry_are_refused_before_anything_is_sent() {
    let with_nul = Credentials::Password {
        username: "alice".into(),
        password: Secret::from("s3cr3t\0x"),
    };
    let cases = [
        (SaslMechanism::Plain, with_nul, "contains a NUL character"),
        (
            SaslMechanism::Plain,
            token(),
            "needs a user name and password",
        ),
        (SaslMechanism::OAuthBearer, password(), "needs a token"),
        (
            SaslMechanism::OAuthBearer,
            token_with(&[], "not a token"),
            "bearer token",
        ),
        (
            SaslMechanism::OAuthBearer,
            token_with(&[("auth", "x")], TOKEN),
            "reserved",
        ),
        (
            SaslMechanism::OAuthBearer,
            token_with(&[("k1", "x")], TOKEN),
            "letters only",
        ),
        (
            SaslMechanism::OAuthBearer,
            token_with(&[("k", "\x01")], TOKEN),
            "is invalid",
        ),
        (
            SaslMechanism::ScramSha256,
            token(),
            if cfg!(feature = "scram") {
                "needs a user name and password"
            } else {
                "needs the `scram` cargo feature"
            },
        ),
    ];
    for (mechanism, credentials, want) in cases {
        let mut a = Authenticator::new(mechanism, credentials, NONCE);
        let e = error_of(a.start(&versions(2)));
        assert_eq!(e.kind, AuthErrorKind::Unsupported, "{e}");
        assert!(e.message.starts_with(&format!("SASL {mechanism}: ")), "{e}");
        assert!(e.message.contains(want), "{e}");
        assert!(
            !e.message.contains("s3cr3t") && !e.message.contains("not a token"),
            "{e}"
        );
    }
}

#[test]
fn broker_texts_are_escaped_and_cut() {
    assert_eq!(
        broker_text("plain text, \"quoted\""),
        "plain text, \"quoted\""
    );
    assert_eq!(broker_text("a\nb\x1b[31m\u{7f}"), "a\\nb\\u{1b}[31m\\u{7f}");
    let long = "\u{e9}".repeat(1000);
    let cut = broker_text(&long);
    assert_eq!(cut.chars().count(), MAX_BROKER_TEXT + 3);
    assert!(cut.ends_with("..."));
    assert_eq!(
        broker_text(&long[..2 * MAX_BROKER_TEXT]),
        long[..2 * MAX_BROKER_TEXT]
    );
}

// ---- OAUTHBEARER -------------------------------------------------------------------------

#[test]
fn oauthbearer_sends_the_token_and_is_done_on_an_empty_answer() {
    let creds = token_with(&[("traceId", "abc")], TOKEN);
    let (mut a, bytes) = past_handshake(SaslMechanism::OAuthBearer, creds, 1);
    assert_eq!(
        bytes,
        format!("n,,\x01auth=Bearer {TOKEN}\x01traceId=abc\x01\x01").as_bytes()
    );
    let step = a
        .handle_response(&authenticate_answer(1, 0, None, b"", 900_000))
        .unwrap();
    assert_eq!(done(step), Some(Duration::from_secs(900)));
}

#[test]
fn an_oauthbearer_json_error_is_acknowledged_then_reported_with_its_status() {
    let (mut a, _) = past_handshake(SaslMechanism::OAuthBearer, token(), 2);
    let json = br#"{"status":"invalid_token","openid-configuration":"https://x"}"#;
    let (_, ack) = auth_bytes_of(a.handle_response(&ok_answer(2, json)).unwrap());
    assert_eq!(ack, b"\x01");
    let kafka = "Authentication failed: {\"status\":\"invalid_token\"}";
    let e = error_of(a.handle_response(&authenticate_answer(2, 58, Some(kafka), b"", 0)));
    assert_eq!(e.kind, AuthErrorKind::Failed);
    assert_eq!(
        e.message,
        format!(
            "SASL OAUTHBEARER authentication failed: the broker refused the token (status \
             invalid_token): {kafka}"
        )
    );
}

#[test]
fn an_oauthbearer_refusal_stays_a_failure_whatever_the_broker_answers_next() {
    for last in [
        authenticate_answer(2, 0, None, b"", 0),
        authenticate_answer(2, 34, Some("odd"), b"", 0),
    ] {
        let (mut a, _) = past_handshake(SaslMechanism::OAuthBearer, token(), 2);
        let (_, ack) = auth_bytes_of(a.handle_response(&ok_answer(2, b"not json")).unwrap());
        assert_eq!(ack, b"\x01");
        let e = error_of(a.handle_response(&last));
        assert_eq!(e.kind, AuthErrorKind::Failed);
        assert!(
            e.message.starts_with(
                "SASL OAUTHBEARER authentication failed: the broker refused the token (the \
                 broker's error names no status)"
            ),
            "{e}"
        );
    }
    // An undecodable last answer is a protocol error.
    let (mut a, _) = past_handshake(SaslMechanism::OAuthBearer, token(), 2);
    a.handle_response(&ok_answer(2, b"{}")).unwrap();
    assert_eq!(
        error_of(a.handle_response(b"\0\0")).kind,
        AuthErrorKind::Protocol
    );
}

#[test]
fn an_oauthbearer_token_refused_at_once_reports_the_brokers_message() {
    let (mut a, _) = past_handshake(SaslMechanism::OAuthBearer, token(), 2);
    let e = error_of(a.handle_response(&authenticate_answer(2, 58, Some("expired"), b"", 0)));
    assert_eq!(e.kind, AuthErrorKind::Failed);
    assert_eq!(e.message, "SASL OAUTHBEARER authentication failed: expired");
}

// ---- SCRAM -------------------------------------------------------------------------------

#[cfg(not(feature = "scram"))]
#[test]
fn scram_without_the_scram_feature_is_unsupported() {
    for m in [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512] {
        let mut a = Authenticator::new(m, password(), NONCE);
        let e = error_of(a.start(&versions(2)));
        assert_eq!(e.kind, AuthErrorKind::Unsupported);
        assert_eq!(
            e.message,
            format!("SASL {m}: SCRAM needs the `scram` cargo feature of kafka-consumer")
        );
    }
}

#[cfg(feature = "scram")]
mod scram_exchange {
    use super::*;
    use crate::sasl::scram::testing::FakeServer;
    use crate::sasl::scram::ScramHash;

    fn server(hash: ScramHash, password: &'static str) -> FakeServer {
        FakeServer {
            hash,
            password,
            salt: b"NaCl-from-the-broker".to_vec(),
            iterations: 4096,
            server_nonce: "srv%nonce",
        }
    }

    /// Runs the SCRAM exchange to the server-final message; the authenticator and the
    /// server-final message the fake server computed.
    fn to_server_final(
        mechanism: SaslMechanism,
        server: &FakeServer,
        v: i16,
    ) -> (Authenticator, Vec<u8>) {
        let (mut a, client_first) = past_handshake(mechanism, password(), v);
        let nonce = scram::nonce_from(&NONCE);
        assert_eq!(client_first, format!("n,,n=alice,r={nonce}").as_bytes());
        let server_first = server.server_first(&client_first);
        let (got_v, client_final) =
            auth_bytes_of(a.handle_response(&ok_answer(v, &server_first)).unwrap());
        assert_eq!(got_v, v);
        let server_final = server.server_final(&client_first, &server_first, &client_final);
        (a, server_final)
    }

    #[test]
    fn scram_logs_in_through_the_handshake_and_two_rounds() {
        for (mechanism, hash) in [
            (SaslMechanism::ScramSha256, ScramHash::Sha256),
            (SaslMechanism::ScramSha512, ScramHash::Sha512),
        ] {
            for v in 0..=2 {
                let (mut a, server_final) = to_server_final(mechanism, &server(hash, PASSWORD), v);
                let step = a
                    .handle_response(&authenticate_answer(v, 0, None, &server_final, 30_000))
                    .unwrap();
                let want = (v >= 1).then(|| Duration::from_secs(30));
                assert_eq!(done(step), want, "{mechanism} v{v}");
            }
        }
    }

    #[test]
    fn a_tampered_server_signature_fails_the_login_despite_error_code_0() {
        let (mut a, server_final) = to_server_final(
            SaslMechanism::ScramSha256,
            &server(ScramHash::Sha256, PASSWORD),
            2,
        );
        let mut tampered = server_final.clone();
        tampered[2] = if tampered[2] == b'A' { b'B' } else { b'A' }; // the first signature char
        let e = error_of(a.handle_response(&ok_answer(2, &tampered)));
        assert_eq!(e.kind, AuthErrorKind::Failed);
        assert!(e.message.contains("signature does not verify"), "{e}");
        assert!(e.message.starts_with("SASL SCRAM-SHA-256: "), "{e}");
        // The untampered one would have verified.
        let (mut a, server_final) = to_server_final(
            SaslMechanism::ScramSha256,
            &server(ScramHash::Sha256, PASSWORD),
            2,
        );
        done(a.handle_response(&ok_answer(2, &server_final)).unwrap());
    }

    #[test]
    fn scram_refusals_by_the_broker_are_failures_with_its_text() {
        // Unknown user: refused at the client-first message.
        let (mut a, _) = past_handshake(SaslMechanism::ScramSha512, password(), 2);
        let kafka = "Authentication failed during authentication due to invalid credentials \
                     with SASL mechanism SCRAM-SHA-512";
        let e = error_of(a.handle_response(&authenticate_answer(2, 58, Some(kafka), b"", 0)));
        assert_eq!(e.kind, AuthErrorKind::Failed);
        assert_eq!(
            e.message,
            format!("SASL SCRAM-SHA-512 authentication failed: {kafka}")
        );
        // A server-final error.
        let (mut a, _) = to_server_final(
            SaslMechanism::ScramSha512,
            &server(ScramHash::Sha512, PASSWORD),
            1,
        );
        let e = error_of(a.handle_response(&ok_answer(1, b"e=invalid-proof")));
        assert_eq!(e.kind, AuthErrorKind::Failed);
        assert!(e.message.contains("e=invalid-proof"), "{e}");
    }

    #[test]
    fn scram_protocol_errors_from_the_core_reach_the_caller() {
        for server_first in [
            "r=someone-elses-nonce,s=c2FsdA==,i=4096".to_owned(),
            format!("r={}x,s=c2FsdA==,i=100", scram::nonce_from(&NONCE)),
            format!("r={}x,s=c2FsdA=,i=4096", scram::nonce_from(&NONCE)),
            format!("r={}x,i=4096", scram::nonce_from(&NONCE)),
        ] {
            let (mut a, _) = past_handshake(SaslMechanism::ScramSha256, password(), 2);
            let e = error_of(a.handle_response(&ok_answer(2, server_first.as_bytes())));
            assert_eq!(e.kind, AuthErrorKind::Protocol, "{server_first}: {e}");
            assert!(e.message.starts_with("SASL SCRAM-SHA-256: "), "{e}");
        }
    }
}

// ---- secrets -----------------------------------------------------------------------------

#[test]
fn no_secret_appears_in_debug_output() {
    let shown = |s: String| {
        assert!(!s.contains(PASSWORD) && !s.contains("pencil"), "{s}");
        assert!(!s.contains(TOKEN) && !s.contains("eyJ"), "{s}");
    };
    for m in [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::OAuthBearer,
    ] {
        let creds = credentials_for(m);
        shown(format!("{creds:?}"));
        let mut a = Authenticator::new(m, creds, NONCE);
        shown(format!("{a:?}"));
        let Ok(req) = a.start(&versions(2)) else {
            continue; // SCRAM without the feature
        };
        shown(format!("{req:?} {a:?}"));
        let step = a.handle_response(&handshake_answer(0, &[])).unwrap();
        shown(format!("{step:?} {a:?}"));
        let Step::Send(req) = step else { panic!() };
        assert!(format!("{req:?}").contains(&format!("body: {} bytes", req.body.len())));
    }
}
