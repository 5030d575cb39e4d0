//! `warren-connect`: how many new AMQP 0-9-1 connections per second a
//! broker takes, over TLS or plain TCP. Each connection does the whole
//! open (TCP, the TLS handshake when `--cafile` is given, PLAIN login,
//! tune, connection.open, channel.open), with `--in-flight` of them under
//! way at a time; all are held until the last is open, then closed.
//!
//! Written in Rust on rustls so that the client's own handshakes cost
//! little next to the broker's: on two cores a Python or Java client that
//! spends more per handshake than the broker measures itself. Every
//! connection offers X25519 only, so both brokers compared do the same
//! key exchange (a hybrid post-quantum one is rustls's default, which
//! RabbitMQ 3.10's Erlang does not have).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clap::Parser;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_amqp091::frame::write_method;
use warren_amqp091::methods::*;
use warren_amqp091::{FieldTable, Frame, FrameType, Method, PROTOCOL_HEADER};

#[derive(Parser)]
#[command(about = "New AMQP 0-9-1 connections per second, over TLS or plain TCP")]
struct Args {
    /// The broker, host:port.
    addr: String,
    /// How many connections to open.
    #[arg(default_value_t = 2000)]
    count: usize,
    /// Connections being opened at a time.
    #[arg(long, default_value_t = 250)]
    in_flight: usize,
    /// Connect over TLS, trusting this CA (PEM); the server name checked
    /// is `--server-name`.
    #[arg(long)]
    cafile: Option<std::path::PathBuf>,
    #[arg(long, default_value = "localhost")]
    server_name: String,
    #[arg(long, default_value = "guest")]
    user: String,
    #[arg(long, default_value = "guest")]
    password: String,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What a connection keeps open until the end of the run.
enum Held {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

fn tls_config(cafile: &std::path::Path) -> Result<Arc<rustls::ClientConfig>, Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(cafile)? {
        roots.add(cert?)?;
    }
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

async fn next_method<S: AsyncRead + Unpin>(s: &mut S, inbox: &mut BytesMut) -> Result<Method, Error> {
    loop {
        if let Some(f) = Frame::parse(inbox, 1 << 20)? {
            if f.kind == FrameType::Method {
                let m = Method::decode(f.payload)?;
                if let Method::ConnectionClose(c) = &m {
                    return Err(format!("refused: {} {}", c.reply_code, c.reply_text).into());
                }
                return Ok(m);
            }
            continue;
        }
        if s.read_buf(inbox).await? == 0 {
            return Err("the broker closed the connection".into());
        }
    }
}

async fn send<S: AsyncWrite + Unpin>(s: &mut S, channel: u16, m: impl Into<Method>) -> Result<(), Error> {
    let mut out = BytesMut::new();
    write_method(&mut out, channel, &m.into());
    s.write_all(&out).await?;
    Ok(())
}

/// The AMQP part of an open: login, tune, vhost "/", channel 1.
async fn amqp_open<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, login: &Bytes) -> Result<(), Error> {
    let mut inbox = BytesMut::with_capacity(4096);
    s.write_all(PROTOCOL_HEADER).await?;
    let Method::ConnectionStart(_) = next_method(s, &mut inbox).await? else {
        return Err("expected connection.start".into());
    };
    let start_ok = ConnectionStartOk {
        client_properties: FieldTable::new(),
        mechanism: "PLAIN".into(),
        response: login.clone(),
        locale: "en_US".into(),
    };
    send(s, 0, start_ok).await?;
    let Method::ConnectionTune(t) = next_method(s, &mut inbox).await? else {
        return Err("expected connection.tune".into());
    };
    let tune_ok = ConnectionTuneOk {
        channel_max: t.channel_max,
        frame_max: t.frame_max,
        // Held only for the length of the run.
        heartbeat: 0,
    };
    send(s, 0, tune_ok).await?;
    let open = ConnectionOpen {
        virtual_host: "/".into(),
        ..Default::default()
    };
    send(s, 0, open).await?;
    let Method::ConnectionOpenOk(_) = next_method(s, &mut inbox).await? else {
        return Err("expected connection.open-ok".into());
    };
    send(s, 1, ChannelOpen::default()).await?;
    let Method::ChannelOpenOk(_) = next_method(s, &mut inbox).await? else {
        return Err("expected channel.open-ok".into());
    };
    Ok(())
}

async fn open(args: Arc<Args>, tls: Option<Arc<rustls::ClientConfig>>, login: Bytes) -> Result<Held, Error> {
    let tcp = TcpStream::connect(&args.addr).await?;
    tcp.set_nodelay(true)?;
    match tls {
        None => {
            let mut s = tcp;
            amqp_open(&mut s, &login).await?;
            Ok(Held::Plain(s))
        }
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(args.server_name.clone())?;
            let mut s = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            amqp_open(&mut s, &login).await?;
            Ok(Held::Tls(Box::new(s)))
        }
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let tls = args.cafile.as_deref().map(tls_config).transpose()?;
    let login = Bytes::from(format!("\0{}\0{}", args.user, args.password));
    let args = Arc::new(args);
    let permits = Arc::new(tokio::sync::Semaphore::new(args.in_flight.max(1)));
    let t0 = Instant::now();
    let mut tasks = Vec::with_capacity(args.count);
    for _ in 0..args.count {
        let permit = permits.clone().acquire_owned().await?;
        let (args, tls, login) = (args.clone(), tls.clone(), login.clone());
        tasks.push(tokio::spawn(async move {
            let r = tokio::time::timeout(Duration::from_secs(60), open(args, tls, login)).await;
            drop(permit);
            r.map_err(|_| Error::from("open timed out after 60 s"))?
        }));
    }
    let mut held = Vec::with_capacity(args.count);
    let mut failed = 0;
    let mut first_error = None;
    for t in tasks {
        match t.await? {
            Ok(h) => held.push(h),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "connections={} failed={failed} opened_in={secs:.2}s opened_per_s={:.0}",
        held.len(),
        held.len() as f64 / secs
    );
    if let Some(e) = first_error {
        eprintln!("warren-connect: first failure: {e}");
    }
    // Close each socket (saying close_notify over TLS) rather than
    // dropping it, so neither broker sees an abrupt end.
    for h in held {
        let close = async {
            match h {
                Held::Plain(mut s) => s.shutdown().await,
                Held::Tls(mut s) => s.shutdown().await,
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(100), close).await;
    }
    if failed > 0 {
        return Err(format!("{failed} connections failed").into());
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("warren-connect: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
