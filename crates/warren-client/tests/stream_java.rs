//! Sub-entry batches between this client and RabbitMQ's Java stream
//! client, both ways, with every codec (none, gzip, snappy, lz4, zstd):
//! the Java client writes, this one reads, and the other way round.
//! Against an in-process Warren and, when tests/client/rabbitmq.sh has
//! set it, the RabbitMQ 3.10 anchor.
//!
//! Ignored by a plain `cargo test`: it needs Java and the Java client,
//! which tests/client/java-stream.sh fetches (Maven Central), compiles
//! tests/client/java-stream/StreamInterop.java against, and names in
//! `WARREN_CLIENT_JAVA_CP` before running this test.

mod support;

use futures_util::StreamExt;
use support::{stream_brokers, unique, within};
use warren_client::stream::{Compression, Environment, Message, OffsetSpecification, StreamOptions};

const COUNT: usize = 1000;

const CODECS: [(&str, Compression); 5] = [
    ("none", Compression::None),
    ("gzip", Compression::Gzip),
    ("snappy", Compression::Snappy),
    ("lz4", Compression::Lz4),
    ("zstd", Compression::Zstd),
];

/// Run the Java side; its output on failure.
async fn java(mode: &str, uri: &str, prefix: &str) {
    let cp = std::env::var("WARREN_CLIENT_JAVA_CP")
        .expect("WARREN_CLIENT_JAVA_CP (tests/client/java-stream.sh sets it)");
    let args: Vec<String> = ["-cp", &cp, "StreamInterop", mode, uri, prefix, &COUNT.to_string()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = tokio::task::spawn_blocking(move || std::process::Command::new("java").args(&args).output())
        .await
        .unwrap()
        .expect("java runs");
    assert!(
        out.status.success(),
        "java {mode} failed against {uri}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
#[ignore = "needs Java: tests/client/java-stream.sh"]
async fn sub_entry_batches_cross_between_this_client_and_the_java_client() {
    let (uris, _broker) = stream_brokers().await;
    for uri in &uris {
        let env = within(Environment::connect(uri)).await.unwrap();

        // Java writes, this client reads.
        let from_java = unique("from-java");
        java("publish", uri, &from_java).await;
        for (name, _) in CODECS {
            let stream = format!("{from_java}-{name}");
            let mut consumer = within(env.consumer().offset(OffsetSpecification::First).build(&stream))
                .await
                .unwrap();
            for i in 0..COUNT {
                let d = within(consumer.next()).await.unwrap().unwrap();
                assert_eq!(
                    &d.body().unwrap()[..],
                    format!("java-{i}").as_bytes(),
                    "{uri} {stream}: message {i}"
                );
            }
            within(consumer.close()).await.unwrap();
            within(env.delete_stream(&stream)).await.unwrap();
        }

        // This client writes, Java reads.
        let from_rust = unique("from-rust");
        for (name, codec) in CODECS {
            let stream = format!("{from_rust}-{name}");
            within(env.create_stream(&stream, &StreamOptions::default()))
                .await
                .unwrap();
            let producer = within(
                env.producer()
                    .sub_entry_size(10)
                    .compression(codec)
                    .build(&stream),
            )
            .await
            .unwrap();
            let confirms = within(producer.send_batch((0..COUNT).map(|i| Message::new(format!("rust-{i}")))))
                .await
                .unwrap();
            for c in confirms {
                assert!(within(c).await.unwrap().is_confirmed());
            }
            within(producer.close()).await.unwrap();
        }
        java("consume", uri, &from_rust).await;
        for (name, _) in CODECS {
            within(env.delete_stream(&format!("{from_rust}-{name}")))
                .await
                .unwrap();
        }
        env.close().await;
    }
}
