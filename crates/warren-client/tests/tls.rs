//! amqps:// against a Warren with TLS listeners (certificates made by the
//! test with rcgen, none committed): PLAIN over TLS with the CA named in
//! the URI, SASL EXTERNAL with a client certificate, and a broker whose
//! certificate the client does not trust refused with a TLS error; a
//! stream published and read over rabbitmq-stream+tls://. With
//! `WARREN_CLIENT_RABBITMQ_TLS_DIR` set (`tests/client/rabbitmq-tls.sh`)
//! the same against the RabbitMQ 3.10 anchor with TLS.

mod support;

use std::path::{Path, PathBuf};

use bytes::Bytes;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use support::within;
use warren_client::amqp091::{Connection, Error, Properties, QueueOptions};
use warren_client::tls::TlsOptions;

struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn new_ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    Ca { cert, key }
}

/// Write a certificate signed by `ca` and its key; their paths.
fn issue(dir: &Path, ca: &Ca, file: &str, cn: &str, server: bool) -> (PathBuf, PathBuf) {
    let mut p = CertificateParams::new(if server {
        vec!["localhost".to_string()]
    } else {
        vec![]
    })
    .unwrap();
    if server {
        p.subject_alt_names
            .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
    }
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.cert, &ca.key).unwrap();
    let (c, k) = (dir.join(format!("{file}.pem")), dir.join(format!("{file}.key")));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

/// A file's path as a URI query parameter's value.
fn uri_param(path: &Path) -> String {
    percent_encoding::utf8_percent_encode(path.to_str().unwrap(), percent_encoding::NON_ALPHANUMERIC)
        .to_string()
}

/// A client trusting only a CA of its own (written to `ca_file`) is
/// refused with a TLS error by the broker on `port`.
async fn an_untrusted_ca_is_refused(port: u16, ca_file: &Path) {
    std::fs::write(ca_file, new_ca("another CA").cert.pem()).unwrap();
    let tls = TlsOptions::from_pem_files(Some(ca_file), None).unwrap();
    let refused = within(
        Connection::builder(&format!("amqps://guest:guest@localhost:{port}/%2f"))
            .tls(tls)
            .open(),
    )
    .await
    .unwrap_err();
    assert!(matches!(refused, Error::Tls(_)), "{refused:?}");
}

async fn round_trip(conn: &Connection, q: &str) {
    let ch = within(conn.channel()).await.unwrap();
    within(ch.queue_declare(q, QueueOptions::default().auto_delete()))
        .await
        .unwrap();
    let _sent = within(ch.publish("", q, Properties::default(), Bytes::from_static(b"over tls")))
        .await
        .unwrap();
    let got = loop {
        if let Some(m) = within(ch.get(q, true)).await.unwrap() {
            break m;
        }
    };
    assert_eq!(&got.delivery.body[..], b"over tls");
}

