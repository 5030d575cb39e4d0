//! TLS on every listener with real clients: amqprs (AMQP 0-9-1), fe2o3-amqp
//! (AMQP 1.0), rabbitmq-stream-client (streams) and reqwest (HTTPS); SASL
//! EXTERNAL with client certificates; refusals of bad certificates, of
//! plain clients on TLS ports and of handshakes that never finish; and the
//! certificate reload.

use std::time::Duration;

use amqprs::channel::{BasicGetArguments, BasicPublishArguments, QueueDeclareArguments};
use amqprs::connection::{Connection as AmqprsConnection, OpenConnectionArguments};
use amqprs::security::SecurityCredentials;
use amqprs::tls::TlsAdaptor;
use amqprs::BasicProperties;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_node::tls::{SslOptions, Verify};
use warren_server::Config;

use crate::common::*;
use crate::pki::{Pair, Pki};

/// A broker whose TLS listeners use the test PKI; `f` adjusts the rest.
async fn tls_broker(pki: &Pki, f: impl FnOnce(&mut Config)) -> Broker {
    let opts = SslOptions {
        certfile: Some(pki.server.cert.clone()),
        keyfile: Some(pki.server.key.clone()),
        cacertfile: Some(pki.ca_file.clone()),
        ..SslOptions::default()
    };
    Broker::start_with(move |c| {
        c.ssl_options = opts;
        f(c)
    })
    .await
}

/// TLS peers must present a certificate, and EXTERNAL logs in by its CN.
fn external_by_cn(c: &mut Config) {
    c.ssl_options.verify = Verify::VerifyPeer;
    c.ssl_options.fail_if_no_peer_cert = true;
    c.auth_mechanisms = vec!["PLAIN".into(), "AMQPLAIN".into(), "EXTERNAL".into()];
    c.ssl_cert_login_from = warren_node::tls::peer::LoginFrom::CommonName;
}

impl Broker {
    pub fn amqps_port(&self) -> u16 {
        self.running.as_ref().unwrap().listeners.amqps.unwrap().port()
    }

    pub fn https_port(&self) -> u16 {
        self.running.as_ref().unwrap().listeners.https.unwrap().port()
    }

    pub fn stream_tls_port(&self) -> u16 {
        self.running
            .as_ref()
            .unwrap()
            .listeners
            .stream_tls
            .unwrap()
            .port()
    }

    /// A user with full permissions on `/` and no password.
    fn add_user(&self, name: &str) {
        let ctx = &self.running.as_ref().unwrap().ctx;
        ctx.broker.put_user(warren_core::User {
            name: name.into(),
            password_hash: warren_core::User::hash_password("not-used-by-external"),
            tags: vec![],
            permissions: [("/".to_string(), warren_core::Permission::full())].into(),
            topic_permissions: Default::default(),
            limits: Default::default(),
            token: None,
        });
    }
}

fn https_client(pki: &Pki) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(pki.ca.cert.pem().as_bytes()).unwrap();
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .use_rustls_tls()
        .build()
        .unwrap()
}

/// `POST /api/tls/reload` (what `warrenctl reload_tls` calls): its status.
async fn reload(pki: &Pki, b: &Broker) -> reqwest::StatusCode {
    let url = format!("https://localhost:{}/api/tls/reload", b.https_port());
    https_client(pki)
        .post(url)
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap()
        .status()
}

async fn connections_over_https(b: &Broker, pki: &Pki) -> Vec<Value> {
    let url = format!("https://localhost:{}/api/connections", b.https_port());
    let r = within(
        https_client(pki)
            .get(url)
            .basic_auth("guest", Some("guest"))
            .send(),
    )
    .await
    .expect("HTTPS request");
    assert_eq!(r.status(), 200);
    r.json::<Vec<Value>>().await.unwrap()
}

async fn amqprs_open(
    pki: &Pki,
    port: u16,
    client: Option<&Pair>,
    creds: SecurityCredentials,
) -> Result<AmqprsConnection, amqprs::error::Error> {
    let connector = tokio_rustls::TlsConnector::from(pki.client_config(client));
    let mut args = OpenConnectionArguments::new("localhost", port, "guest", "guest");
    args.credentials(creds)
        .tls_adaptor(TlsAdaptor::new(connector, "localhost".into()));
    within(AmqprsConnection::open(&args)).await
}

