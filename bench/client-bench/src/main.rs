//! One measurement per run, printed as one tab-separated line, so that
//! `bench/client.sh` can run each client in a process of its own (its
//! CPU time and context switches are then its own):
//!
//! ```text
//! client-bench URI CLIENT publish  --size 12 --in-flight 20 --secs 5
//! client-bench URI CLIENT consume  --size 12 --ack-every 10 --messages 200000
//! client-bench URI warren dispatch --concurrency 32 --handler-ms 5 --secs 5
//! client-bench URI warren memory   --secs 30
//! client-bench STREAM_URI CLIENT stream-publish --size 12 --in-flight 10000 --secs 5
//! client-bench STREAM_URI CLIENT stream-consume --size 12 --messages 1000000
//! client-bench URI CLIENT amqp10-publish --size 12 --in-flight 200 --secs 5
//! client-bench URI CLIENT amqp10-consume --size 12 --prefetch 200 --messages 200000
//! ```
//!
//! CLIENT is `warren` (warren-client), `warren-busy-poll` (warren-client
//! with `busy_poll`, publishing only), `lapin`, `amqprs` or `floor` (no
//! client library: raw frames on a blocking socket, publishing only); for the
//! stream workloads `warren` or `rabbitmq-stream-client`; for the AMQP
//! 1.0 ones `warren` or `fe2o3-amqp` (--prefetch is the credit). Queues are
//! set up (and filled, for `consume`) with warren-client before the
//! clock starts.

mod amqp10_side;
mod amqprs_side;
mod floor_side;
mod lapin_side;
mod rsc_side;
mod setup;
mod stream_side;
mod usage;
mod warren_side;

use std::time::Duration;

use clap::{Parser, ValueEnum};

