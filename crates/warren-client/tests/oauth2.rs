//! OAuth 2 access tokens as passwords, refreshed with
//! connection.update-secret: against a Warren taking HS256 tokens (the
//! key in a JWKS file written by the test), a connection whose short
//! token was refreshed outlives it while one not refreshed is closed, and
//! a recovery after the old token expired logs in with the new one.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use support::{within, Target};

use warren_client::amqp091::{Connection, Error, Event, QueueOptions, RecoveryOptions, Token};

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

/// A Warren taking HS256 tokens signed with [`KEY`] (and the internal
/// users), its data under a directory of the test's own.
async fn oauth2_warren(test: &str) -> (warren_server::Running, std::path::PathBuf, u16, Target) {
    let dir = std::env::temp_dir().join(format!("warren-client-oauth2-{test}-{}", std::process::id()));
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
    (warren, dir, port, target)
}

#[tokio::test]
async fn a_refreshed_token_keeps_the_connection_and_serves_its_recovery() {
    let (_warren, dir, port, target) = oauth2_warren("update").await;

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

#[tokio::test]
async fn a_token_source_keeps_the_connection_alive_past_each_tokens_expiry() {
    let (_warren, dir, port, target) = oauth2_warren("source").await;
    let fetched = Arc::new(AtomicUsize::new(0));
    let counter = fetched.clone();
    // Tokens said to be good for 2 s (their `exp`, in whole seconds, is
    // 2 to 3 s away, as a source allowing for clock skew would say):
    // without the refreshes the broker closes the connection at the
    // first one's expiry.
    let conn = within(
        Connection::builder(&format!("amqp://ignored:ignored@127.0.0.1:{port}/%2f"))
            .name("sourced")
            .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(300)))
            .token_source(move || {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok(Token::new(token(3), Duration::from_secs(2)))
                }
            })
            .open(),
    )
    .await
    .unwrap();
    let mut events = conn.events();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ch = within(conn.channel()).await.unwrap();
    within(ch.queue_declare("sourced-q", QueueOptions::default()))
        .await
        .unwrap();
    assert!(
        fetched.load(Ordering::SeqCst) >= 3,
        "a token at login and one before each expiry: {}",
        fetched.load(Ordering::SeqCst)
    );
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(10), events.next()).await {
        assert!(!matches!(e, Event::Disconnected { .. }), "never cut off: {e:?}");
    }
    // Cut off by the operator, it logs in again with the latest token.
    support::close_through_the_api(&target, "sourced").await;
    loop {
        match within(events.next()).await {
            Some(Event::Recovered) => break,
            Some(_) => {}
            None => panic!("events ended"),
        }
    }
    within(ch.queue_declare("sourced-q", QueueOptions::default()))
        .await
        .unwrap();
    within(conn.close()).await.unwrap();

    // A source that fails gives no connection, and says why.
    let failed = Connection::builder(&format!("amqp://x:y@127.0.0.1:{port}/%2f"))
        .token_source(|| async { Err("the identity provider is down".to_string()) })
        .open()
        .await;
    assert!(
        matches!(&failed, Err(Error::TokenSource(why)) if why.contains("down")),
        "{failed:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same over AMQP 1.0: a token source's next tokens go to the broker
/// with `PUT /auth/tokens`, so the connection outlives each one, while a
/// connection that logged in with the same short token and no source is
/// closed at its expiry.
#[tokio::test]
async fn amqp10_a_token_source_keeps_the_connection_alive_past_each_tokens_expiry() {
    use warren_client::amqp;
    let (_warren, dir, port, _target) = oauth2_warren("amqp10-source").await;
    let fetched = Arc::new(AtomicUsize::new(0));
    let counter = fetched.clone();
    let conn = within(
        amqp::Connection::builder(&format!("amqp://ignored:ignored@127.0.0.1:{port}/%2f"))
            .recovery(RecoveryOptions::default().max_delay(Duration::from_millis(300)))
            .token_source(move || {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok(amqp::Token::new(token(3), Duration::from_secs(2)))
                }
            })
            .open(),
    )
    .await
    .unwrap();
    let stale = within(
        amqp::Connection::builder(&format!("amqp://anyone:{}@127.0.0.1:{port}/%2f", token(3)))
            .recovery(RecoveryOptions::disabled())
            .open(),
    )
    .await
    .unwrap();
    let mut events = conn.events();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !stale.is_open(),
        "without a refresh the broker closes it at expiry"
    );
    let m = within(conn.management()).await.unwrap();
    within(m.declare_queue(&amqp::QueueSpec::classic("sourced-10")))
        .await
        .unwrap();
    assert!(
        fetched.load(Ordering::SeqCst) >= 3,
        "a token at login and one before each expiry: {}",
        fetched.load(Ordering::SeqCst)
    );
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(10), events.next()).await {
        assert!(
            !matches!(
                e,
                amqp::Event::Disconnected { .. } | amqp::Event::TokenRefreshFailed { .. }
            ),
            "never cut off, every refresh taken: {e:?}"
        );
    }
    conn.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