/// guest, with PLAIN over the AMQPS port and no client certificate.
async fn guest_over_tls(pki: &Pki, b: &Broker) -> Result<AmqprsConnection, amqprs::error::Error> {
    amqprs_open(
        pki,
        b.amqps_port(),
        None,
        SecurityCredentials::new_plain("guest", "guest"),
    )
    .await
}

/// Publish one message to a fresh queue and get it back.
async fn round_trip(conn: &AmqprsConnection, q: &str) {
    let ch = within(conn.open_channel(None)).await.unwrap();
    within(ch.queue_declare(QueueDeclareArguments::new(q)))
        .await
        .unwrap();
    let body = b"over TLS".repeat(5000);
    within(ch.basic_publish(
        BasicProperties::default(),
        body.clone(),
        BasicPublishArguments::new("", q),
    ))
    .await
    .unwrap();
    let mut got = None;
    for _ in 0..50 {
        got = within(ch.basic_get(BasicGetArguments::new(q).no_ack(true).finish()))
            .await
            .unwrap();
        if got.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, _, content) = got.expect("the message comes back");
    assert_eq!(content, body);
    // amqprs closes a dropped channel in a task of its own, which can
    // cross a connection.close that follows: close it here.
    within(ch.close()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp091_over_tls_with_plain_login_and_the_session_in_the_api() {
    let pki = Pki::new();
    let b = tls_broker(&pki, |_| {}).await;
    let conn = guest_over_tls(&pki, &b).await.expect("amqprs connects over TLS");
    round_trip(&conn, "tls-q").await;
    let conns = connections_over_https(&b, &pki).await;
    let c = conns
        .iter()
        .find(|c| c["port"] == b.amqps_port())
        .expect("the TLS connection is listed");
    assert_eq!(c["ssl"], true);
    assert_eq!(c["ssl_protocol"], "tlsv1.3");
    assert_eq!(c["ssl_key_exchange"], "any");
    assert!(c["ssl_cipher"].as_str().unwrap().contains("gcm") || c["ssl_cipher"] == "chacha20_poly1305");
    assert_eq!(c["peer_cert_subject"], Value::Null);
    assert_eq!(c["auth_mechanism"], "PLAIN");
    // The plain listener serves plain clients beside it.
    let (_plain, ch) = b.channel().await;
    assert_eq!(depth(&ch, "tls-q").await, 0);
    within(conn.close()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_logs_in_by_certificate_cn() {
    let pki = Pki::new();
    let b = tls_broker(&pki, external_by_cn).await;
    b.add_user("alice");
    let alice = pki.client("alice");
    let conn = amqprs_open(
        &pki,
        b.amqps_port(),
        Some(&alice),
        SecurityCredentials::new_external(),
    )
    .await
    .expect("alice logs in with her certificate and no password");
    round_trip(&conn, "alice-q").await;
    let conns = connections_over_https(&b, &pki).await;
    let c = conns
        .iter()
        .find(|c| c["user"] == "alice")
        .expect("alice's connection");
    assert_eq!(c["auth_mechanism"], "EXTERNAL");
    assert_eq!(c["peer_cert_subject"], "O=Warren tests,CN=alice");
    assert_eq!(c["peer_cert_issuer"], "O=Warren tests,CN=Warren test CA");
    assert!(c["peer_cert_validity"].as_str().unwrap().contains(" - "));
    within(conn.close()).await.unwrap();

    // A CN that names no user is refused.
    let mallory = pki.client("mallory");
    let r = amqprs_open(
        &pki,
        b.amqps_port(),
        Some(&mallory),
        SecurityCredentials::new_external(),
    )
    .await;
    assert!(r.is_err(), "an unknown CN must be refused");
    // A client without a certificate is refused at the handshake.
    let r = guest_over_tls(&pki, &b).await;
    assert!(r.is_err(), "no certificate, no connection");
    // EXTERNAL is offered only where a certificate was presented: on the
    // plain port it is not (amqprs gives up before answering).
    let mut args = OpenConnectionArguments::new("127.0.0.1", b.port, "guest", "guest");
    args.credentials(SecurityCredentials::new_external());
    assert!(within(AmqprsConnection::open(&args)).await.is_err());
    // Failed logins are counted for Prometheus.
    let prom = b.running.as_ref().unwrap().prometheus_addr.unwrap().port();
    let text = reqwest::get(format!("http://127.0.0.1:{prom}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let failed: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("rabbitmq_auth_attempts_failed_total "))
        .expect("the failed-login counter")
        .trim()
        .parse()
        .unwrap();
    assert_eq!(failed, 1, "mallory's attempt");
}

/// A TLS client session straight from rustls, for the refusal tests.
async fn tls_handshake(
    pki: &Pki,
    port: u16,
    client: Option<&Pair>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(pki.client_config(client));
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut s = within(connector.connect(name, tcp)).await?;
    // TLS 1.3 servers refuse a client certificate after the client thinks
    // the handshake is done: the refusal shows on the first read.
    s.write_all(b"AMQP\x00\x00\x09\x01").await?;
    let mut head = [0u8; 8];
    within(s.read_exact(&mut head)).await?;
    Ok(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_client_certificates_are_refused_and_others_go_on() {
    let pki = Pki::new();
    let b = tls_broker(&pki, external_by_cn).await;
    let good = pki.client("alice");
    assert!(tls_handshake(&pki, b.amqps_port(), Some(&good)).await.is_ok());
    for (what, bad) in [
        ("expired", pki.expired_client("alice")),
        ("another CA's", pki.foreign_client("alice")),
        ("self-signed", pki.self_signed_client("alice")),
    ] {
        let r = tls_handshake(&pki, b.amqps_port(), Some(&bad)).await;
        assert!(r.is_err(), "an {what} certificate must be refused");
    }
    assert!(
        tls_handshake(&pki, b.amqps_port(), None).await.is_err(),
        "no certificate"
    );
    // Everyone else is still served.
    assert!(tls_handshake(&pki, b.amqps_port(), Some(&good)).await.is_ok());
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare("still-served".into(), Default::default(), Default::default()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_clients_on_tls_ports_and_stalled_handshakes_are_dropped() {
    let pki = Pki::new();
    let b = tls_broker(&pki, |c| c.ssl_handshake_timeout = 300).await;
    // A plain AMQP client on the TLS port: the broker answers with a TLS
    // alert (or nothing) and hangs up.
    let mut s = TcpStream::connect(("127.0.0.1", b.amqps_port())).await.unwrap();
    s.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let mut buf = Vec::new();
    within(s.read_to_end(&mut buf)).await.unwrap();
    assert!(
        buf.is_empty() || buf[0] == 0x15,
        "an alert record or nothing: {buf:?}"
    );
    // Garbage that looks like a TLS record.
    let mut s = TcpStream::connect(("127.0.0.1", b.amqps_port())).await.unwrap();
    s.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3, 4, 5])
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let mut buf = Vec::new();
    within(s.read_to_end(&mut buf)).await.unwrap();
    // A handshake that never starts is dropped after the timeout.
    let mut idle = TcpStream::connect(("127.0.0.1", b.amqps_port())).await.unwrap();
    let started = std::time::Instant::now();
    let n = within(idle.read(&mut [0u8; 16])).await.unwrap();
    assert_eq!(n, 0);
    assert!(started.elapsed() < Duration::from_secs(3));
    // A TLS client on the plain port gets the 0-9-1 header and a hang-up.
    let r = tls_handshake(&pki, b.port, None).await;
    assert!(r.is_err());
    // The HTTPS listener: the same for a plain HTTP client.
    let mut s = TcpStream::connect(("127.0.0.1", b.https_port())).await.unwrap();
    s.write_all(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    within(s.read_to_end(&mut buf)).await.unwrap();
    assert!(!buf.starts_with(b"HTTP/"));
    // Everyone else is still served.
    let conn = guest_over_tls(&pki, &b).await.unwrap();
    round_trip(&conn, "after-garbage").await;
    assert_eq!(connections_over_https(&b, &pki).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_serves_new_certificates_to_new_connections_only() {
    let pki = Pki::new();
    let b = tls_broker(&pki, |_| {}).await;
    let old = guest_over_tls(&pki, &b).await.unwrap();
    let subject = |s: &tokio_rustls::client::TlsStream<TcpStream>| {
        let der = s.get_ref().1.peer_certificates().unwrap()[0].clone();
        let (_, c) = x509_parser::parse_x509_certificate(&der).unwrap();
        c.subject().to_string()
    };
    let before = tls_handshake(&pki, b.amqps_port(), None).await.unwrap();
    assert!(subject(&before).contains("warren-server"));
    // New files in place of the old, then `warrenctl reload_tls`'s call.
    let fresh = pki.server_pair("fresh", "warren-renewed");
    std::fs::copy(&fresh.cert, &pki.server.cert).unwrap();
    std::fs::copy(&fresh.key, &pki.server.key).unwrap();
    let r = reload(&pki, &b).await;
    assert_eq!(r, 204);
    let after = tls_handshake(&pki, b.amqps_port(), None).await.unwrap();
    assert!(subject(&after).contains("warren-renewed"));
    // The connection opened before is still served.
    round_trip(&old, "still-open").await;
    // A broken file is refused and the certificate in force stays.
    std::fs::write(&pki.server.key, "not a key").unwrap();
    let r = reload(&pki, &b).await;
    assert_eq!(r, 400);
    let again = tls_handshake(&pki, b.amqps_port(), None).await.unwrap();
    assert!(subject(&again).contains("warren-renewed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp10_over_tls_with_fe2o3() {
    use fe2o3_amqp::{Connection, Receiver, Sender, Session};
    let pki = Pki::new();
    let b = tls_broker(&pki, |_| {}).await;
    let connector = tokio_rustls::TlsConnector::from(pki.client_config(None));
    let url = format!("amqps://guest:guest@localhost:{}", b.amqps_port());
    let mut conn = within(
        Connection::builder()
            .container_id("tls-test")
            .hostname("vhost:/")
            .alt_tls_establishment(true)
            .tls_connector(connector)
            .open(url.as_str()),
    )
    .await
    .expect("fe2o3 connects over TLS");
    let (_c, ch) = b.channel().await;
    within(ch.queue_declare(
        "amqp10-tls".into(),
        lapin::options::QueueDeclareOptions::default(),
        Default::default(),
    ))
    .await
    .unwrap();
    let mut session = within(Session::begin(&mut conn)).await.unwrap();
    let mut sender = within(Sender::attach(&mut session, "s", "/queues/amqp10-tls"))
        .await
        .unwrap();
    let body = "x".repeat(100_000);
    within(sender.send(body.clone()))
        .await
        .unwrap()
        .accepted_or_else(|o| o)
        .unwrap();
    let mut receiver = within(Receiver::attach(&mut session, "r", "/queues/amqp10-tls"))
        .await
        .unwrap();
    let d: fe2o3_amqp::link::delivery::Delivery<String> = within(receiver.recv()).await.unwrap();
    assert_eq!(d.body(), &body);
    within(receiver.accept(&d)).await.unwrap();
    let conns = connections_over_https(&b, &pki).await;
    let c = conns.iter().find(|c| c["protocol"] == "AMQP 1.0").unwrap();
    assert_eq!(c["ssl"], true);
    let _ = receiver.close().await;
    let _ = sender.close().await;
    let _ = session.end().await;
    let _ = conn.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp10_external_login() {
    use fe2o3_amqp::sasl_profile::SaslProfile;
    use fe2o3_amqp::Connection;
    let pki = Pki::new();
    let b = tls_broker(&pki, external_by_cn).await;
    b.add_user("alice");
    let alice = pki.client("alice");
    let open = |client: Pair| {
        let connector = tokio_rustls::TlsConnector::from(pki.client_config(Some(&client)));
        let url = format!("amqps://localhost:{}", b.amqps_port());
        async move {
            within(
                Connection::builder()
                    .container_id("ext")
                    .hostname("vhost:/")
                    .alt_tls_establishment(true)
                    .tls_connector(connector)
                    .sasl_profile(SaslProfile::External)
                    .open(url.as_str()),
            )
            .await
        }
    };
    let mut conn = open(alice).await.expect("EXTERNAL over AMQP 1.0");
    let conns = connections_over_https(&b, &pki).await;
    let c = conns.iter().find(|c| c["protocol"] == "AMQP 1.0").unwrap();
    assert_eq!(c["user"], "alice");
    assert_eq!(c["auth_mechanism"], "EXTERNAL");
    let _ = conn.close().await;
    assert!(open(pki.client("mallory")).await.is_err(), "unknown CN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_tls_advertise_the_tls_port() {
    use rabbitmq_stream_client::types::{Message, OffsetSpecification};
    use rabbitmq_stream_client::{Environment, TlsConfiguration};
    let pki = Pki::new();
    let b = tls_broker(&pki, |_| {}).await;
    let tls = TlsConfiguration::builder()
        .add_root_certificates(pki.ca_file.to_str().unwrap())
        .build()
        .unwrap();
    let env = within(
        Environment::builder()
            .host("localhost")
            .port(b.stream_tls_port())
            .tls(tls)
            .build(),
    )
    .await
    .expect("stream client connects over TLS");
    within(env.stream_creator().create("tls-stream")).await.unwrap();
    // The producer is placed by the stream's metadata: the advertised port
    // must be the TLS one, or this connection fails.
    let producer = within(env.producer().build("tls-stream")).await.unwrap();
    let msgs: Vec<Message> = (0..100)
        .map(|i| Message::builder().body(format!("m{i}")).build())
        .collect();
    within(producer.batch_send_with_confirm(msgs)).await.unwrap();
    within(producer.close()).await.unwrap();
    let mut consumer = within(
        env.consumer()
            .offset(OffsetSpecification::First)
            .build("tls-stream"),
    )
    .await
    .unwrap();
    use futures_lite::StreamExt;
    for i in 0..100 {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(d.message().data().unwrap(), format!("m{i}").as_bytes());
    }
    let conns = connections_over_https(&b, &pki).await;
    assert!(
        conns.iter().any(|c| c["protocol"] == "RabbitMQ Stream"
            && c["ssl"] == true
            && c["port"] == b.stream_tls_port()),
        "{conns:?}"
    );
    let h = consumer.handle();
    within(h.close()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_listeners_can_be_turned_off() {
    let pki = Pki::new();
    let none = warren_node::config::Listen::NONE;
    let b = tls_broker(&pki, |c| {
        c.stream_listen = none;
        c.http_listen = none;
        c.prometheus_listen = none;
    })
    .await;
    let r = b.running.as_ref().unwrap();
    assert!(r.stream_addr.is_none() && r.http_addr.is_none() && r.prometheus_addr.is_none());
    // Overview lists what listens, with RabbitMQ's protocol names.
    let url = format!("https://localhost:{}/api/overview", b.https_port());
    let o: Value = https_client(&pki)
        .get(url)
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut protocols: Vec<&str> = o["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["protocol"].as_str().unwrap())
        .collect();
    protocols.sort();
    assert_eq!(protocols, ["amqp", "amqp/ssl", "https", "stream/ssl"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_logs_in_by_subject_alternative_name() {
    use warren_node::tls::peer::{LoginFrom, SanType as LoginSan};
    let pki = Pki::new();
    let b = tls_broker(&pki, |c| {
        external_by_cn(c);
        c.ssl_cert_login_from = LoginFrom::SubjectAlternativeName;
        c.ssl_cert_login_san_type = LoginSan::Email;
        c.ssl_cert_login_san_index = 1;
    })
    .await;
    b.add_user("carol@example.com");
    let email = |s: &str| rcgen::SanType::Rfc822Name(s.to_string().try_into().unwrap());
    let cert = pki.client_with_sans(
        "not-a-user",
        vec![
            rcgen::SanType::DnsName("ignored.example".to_string().try_into().unwrap()),
            email("first@example.com"),
            email("carol@example.com"),
        ],
    );
    let conn = amqprs_open(
        &pki,
        b.amqps_port(),
        Some(&cert),
        SecurityCredentials::new_external(),
    )
    .await
    .expect("the second email SAN names the user");
    round_trip(&conn, "carol-q").await;
    within(conn.close()).await.unwrap();
}

/// A TLS 1.2 client (the Java client's and PerfTest's default protocol)
/// completes its handshake: in 1.2 the server's Finished comes after the
/// client's, and once stayed queued until the server had something else
/// to write, so such clients waited for it until they timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls12_clients_complete_the_handshake() {
    let pki = Pki::new();
    let b = tls_broker(&pki, |_| {}).await;
    let port = b.amqps_port();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(
            pki.ca.cert.der().to_vec(),
        ))
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut s = tokio::time::timeout(Duration::from_secs(3), connector.connect(name, tcp))
        .await
        .expect("the TLS 1.2 handshake completes")
        .unwrap();
    assert_eq!(
        s.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    s.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
    let mut head = [0u8; 7];
    within(s.read_exact(&mut head)).await.unwrap();
    assert_eq!(head[0], 1, "connection.start arrives");
}

/// A client that writes each publish as a TLS record of its own (as the
/// Java client does) has its confirms batched as over plain TCP: the
/// server takes every record the socket holds in one pass. It once took
/// one record per pass, and so sent one basic.ack per message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_in_many_records_are_confirmed_together() {
    use bytes::BytesMut;
    use std::io::{Read, Write};
    use warren_amqp091::frame::{write_body, write_content_header, write_method};
    use warren_amqp091::methods::*;
    use warren_amqp091::{BasicProperties, FieldTable, Frame, FrameType, Method, PROTOCOL_HEADER};

    const N: u64 = 50;
    let pki = Pki::new();
    let b = tls_broker(&pki, |_| {}).await;
    let port = b.amqps_port();
    let config = pki.client_config(None);
    let acks = tokio::task::spawn_blocking(move || {
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(config, name).unwrap();
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut s = rustls::StreamOwned::new(conn, tcp);
        let mut inbox = BytesMut::new();
        let mut next = |s: &mut rustls::StreamOwned<_, std::net::TcpStream>| loop {
            if let Some(f) = Frame::parse(&mut inbox, 1 << 20).unwrap() {
                if f.kind == FrameType::Method {
                    return Method::decode(f.payload).unwrap();
                }
                continue;
            }
            let mut chunk = [0u8; 16384];
            let n = s.read(&mut chunk).expect("the server answers");
            assert!(n > 0, "the server hung up");
            inbox.extend_from_slice(&chunk[..n]);
        };
        let send = |s: &mut rustls::StreamOwned<_, std::net::TcpStream>, ch: u16, m: Method| {
            let mut out = BytesMut::new();
            write_method(&mut out, ch, &m);
            s.write_all(&out).unwrap();
        };
        s.write_all(PROTOCOL_HEADER).unwrap();
        assert!(matches!(next(&mut s), Method::ConnectionStart(_)));
        let start_ok = ConnectionStartOk {
            client_properties: FieldTable::new(),
            mechanism: "PLAIN".into(),
            response: bytes::Bytes::from_static(b"\0guest\0guest"),
            locale: "en_US".into(),
        };
        send(&mut s, 0, start_ok.into());
        let Method::ConnectionTune(t) = next(&mut s) else {
            panic!("expected tune")
        };
        let tune_ok = ConnectionTuneOk {
            channel_max: t.channel_max,
            frame_max: t.frame_max,
            heartbeat: 0,
        };
        send(&mut s, 0, tune_ok.into());
        let open = ConnectionOpen {
            virtual_host: "/".into(),
            ..Default::default()
        };
        send(&mut s, 0, open.into());
        assert!(matches!(next(&mut s), Method::ConnectionOpenOk(_)));
        send(&mut s, 1, ChannelOpen::default().into());
        assert!(matches!(next(&mut s), Method::ChannelOpenOk(_)));
        send(&mut s, 1, ConfirmSelect { nowait: false }.into());
        assert!(matches!(next(&mut s), Method::ConfirmSelectOk(_)));
        let declare = QueueDeclare {
            queue: "records".into(),
            ..Default::default()
        };
        send(&mut s, 1, declare.into());
        assert!(matches!(next(&mut s), Method::QueueDeclareOk(_)));

        // N records, one per publish, leave in one write.
        for _ in 0..N {
            let mut out = BytesMut::new();
            let publish = BasicPublish {
                routing_key: "records".into(),
                ..Default::default()
            };
            write_method(&mut out, 1, &publish.into());
            write_content_header(&mut out, 1, 60, 100, &BasicProperties::default());
            write_body(&mut out, 1, &[7u8; 100], t.frame_max);
            s.conn.writer().write_all(&out).unwrap();
        }
        let mut wire = Vec::new();
        s.conn.write_tls(&mut wire).unwrap();
        s.sock.write_all(&wire).unwrap();

        let mut acks = 0;
        loop {
            match next(&mut s) {
                Method::BasicAck(a) => {
                    acks += 1;
                    if a.delivery_tag == N {
                        return acks;
                    }
                }
                m => panic!("expected basic.ack, got {m:?}"),
            }
        }
    })
    .await
    .unwrap();
    // Over loopback the whole write arrives at once: one pass, one ack
    // (a few if the kernel splits it).
    assert!(acks <= 5, "{N} publishes confirmed by {acks} basic.acks");
}