/// warren-busy-poll's budget.
const BUSY_POLL: Duration = Duration::from_micros(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Client {
    Warren,
    /// warren-client with `busy_poll(100 µs)`: the reader polls a quiet
    /// socket briefly before it sleeps.
    WarrenBusyPoll,
    Lapin,
    Amqprs,
    /// No client library: raw frames on a blocking socket, one thread
    /// (publishing only): the floor any client that sleeps must pay.
    Floor,
    /// rabbitmq-stream-client (the stream workloads).
    #[value(name = "rabbitmq-stream-client")]
    RustStream,
    /// fe2o3-amqp (the AMQP 1.0 workloads).
    #[value(name = "fe2o3-amqp")]
    Fe2o3,
    /// RabbitMQ's AMQP 1.0 Go client (the AMQP 1.0 workloads), run as
    /// bench/amqp10-go's program (its path in CLIENT_BENCH_GO).
    #[value(name = "rabbitmq-amqp-go-client")]
    Go,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Workload {
    /// Publish with confirms, at most --in-flight unconfirmed, for --secs.
    Publish,
    /// Consume --messages with acks, `multiple` every --ack-every.
    Consume,
    /// A handler of --handler-ms per delivery at --concurrency (warren).
    Dispatch,
    /// Resident memory while the consumer is 10x slower than the
    /// publisher (warren).
    Memory,
    /// Synchronous round trips (basic.qos) for --secs: the broker's own
    /// answer time, the floor under publishing at one in flight.
    RoundTrip,
    /// Stream protocol: publish batches of 100 with at most --in-flight
    /// unconfirmed for --secs (URI rabbitmq-stream://; warren or
    /// rabbitmq-stream-client).
    StreamPublish,
    /// Stream protocol: read --messages from the start of a stream.
    StreamConsume,
    /// AMQP 1.0: publish with outcomes, at most --in-flight awaited, for
    /// --secs (warren or fe2o3-amqp).
    Amqp10Publish,
    /// AMQP 1.0: consume --messages with credit --prefetch, each accepted.
    Amqp10Consume,
}

#[derive(Parser, Debug)]
struct Args {
    uri: String,
    #[arg(value_enum)]
    client: Client,
    #[arg(value_enum)]
    workload: Workload,
    #[arg(long, default_value_t = 12)]
    size: usize,
    #[arg(long, default_value_t = 200)]
    in_flight: usize,
    #[arg(long, default_value_t = 5)]
    secs: u64,
    #[arg(long, default_value_t = 1)]
    ack_every: u64,
    #[arg(long, default_value_t = 200_000)]
    messages: u64,
    #[arg(long, default_value_t = 1000)]
    prefetch: u16,
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    #[arg(long, default_value_t = 0)]
    handler_ms: u64,
}

/// What a timed run did.
pub struct Outcome {
    pub messages: u64,
    pub elapsed: Duration,
    /// Extra columns (memory samples).
    pub note: String,
}

fn main() {
    let a = Args::parse();
    // Every client on the same runtime: tokio's default multi-threaded
    // one, or with CLIENT_BENCH_RUNTIME=current one thread.
    let rt = match std::env::var("CLIENT_BENCH_RUNTIME").as_deref() {
        Ok("current") => tokio::runtime::Builder::new_current_thread().enable_all().build(),
        _ => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
    };
    rt.expect("a tokio runtime").block_on(run(a));
}

async fn run(a: Args) {
    let secs = Duration::from_secs(a.secs);
    let body = vec![b'x'; a.size];
    let (outcome, used) = match a.workload {
        Workload::Publish => {
            let q = setup::publish_queue(&a.uri).await;
            let before = usage::now();
            let o = match a.client {
                Client::Warren => warren_side::publish(&a.uri, &q, &body, a.in_flight, secs, None).await,
                Client::WarrenBusyPoll => {
                    warren_side::publish(&a.uri, &q, &body, a.in_flight, secs, Some(BUSY_POLL)).await
                }
                Client::Lapin => lapin_side::publish(&a.uri, &q, &body, a.in_flight, secs).await,
                Client::Amqprs => amqprs_side::publish(&a.uri, &q, &body, a.in_flight, secs).await,
                Client::RustStream | Client::Fe2o3 | Client::Go => {
                    panic!("{:?} speaks another protocol", a.client)
                }
                Client::Floor => {
                    let (uri, q, body, in_flight) = (a.uri.clone(), q.clone(), body.clone(), a.in_flight);
                    tokio::task::spawn_blocking(move || floor_side::publish(&uri, &q, &body, in_flight, secs))
                        .await
                        .expect("the floor run")
                }
            };
            (o, usage::now().since(&before))
        }
        Workload::Consume => {
            let q = setup::filled_queue(&a.uri, &body, a.messages).await;
            let before = usage::now();
            let o = match a.client {
                Client::Floor => panic!("the floor is measured publishing"),
                Client::RustStream | Client::Fe2o3 | Client::Go => {
                    panic!("{:?} speaks another protocol", a.client)
                }
                Client::Warren | Client::WarrenBusyPoll => {
                    warren_side::consume(&a.uri, &q, a.messages, a.ack_every, a.prefetch).await
                }
                Client::Lapin => lapin_side::consume(&a.uri, &q, a.messages, a.ack_every, a.prefetch).await,
                Client::Amqprs => amqprs_side::consume(&a.uri, &q, a.messages, a.ack_every, a.prefetch).await,
            };
            (o, usage::now().since(&before))
        }
        Workload::Dispatch => {
            assert_eq!(
                a.client,
                Client::Warren,
                "dispatch concurrency is warren-client's"
            );
            let q = setup::filled_queue(&a.uri, &body, a.messages).await;
            let before = usage::now();
            let o = warren_side::dispatch(&a.uri, &q, a.messages, a.concurrency, a.handler_ms, secs).await;
            (o, usage::now().since(&before))
        }
        Workload::RoundTrip => {
            let before = usage::now();
            let o = match a.client {
                Client::Warren => warren_side::round_trips(&a.uri, secs, None).await,
                Client::WarrenBusyPoll => warren_side::round_trips(&a.uri, secs, Some(BUSY_POLL)).await,
                _ => panic!("round trips are measured with warren-client"),
            };
            (o, usage::now().since(&before))
        }
        Workload::StreamPublish => {
            let s = "client-bench-stream-publish";
            stream_side::fresh_stream(&a.uri, s).await;
            let before = usage::now();
            let o = match a.client {
                Client::Warren => stream_side::publish(&a.uri, s, &body, a.in_flight, secs).await,
                Client::RustStream => rsc_side::publish(&a.uri, s, &body, a.in_flight, secs).await,
                other => panic!("{other:?} does not speak the stream protocol"),
            };
            (o, usage::now().since(&before))
        }
        Workload::StreamConsume => {
            let s = "client-bench-stream-consume";
            stream_side::fresh_stream(&a.uri, s).await;
            stream_side::fill(&a.uri, s, &body, a.messages).await;
            let before = usage::now();
            let o = match a.client {
                Client::Warren => stream_side::consume(&a.uri, s, a.messages).await,
                Client::RustStream => rsc_side::consume(&a.uri, s, a.messages).await,
                other => panic!("{other:?} does not speak the stream protocol"),
            };
            (o, usage::now().since(&before))
        }
        Workload::Amqp10Publish if a.client == Client::Go => {
            let q = setup::publish_queue(&a.uri).await;
            let before = usage::children_now();
            let args = [a.size as u64, a.in_flight as u64, secs.as_secs()];
            let o = amqp10_side::go_run(&a.uri, "publish", &q, args);
            (o, usage::children_now().since(&before))
        }
        Workload::Amqp10Consume if a.client == Client::Go => {
            let q = setup::filled_queue(&a.uri, &body, a.messages).await;
            let before = usage::children_now();
            let args = [a.size as u64, a.prefetch as u64, a.messages];
            let o = amqp10_side::go_run(&a.uri, "consume", &q, args);
            (o, usage::children_now().since(&before))
        }
        Workload::Amqp10Publish => {
            let q = setup::publish_queue(&a.uri).await;
            let before = usage::now();
            let o = match a.client {
                Client::Warren => amqp10_side::warren_publish(&a.uri, &q, &body, a.in_flight, secs).await,
                Client::Fe2o3 => amqp10_side::fe2o3_publish(&a.uri, &q, &body, a.in_flight, secs).await,
                other => panic!("{other:?} does not speak AMQP 1.0"),
            };
            (o, usage::now().since(&before))
        }
        Workload::Amqp10Consume => {
            let q = setup::filled_queue(&a.uri, &body, a.messages).await;
            let before = usage::now();
            let credit = a.prefetch as u32;
            let o = match a.client {
                Client::Warren => amqp10_side::warren_consume(&a.uri, &q, a.messages, credit).await,
                Client::Fe2o3 => amqp10_side::fe2o3_consume(&a.uri, &q, a.messages, credit).await,
                other => panic!("{other:?} does not speak AMQP 1.0"),
            };
            (o, usage::now().since(&before))
        }
        Workload::Memory => {
            assert_eq!(a.client, Client::Warren, "the memory run is warren-client's");
            let before = usage::now();
            let o = warren_side::memory(&a.uri, &body, secs).await;
            (o, usage::now().since(&before))
        }
    };
    let n = outcome.messages.max(1) as f64;
    let broker = used
        .broker
        .map(|b| format!("broker_cpu_us_per_msg={:.2}\t", b.as_micros() as f64 / n))
        .unwrap_or_default();
    println!(
        "{:?}\t{:?}\tsize={}\tin_flight={}\tack_every={}\tconcurrency={}\thandler_ms={}\tmsgs={}\tsecs={:.2}\trate={:.0}\tcpu_us_per_msg={:.2}\tcsw_per_msg={:.3}\t{}{}",
        a.client,
        a.workload,
        a.size,
        a.in_flight,
        a.ack_every,
        a.concurrency,
        a.handler_ms,
        outcome.messages,
        outcome.elapsed.as_secs_f64(),
        outcome.messages as f64 / outcome.elapsed.as_secs_f64(),
        used.cpu.as_micros() as f64 / n,
        used.context_switches as f64 / n,
        broker,
        outcome.note,
    );
}
