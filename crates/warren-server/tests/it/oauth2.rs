//! OAuth 2 access tokens, as rabbitmq_auth_backend_oauth2 takes them:
//! JWTs signed at run time (RS256 and ES256 with rcgen keys in PEM files,
//! HS256 with a key in a JWKS file) given as the password to lapin,
//! fe2o3-amqp and rabbitmq-stream-client and as a Bearer token to the
//! HTTP API (reqwest). Valid, expired, wrong-audience and wrong-key tokens;
//! read-only scopes refuse publishing with 403; a token refreshed with
//! connection.update-secret (0-9-1) or PUT /auth/tokens (AMQP 1.0) keeps
//! its connection past the old token's expiry, one not refreshed is closed.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use fe2o3_amqp::types::primitives::{Binary, Value as AmqpValue};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use rcgen::KeyPair;
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};

use warren_stream::command::Command as StreamCommand;

use crate::amqp10_management::Node;
use crate::common::*;

const HMAC_SECRET: &[u8] = b"a shared secret for HS256 tokens, 32+ bytes";

/// The issuer's keys: an RSA and an EC key pair (the public halves in PEM
/// files the broker reads), an HMAC key (in a JWKS file), and an RSA key
/// the broker does not know.
struct Issuer {
    dir: PathBuf,
    rsa: KeyPair,
    ec: KeyPair,
    stranger: KeyPair,
}

impl Issuer {
    fn new() -> Issuer {
        let dir = temp_dir("oauth2-keys");
        std::fs::create_dir_all(&dir).unwrap();
        let rsa = KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
        let ec = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let stranger = KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap();
        std::fs::write(dir.join("rsa.pem"), rsa.public_key_pem()).unwrap();
        std::fs::write(dir.join("ec.pem"), ec.public_key_pem()).unwrap();
        let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(HMAC_SECRET);
        let jwks = json!({"keys": [{"kty": "oct", "kid": "hmac", "alg": "HS256", "k": k}]});
        std::fs::write(dir.join("jwks.json"), jwks.to_string()).unwrap();
        Issuer {
            dir,
            rsa,
            ec,
            stranger,
        }
    }

    /// A broker that takes tokens first, then internal users.
    async fn broker(&self) -> Broker {
        let dir = self.dir.clone();
        Broker::start_with(move |c| {
            c.auth_backends = vec!["oauth2".into(), "internal".into()];
            c.auth_oauth2 = Some(warren_node::oauth2::OAuth2Settings {
                resource_server_id: "rabbitmq".into(),
                signing_keys: [
                    ("rsa".to_string(), dir.join("rsa.pem")),
                    ("ec".to_string(), dir.join("ec.pem")),
                ]
                .into(),
                jwks_file: Some(dir.join("jwks.json")),
                ..Default::default()
            });
        })
        .await
    }

