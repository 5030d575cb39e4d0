//! OAuth 2 access tokens as passwords, refreshed with
//! connection.update-secret: against a Warren taking HS256 tokens (the
//! key in a JWKS file written by the test), a connection whose short
//! token was refreshed outlives it while one not refreshed is closed, and
//! a recovery after the old token expired logs in with the new one.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use support::{within, Target};
use warren_client::amqp091::{Connection, Event, QueueOptions, RecoveryOptions};

const KEY: &[u8] = b"the shared HS256 secret of warren-client's tests";

fn token(ttl: i64) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let claims = serde_json::json!({
        "sub": "robot",
        "aud": ["rabbitmq"],
        "iat": now,
        "exp": now + ttl,
        "scope": "rabbitmq.read:*/* rabbitmq.write:*/* rabbitmq.configure:*/*",
    });
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("hmac".into());
    encode(&header, &claims, &EncodingKey::from_secret(KEY)).unwrap()
}

#[tokio::test]
async fn a_refreshed_token_keeps_the_connection_and_serves_its_recovery() {
    let dir = std::env::temp_dir().join(format!("warren-client-oauth2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(KEY);
    let jwks = serde_json::json!({"keys": [{"kty": "oct", "kid": "hmac", "alg": "HS256", "k": k}]});
    std::fs::write(dir.join("jwks.json"), jwks.to_string()).unwrap();
    let mut config = warren_server::Config::loopback(dir.join("data"));
    config.auth_backends = vec!["oauth2".into(), "internal".into()];
    config.auth_oauth2 = Some(warren_node::oauth2::OAuth2Settings {
        resource_server_id: "rabbitmq".into(),
        jwks_file: Some(dir.join("jwks.json")),
        ..Default::default()
    });
    let warren = warren_server::start(config).await.expect("Warren starts");
    let port = warren.amqp_addr.unwrap().port();
    let target = Target {
        uri: String::new(),
        api: format!("http://{}", warren.http_addr.unwrap()),
    };

    // Both start with a token good for 3 s; one refreshes it.
    let short = token(3);
    let open = |name: &'static str| {
        Connection::builder(&format!("amqp://anyone:{short}@127.0.0.1:{port}/%2f"))
            .name(name)
            .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(300)))
            .open()
    };
    let refreshed = within(open("refreshed")).await.unwrap();
    let stale = within(open("stale")).await.unwrap();
    let mut stale_events = stale.events();
    within(refreshed.update_secret(&token(60), "refreshed"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;

    // The stale one was closed at its token's expiry (and cannot come
    // back with the expired token); the refreshed one works.
    let lost = within(stale_events.next()).await;
    assert!(matches!(lost, Some(Event::Disconnected { .. })), "{lost:?}");
    let ch = within(refreshed.channel()).await.unwrap();
    within(ch.queue_declare("oauth2-q", QueueOptions::default()))
        .await
        .unwrap();

    // Cut off now, it recovers with the new token (the old one expired).
    let mut events = refreshed.events();
    support::close_through_the_api(&target, "refreshed").await;
    loop {
        match within(events.next()).await {
            Some(Event::Recovered) => break,
            Some(_) => {}
            None => panic!("events ended"),
        }
    }
    within(ch.queue_declare("oauth2-q", QueueOptions::default()))
        .await
        .unwrap();
    within(refreshed.close()).await.unwrap();
    drop(stale);
    let _ = std::fs::remove_dir_all(&dir);
}
