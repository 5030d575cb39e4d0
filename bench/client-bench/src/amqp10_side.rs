//! AMQP 1.0: warren-client's `amqp` module, fe2o3-amqp and RabbitMQ's Go
//! client (a program of its own, bench/amqp10-go), publishing
//! with outcomes (at most --in-flight awaited) and consuming with a
//! credit window (each delivery accepted), on a queue's v2 address.
//! Messages are transient for both (fe2o3-amqp sends none durable by
//! default; warren-client's are durable unless said).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::messaging::{Body, Data, Message as FeMessage};
use fe2o3_amqp::types::primitives::Value as FeValue;
use warren_client::amqp::{address, Connection, Message, Outcome as WarrenOutcome};

use crate::Outcome;

pub async fn warren_publish(uri: &str, q: &str, body: &[u8], in_flight: usize, secs: Duration) -> Outcome {
    let conn = Connection::open(uri).await.expect("connects");
    let publisher = conn
        .publisher()
        .address(queue_address(q))
        .max_in_flight(in_flight)
        .build()
        .await
        .unwrap();
    let body = Bytes::copy_from_slice(body);
    let mut pending: VecDeque<warren_client::amqp::Published> = VecDeque::with_capacity(in_flight);
    let started = Instant::now();
    let mut accepted = 0u64;
    while started.elapsed() < secs {
        if pending.len() >= in_flight {
            let o = pending.pop_front().unwrap_or_else(|| unreachable!()).await;
            assert_eq!(o.unwrap(), WarrenOutcome::Accepted);
            accepted += 1;
        }
        pending.push_back(
            publisher
                .publish(Message::new(body.clone()).transient())
                .await
                .unwrap(),
        );
    }
    for p in pending {
        assert_eq!(p.await.unwrap(), WarrenOutcome::Accepted);
        accepted += 1;
    }
    let elapsed = started.elapsed();
    conn.close().await;
    Outcome {
        messages: accepted,
        elapsed,
        note: String::new(),
    }
}

pub async fn warren_consume(uri: &str, q: &str, messages: u64, credit: u32) -> Outcome {
    let conn = Connection::open(uri).await.expect("connects");
    let mut consumer = conn
        .consumer()
        .address(queue_address(q))
        .initial_credit(credit)
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    for _ in 0..messages {
        consumer.receive().await.unwrap().accept();
    }
    let elapsed = started.elapsed();
    conn.close().await;
    Outcome {
        messages,
        elapsed,
        note: String::new(),
    }
}

/// The queue's address: v2 (RabbitMQ 4, Warren), or with
/// CLIENT_BENCH_V1=1 v1 (`/amq/queue/:q`, RabbitMQ 3.x's plugin).
fn queue_address(q: &str) -> String {
    match std::env::var("CLIENT_BENCH_V1").as_deref() {
        Ok("1") => format!("/amq/queue/{q}"),
        _ => address::queue(q),
    }
}

/// A fe2o3-amqp connection over a socket with TCP_NODELAY, which
/// fe2o3-amqp does not set itself: without it a consumer's credit
/// top-up waits behind Nagle's algorithm for the broker's delayed ACK
/// (4,552 msg/s at credit 200 against Warren, 92,234 at credit 1,000).
/// Any user can do the same, so the comparison gives it that.
async fn fe2o3_connect(uri: &str) -> fe2o3_amqp::connection::ConnectionHandle<()> {
    let u = warren_client::uri::AmqpUri::parse(uri).expect("a URI");
    let tcp = tokio::net::TcpStream::connect((u.host.as_str(), u.port))
        .await
        .expect("connects");
    tcp.set_nodelay(true).unwrap();
    fe2o3_amqp::Connection::builder()
        .container_id("client-bench")
        .scheme("amqp")
        .sasl_profile(fe2o3_amqp::sasl_profile::SaslProfile::Plain {
            username: u.user,
            password: u.password,
        })
        .open_with_stream(tcp)
        .await
        .expect("opens")
}

pub async fn fe2o3_publish(uri: &str, q: &str, body: &[u8], in_flight: usize, secs: Duration) -> Outcome {
    let mut conn = fe2o3_connect(uri).await;
    let mut session = fe2o3_amqp::Session::begin(&mut conn).await.unwrap();
    let mut sender = fe2o3_amqp::Sender::attach(&mut session, "client-bench", queue_address(q))
        .await
        .unwrap();
    let mut pending = VecDeque::with_capacity(in_flight);
    let started = Instant::now();
    let mut accepted = 0u64;
    while started.elapsed() < secs {
        if pending.len() >= in_flight {
            let o: Result<_, _> = pending.pop_front().unwrap_or_else(|| unreachable!()).await;
            let o: fe2o3_amqp::types::messaging::Outcome = o.unwrap();
            assert!(o.is_accepted());
            accepted += 1;
        }
        let m = FeMessage::builder().data(Data::from(body.to_vec())).build();
        pending.push_back(sender.send_batchable(m).await.unwrap());
    }
    for p in pending {
        assert!(p.await.unwrap().is_accepted());
        accepted += 1;
    }
    let elapsed = started.elapsed();
    let _ = sender.close().await;
    let _ = session.end().await;
    let _ = conn.close().await;
    Outcome {
        messages: accepted,
        elapsed,
        note: String::new(),
    }
}

pub async fn fe2o3_consume(uri: &str, q: &str, messages: u64, credit: u32) -> Outcome {
    let mut conn = fe2o3_connect(uri).await;
    let mut session = fe2o3_amqp::Session::begin(&mut conn).await.unwrap();
    let mut receiver = fe2o3_amqp::Receiver::builder()
        .name("client-bench")
        .source(queue_address(q))
        .credit_mode(CreditMode::Auto(credit))
        .attach(&mut session)
        .await
        .unwrap();
    let started = Instant::now();
    for _ in 0..messages {
        let d = receiver.recv::<Body<FeValue>>().await.unwrap();
        receiver.accept(&d).await.unwrap();
    }
    let elapsed = started.elapsed();
    let _ = receiver.close().await;
    let _ = session.end().await;
    let _ = conn.close().await;
    Outcome {
        messages,
        elapsed,
        note: String::new(),
    }
}

/// Run bench/amqp10-go's program (path in CLIENT_BENCH_GO) for `mode`
/// on queue `q` with `args` (size, in-flight or credit, seconds or
/// messages); what it reports. The queue's address is v2 (the Go client
/// speaks only RabbitMQ 4's).
pub fn go_run(uri: &str, mode: &str, q: &str, args: [u64; 3]) -> Outcome {
    let program = std::env::var("CLIENT_BENCH_GO").unwrap_or_else(|_| "bench/amqp10-go/amqp10-go".into());
    let out = std::process::Command::new(&program)
        .args([uri, mode, q])
        .args(args.map(|n| n.to_string()))
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(out.status.success(), "{program} failed");
    let line = String::from_utf8_lossy(&out.stdout);
    let mut words = line.split_whitespace();
    let messages: u64 = words.next().and_then(|w| w.parse().ok()).expect("a count");
    let secs: f64 = words.next().and_then(|w| w.parse().ok()).expect("seconds");
    Outcome {
        messages,
        elapsed: Duration::from_secs_f64(secs),
        note: String::new(),
    }
}