    /// A token for `sub` with `scopes`, valid for `ttl` seconds (negative:
    /// expired), for audience `aud`, signed with `alg` and key id `kid`.
    fn token(&self, alg: Algorithm, kid: &str, aud: &str, ttl: i64, scopes: &[&str]) -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        let claims = json!({
            "sub": "robot",
            "aud": [aud],
            "iat": now,
            "exp": now + ttl,
            "scope": scopes.join(" "),
        });
        let key = match alg {
            Algorithm::RS256 if kid == "rsa" => {
                EncodingKey::from_rsa_pem(self.rsa.serialize_pem().as_bytes())
            }
            Algorithm::RS256 => EncodingKey::from_rsa_pem(self.stranger.serialize_pem().as_bytes()),
            Algorithm::ES256 => EncodingKey::from_ec_pem(self.ec.serialize_pem().as_bytes()),
            _ => Ok(EncodingKey::from_secret(HMAC_SECRET)),
        }
        .unwrap();
        let mut header = Header::new(alg);
        header.kid = Some(kid.into());
        encode(&header, &claims, &key).unwrap()
    }

    fn rs256(&self, ttl: i64, scopes: &[&str]) -> String {
        self.token(Algorithm::RS256, "rsa", "rabbitmq", ttl, scopes)
    }

    /// A short token: fe2o3-amqp sends SASL frames of at most 512 bytes
    /// (AMQP 1.0 §5.3.1's floor), which an RS256 token overflows.
    fn hs256(&self, ttl: i64, scopes: &[&str]) -> String {
        self.token(Algorithm::HS256, "hmac", "rabbitmq", ttl, scopes)
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const ALL: &[&str] = &[
    "rabbitmq.read:*/*",
    "rabbitmq.write:*/*",
    "rabbitmq.configure:*/*",
];

async fn lapin_with(b: &Broker, token: &str) -> Result<Connection, lapin::Error> {
    // Any user name: the token names the user.
    let uri = format!("amqp://anyone:{token}@127.0.0.1:{}/%2f", b.port);
    within(Connection::connect(&uri, ConnectionProperties::default())).await
}

fn refused(r: Result<Connection, lapin::Error>) {
    let e = r.expect_err("the token must be refused");
    assert_eq!(amqp_error(&e).0, 403, "{e:?}");
}

#[tokio::test]
async fn tokens_log_in_on_every_protocol_and_bad_ones_are_refused() {
    let iss = Issuer::new();
    let b = iss.broker().await;
    // RS256, ES256 (keys from PEM files) and HS256 (from the JWKS file).
    for token in [
        iss.rs256(60, ALL),
        iss.token(Algorithm::ES256, "ec", "rabbitmq", 60, ALL),
        iss.token(Algorithm::HS256, "hmac", "rabbitmq", 60, ALL),
    ] {
        let c = lapin_with(&b, &token).await.expect("a valid token logs in");
        let ch = within(c.create_channel()).await.unwrap();
        declare(&ch, "tok.q", Default::default()).await;
        within(c.close(200, "bye".into())).await.unwrap();
    }
    // The connection is the token's user's.
    let c = lapin_with(&b, &iss.rs256(60, ALL)).await.unwrap();
    let (_, conns) = b.http(Method::GET, "/api/connections", None).await;
    assert_eq!(conns[0]["user"], "robot");
    within(c.close(200, "bye".into())).await.unwrap();

    refused(lapin_with(&b, &iss.rs256(-10, ALL)).await);
    refused(lapin_with(&b, &iss.token(Algorithm::RS256, "rsa", "someone-else", 60, ALL)).await);
    refused(lapin_with(&b, &iss.token(Algorithm::RS256, "stranger", "rabbitmq", 60, ALL)).await);
    // Signed with a key the broker does not have, under a known key id.
    let forged = {
        let t = iss.token(Algorithm::RS256, "stranger", "rabbitmq", 60, ALL);
        let mut h = Header::new(Algorithm::RS256);
        h.kid = Some("rsa".into());
        let claims: Value = jsonwebtoken::dangerous::insecure_decode(&t).unwrap().claims;
        encode(
            &h,
            &claims,
            &EncodingKey::from_rsa_pem(iss.stranger.serialize_pem().as_bytes()).unwrap(),
        )
        .unwrap()
    };
    refused(lapin_with(&b, &forged).await);
    refused(lapin_with(&b, "not.a.token").await);
    // A token for another vhost's scopes may not open "/".
    let other = iss.rs256(60, &["rabbitmq.read:other/*"]);
    let e = lapin_with(&b, &other).await.expect_err("no scope names /");
    assert_eq!(amqp_error(&e).0, 530);
    // Internal users still log in.
    b.lapin().await;

    // AMQP 1.0: the token as the SASL PLAIN password.
    let token = iss.hs256(60, ALL);
    let url = format!("amqp://anyone:{token}@127.0.0.1:{}", b.port);
    let mut conn = within(fe2o3_amqp::Connection::open("tok", url.as_str()))
        .await
        .expect("AMQP 1.0 logs in with a token");
    within(conn.close()).await.unwrap();
    let bad = iss.hs256(-10, ALL);
    let url = format!("amqp://anyone:{bad}@127.0.0.1:{}", b.port);
    assert!(within(fe2o3_amqp::Connection::open("tok", url.as_str()))
        .await
        .is_err());

    // Streams: the token as the password.
    let env = within(
        rabbitmq_stream_client::Environment::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .username("anyone")
            .password(&token)
            .build(),
    )
    .await
    .expect("a stream connection logs in with a token");
    within(env.stream_creator().create("tok.s")).await.unwrap();
    let r = within(
        rabbitmq_stream_client::Environment::builder()
            .host("127.0.0.1")
            .port(b.stream_port())
            .username("anyone")
            .password(&bad)
            .build(),
    )
    .await;
    assert!(r.is_err(), "an expired token is refused on streams");
}

#[tokio::test]
async fn read_only_scopes_refuse_publishing_with_403() {
    let iss = Issuer::new();
    let b = iss.broker().await;
    let token = iss.rs256(60, &["rabbitmq.read:*/*", "rabbitmq.configure:*/ro.*"]);
    let c = lapin_with(&b, &token).await.unwrap();
    let ch = within(c.create_channel()).await.unwrap();
    declare(&ch, "ro.q", Default::default()).await;
    within(ch.confirm_select(Default::default())).await.unwrap();
    let r = within(async {
        ch.basic_publish(
            "".into(),
            "ro.q".into(),
            BasicPublishOptions::default(),
            b"m",
            BasicProperties::default(),
        )
        .await?
        .await
    })
    .await;
    let e = r.expect_err("publishing needs write");
    assert_eq!(
        amqp_error(&e),
        (
            403,
            "ACCESS_REFUSED - write access to exchange 'amq.default' in vhost '/' refused for user 'robot'"
                .into()
        )
    );
    // configure:*/ro.* does not reach other names.
    let ch = within(c.create_channel()).await.unwrap();
    let e = within(ch.queue_declare("rw.q".into(), Default::default(), Default::default()))
        .await
        .expect_err("configure is limited to ro.*");
    assert_eq!(amqp_error(&e).0, 403);
}

/// A stream protocol connection by hand: rabbitmq-stream-client has no
/// call that authenticates again after Open.
struct RawStream {
    s: tokio::net::TcpStream,
    buf: bytes::BytesMut,
    next_id: u32,
}

impl RawStream {
    /// PeerProperties, SaslHandshake, SaslAuthenticate (PLAIN, the token as
    /// the password), Tune, Open "/": each answered OK.
    async fn open(b: &Broker, token: &str) -> RawStream {
        let s = tokio::net::TcpStream::connect(("127.0.0.1", b.stream_port()))
            .await
            .unwrap();
        let mut r = RawStream {
            s,
            buf: bytes::BytesMut::new(),
            next_id: 1,
        };
        let ok = warren_stream::command::code::OK;
        let properties = vec![];
        assert_eq!(
            r.call(|id| StreamCommand::PeerProperties {
                correlation_id: id,
                properties
            })
            .await,
            ok
        );
        assert_eq!(
            r.call(|id| StreamCommand::SaslHandshake { correlation_id: id })
                .await,
            ok
        );
        assert_eq!(r.authenticate(token).await, ok);
        r.send(StreamCommand::Tune {
            frame_max: 1 << 20,
            heartbeat: 0,
        })
        .await;
        let vhost = "/".to_string();
        assert_eq!(
            r.call(|id| StreamCommand::Open {
                correlation_id: id,
                vhost
            })
            .await,
            ok
        );
        r
    }

    async fn send(&mut self, c: StreamCommand) {
        use tokio::io::AsyncWriteExt;
        let mut out = bytes::BytesMut::new();
        c.encode(&mut out);
        self.s.write_all(&out).await.unwrap();
    }

    /// The next frame; None once the socket is closed.
    async fn frame(&mut self) -> Option<StreamCommand> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(f) = warren_stream::command::parse_frame(&mut self.buf, 1 << 20).unwrap() {
                return Some(StreamCommand::decode(f).unwrap());
            }
            if within(self.s.read_buf(&mut self.buf)).await.ok()? == 0 {
                return None;
            }
        }
    }

    /// Send the command `f` makes with a fresh correlation id; its
    /// response code.
    async fn call(&mut self, f: impl FnOnce(u32) -> StreamCommand) -> u16 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(f(id)).await;
        loop {
            match self.frame().await.expect("a response") {
                StreamCommand::Response(r) if r.correlation_id == id => return r.code,
                StreamCommand::Tune { .. } | StreamCommand::Heartbeat => {}
                c => panic!("expected a response, got {c:?}"),
            }
        }
    }

    async fn authenticate(&mut self, token: &str) -> u16 {
        let data = bytes::Bytes::from(format!("\0robot\0{token}"));
        self.call(|id| StreamCommand::SaslAuthenticate {
            correlation_id: id,
            mechanism: "PLAIN".into(),
            data,
        })
        .await
    }

    /// Did the broker close the connection (a Close, then the socket)?
    async fn closed(&mut self) -> bool {
        loop {
            match self.frame().await {
                None | Some(StreamCommand::Close { .. }) => return true,
                Some(StreamCommand::Heartbeat) => {}
                Some(c) => panic!("unexpected {c:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_refreshed_token_keeps_its_connection_and_an_expired_one_closes_it() {
    use warren_stream::command::code;
    let iss = Issuer::new();
    let b = iss.broker().await;
    let kept = lapin_with(&b, &iss.rs256(2, ALL)).await.unwrap();
    let dropped = lapin_with(&b, &iss.rs256(2, ALL)).await.unwrap();
    let (_c, _s, mut node) = Node::open_as(&b, "anyone", &iss.hs256(2, ALL)).await;
    let mut stream_kept = RawStream::open(&b, &iss.rs256(2, ALL)).await;
    let mut stream_dropped = RawStream::open(&b, &iss.rs256(2, ALL)).await;
    // The stream protocol refreshes by SaslAuthenticate after Open: an
    // expired token is refused and changes nothing, a fresh one is taken.
    assert_eq!(
        stream_kept.authenticate(&iss.rs256(-5, ALL)).await,
        code::AUTHENTICATION_FAILURE
    );
    assert_eq!(stream_kept.authenticate(&iss.rs256(60, ALL)).await, code::OK);
    // A token for someone else, or a bad one, is refused and changes nothing.
    let e = within(kept.update_secret(iss.rs256(-5, ALL).into(), "refresh".into()))
        .await
        .expect_err("an expired token is no refresh");
    assert_eq!(amqp_error(&e).0, 530);
    let kept = lapin_with(&b, &iss.rs256(2, ALL)).await.unwrap();
    within(kept.update_secret(iss.rs256(60, ALL).into(), "refresh".into()))
        .await
        .expect("a fresh token is taken");
    let (status, _) = node
        .request(
            "PUT",
            "/auth/tokens",
            AmqpValue::Binary(Binary::from(iss.hs256(60, ALL).into_bytes())),
        )
        .await;
    assert_eq!(status, "204");
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    assert!(kept.status().connected(), "the refreshed connection stays");
    let ch = within(kept.create_channel()).await.expect("and works");
    declare(&ch, "still.here", Default::default()).await;
    assert!(!dropped.status().connected(), "the expired connection is closed");
    let (status, _) = node.request("GET", "/queues/still.here", AmqpValue::Null).await;
    assert_eq!(
        status, "200",
        "the 1.0 connection refreshed by PUT /auth/tokens stays"
    );
    let create = |id| StreamCommand::Create {
        correlation_id: id,
        stream: "still.streaming".into(),
        arguments: vec![],
    };
    assert_eq!(
        stream_kept.call(create).await,
        code::OK,
        "the stream connection refreshed by SaslAuthenticate stays"
    );
    assert!(
        stream_dropped.closed().await,
        "the expired stream connection is closed"
    );
    let (_, conns) = b.http(Method::GET, "/api/connections", None).await;
    assert_eq!(conns.as_array().unwrap().len(), 3, "{conns}");
}

#[tokio::test]
async fn the_http_api_takes_bearer_tokens() {
    let iss = Issuer::new();
    let b = iss.broker().await;
    let get = |token: String| {
        let url = b.http_url("/api/overview");
        async move {
            within(Client::new().get(url).bearer_auth(token).send())
                .await
                .unwrap()
                .status()
        }
    };
    let admin = iss.rs256(60, &["rabbitmq.tag:administrator", "rabbitmq.read:*/*"]);
    assert_eq!(get(admin).await, StatusCode::OK);
    // No management tag, an expired token, a foreign key: 401.
    assert_eq!(get(iss.rs256(60, ALL)).await, StatusCode::UNAUTHORIZED);
    let expired = iss.rs256(-10, &["rabbitmq.tag:administrator"]);
    assert_eq!(get(expired).await, StatusCode::UNAUTHORIZED);
    let foreign = iss.token(
        Algorithm::RS256,
        "stranger",
        "rabbitmq",
        60,
        &["rabbitmq.tag:administrator"],
    );
    assert_eq!(get(foreign).await, StatusCode::UNAUTHORIZED);
    // A management user sees only the vhosts its scopes name.
    let mgmt = iss.rs256(60, &["rabbitmq.tag:management", "rabbitmq.read:*/*"]);
    let r = within(
        Client::new()
            .get(b.http_url("/api/vhosts"))
            .bearer_auth(mgmt)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let vhosts: Value = r.json().await.unwrap();
    assert_eq!(vhosts[0]["name"], "/");
    // The token as a basic-auth password works too.
    let admin = iss.rs256(60, &["rabbitmq.tag:administrator"]);
    let (s, _) = b
        .http_as("anyone", &admin, Method::GET, "/api/overview", None)
        .await;
    assert_eq!(s, StatusCode::OK);
}