#[tokio::test]
async fn amqps_with_plain_and_with_external_and_an_untrusted_broker_refused() {
    let dir = std::env::temp_dir().join(format!("warren-client-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = new_ca("warren-client test CA");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.cert.pem()).unwrap();
    let (server_cert, server_key) = issue(&dir, &ca, "server", "warren-server", true);
    // EXTERNAL logs in as the certificate's CN: guest.
    let (client_cert, client_key) = issue(&dir, &ca, "client", "guest", false);

    let data = dir.join("data");
    let mut config = warren_server::Config::loopback(data);
    config.ssl_options = warren_node::tls::SslOptions {
        certfile: Some(server_cert),
        keyfile: Some(server_key),
        cacertfile: Some(ca_file.clone()),
        // Certificates checked when sent (EXTERNAL needs one), not required.
        verify: warren_node::tls::Verify::VerifyPeer,
        ..Default::default()
    };
    config.auth_mechanisms = vec!["PLAIN".into(), "AMQPLAIN".into(), "EXTERNAL".into()];
    config.ssl_cert_login_from = warren_node::tls::peer::LoginFrom::CommonName;
    let warren = warren_server::start(config).await.expect("Warren starts");
    let port = warren.listeners.amqps.expect("an amqps listener").port();

    // PLAIN over TLS, the CA named in the URI.
    let ca_param = uri_param(&ca_file);
    let uri = format!("amqps://guest:guest@localhost:{port}/%2f?cacertfile={ca_param}");
    let conn = within(Connection::open(&uri)).await.unwrap();
    round_trip(&conn, "tls-plain").await;
    within(conn.close()).await.unwrap();

    // EXTERNAL: no password, the client certificate says who.
    let tls = TlsOptions::from_pem_files(Some(&ca_file), Some((&client_cert, &client_key))).unwrap();
    let conn = within(
        Connection::builder(&format!(
            "amqps://nobody@localhost:{port}/%2f?auth_mechanism=external"
        ))
        .tls(tls)
        .open(),
    )
    .await
    .unwrap();
    round_trip(&conn, "tls-external").await;
    within(conn.close()).await.unwrap();

    // A broker certified by a CA the client does not trust.
    an_untrusted_ca_is_refused(port, &dir.join("other-ca.pem")).await;

    let stream_port = warren.listeners.stream_tls.expect("a stream TLS listener").port();
    stream_round_trip(stream_port, &ca_file).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// rabbitmq-stream+tls://: many frames of 1 KB messages published
/// (each frame handed to the writer whole) and read back in order.
async fn stream_round_trip(port: u16, ca_file: &Path) {
    use futures_util::StreamExt;
    use warren_client::stream::{Environment, Message, OffsetSpecification, StreamOptions};

    let env = within(
        Environment::builder()
            .uri(format!("rabbitmq-stream+tls://guest:guest@localhost:{port}/%2f"))
            .tls(TlsOptions::from_pem_files(Some(ca_file), None).unwrap())
            .build(),
    )
    .await
    .unwrap();
    within(env.create_stream("tls-stream", &StreamOptions::default()))
        .await
        .unwrap();
    let producer = within(env.producer().build("tls-stream")).await.unwrap();
    const N: usize = 3000;
    let body = |i: usize| format!("{i:>1000}");
    let all = within(producer.send_all((0..N).map(|i| Message::new(body(i)))))
        .await
        .unwrap();
    let outcome = within(all).await;
    assert!(outcome.all_confirmed(), "{outcome:?}");
    let mut consumer = within(
        env.consumer()
            .offset(OffsetSpecification::First)
            .build("tls-stream"),
    )
    .await
    .unwrap();
    for i in 0..N {
        let d = within(consumer.next()).await.unwrap().unwrap();
        assert_eq!(
            (d.offset(), &d.body().unwrap()[..]),
            (i as u64, body(i).as_bytes())
        );
    }
    within(env.delete_stream("tls-stream")).await.unwrap();
    env.close().await;
}

/// The anchor's side: a RabbitMQ 3.10 node with TLS (bench/tls-anchor.sh)
/// and the certificates of tools/tls-certs.sh in the directory named;
/// the user `alice` (the client certificate's CN) exists there, `mallory`
/// (another certificate of the same CA) does not. Without the variables
/// (plain `cargo test`) there is no anchor to run against.
#[tokio::test]
async fn amqps_against_the_rabbitmq_anchor() {
    let (Ok(dir), Ok(port)) = (
        std::env::var("WARREN_CLIENT_RABBITMQ_TLS_DIR"),
        std::env::var("WARREN_CLIENT_RABBITMQ_AMQPS_PORT"),
    ) else {
        eprintln!("no TLS anchor given: see tests/client/rabbitmq-tls.sh");
        return;
    };
    let dir = PathBuf::from(dir);
    let ca_file = dir.join("ca_certificate.pem");
    let ca_param = uri_param(&ca_file);

    // PLAIN over TLS, the CA named in the URI.
    let conn = within(Connection::open(&format!(
        "amqps://guest:guest@localhost:{port}/%2f?cacertfile={ca_param}"
    )))
    .await
    .unwrap();
    round_trip(&conn, "anchor-tls-plain").await;
    within(conn.close()).await.unwrap();

    // EXTERNAL as alice, the certificate files named in the URI.
    let param = |f: &str| uri_param(&dir.join(f));
    let uri = format!(
        "amqps://localhost:{port}/%2f?auth_mechanism=external&cacertfile={ca_param}&certfile={}&keyfile={}",
        param("client_certificate.pem"),
        param("client_key.pem")
    );
    let conn = within(Connection::open(&uri)).await.unwrap();
    round_trip(&conn, "anchor-tls-external").await;
    within(conn.close()).await.unwrap();

    // A certificate of the same CA for a user RabbitMQ does not know.
    let tls = TlsOptions::from_pem_files(
        Some(&ca_file),
        Some((&dir.join("mallory_certificate.pem"), &dir.join("mallory_key.pem"))),
    )
    .unwrap();
    let refused = within(
        Connection::builder(&format!("amqps://localhost:{port}/%2f?auth_mechanism=external"))
            .tls(tls)
            .open(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            refused,
            Error::ConnectionClosed { code: 403, .. } | Error::ConnectionLost(_)
        ),
        "{refused:?}"
    );

    // A CA the client does not trust.
    let other_file = std::env::temp_dir().join(format!("warren-client-anchor-ca-{}.pem", std::process::id()));
    an_untrusted_ca_is_refused(port.parse().unwrap(), &other_file).await;
    let _ = std::fs::remove_file(&other_file);
}
