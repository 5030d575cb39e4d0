//! A stream "broker" that completes the opening (peer properties, SASL
//! PLAIN, tune, open) and then sends garbage and closes: random bytes,
//! frames announcing sizes far past any limit, well-formed frames with
//! random keys and payloads. Each time the client's request ends with an
//! error (or, by chance, an answer), never a panic or a hang.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::scripted_stream::{frame, ok, opening};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_client::stream::{Environment, StreamOptions};

/// xorshift64*: reproducible garbage without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Case `n`'s garbage.
fn garbage(n: u64) -> Vec<u8> {
    let mut rng = Rng(n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    match n % 5 {
        0 => {
            let len = 1 + (rng.next() % 200) as usize;
            rng.bytes(len)
        }
        // A size no frame may have: refused from the prefix alone.
        1 => (0xffff_fff0u32 - n as u32).to_be_bytes().to_vec(),
        2 => {
            let key = rng.next() as u16;
            let len = (rng.next() % 64) as usize;
            frame(key, &rng.bytes(len))
        }
        // Deliver version 2 (the committed chunk id first), random.
        3 => {
            let len = (rng.next() % 80) as usize;
            let mut f = frame(0x0008, &rng.bytes(len));
            f[7] = 2;
            f
        }
        // Commands the client knows, with random bodies: deliveries,
        // confirms, errors, metadata updates, closes, consumer updates,
        // and responses to the 3.11+ requests.
        _ => {
            let keys = [
                0x0008u16, 0x0003, 0x0004, 0x0010, 0x0016, 0x8009, 0x800d, 0x001a, 0x8018, 0x8019, 0x801b,
                0x801c,
            ];
            let key = keys[(rng.next() % keys.len() as u64) as usize];
            let len = (rng.next() % 80) as usize;
            frame(key, &rng.bytes(len))
        }
    }
}

/// Read one client frame: (key, correlation id if it has one).
async fn request(s: &mut TcpStream) -> Option<(u16, u32)> {
    let size = s.read_u32().await.ok()? as usize;
    let mut f = vec![0u8; size.min(1 << 20)];
    s.read_exact(&mut f).await.ok()?;
    let key = u16::from_be_bytes([f[0], f[1]]);
    let id = if f.len() >= 8 {
        u32::from_be_bytes([f[4], f[5], f[6], f[7]])
    } else {
        0
    };
    Some((key, id))
}

/// One connection: the opening, then case `n`'s garbage, then close.
async fn serve(mut s: TcpStream, n: u64) {
    let empty_map = 0i32.to_be_bytes();
    loop {
        let Some((key, id)) = request(&mut s).await else {
            return;
        };
        if let Some(reply) = opening(key, id) {
            if s.write_all(&reply).await.is_err() {
                return;
            }
            continue;
        }
        if key == 0x0015 {
            let mut r = ok(key, id, &empty_map);
            r.extend(garbage(n));
            let _ = s.write_all(&r).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        return;
    }
}

#[tokio::test]
async fn garbage_after_the_opening_ends_requests_with_errors_not_panics_or_hangs() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let case = Arc::new(AtomicU64::new(0));
    let c = case.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let n = c.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(serve(s, n));
        }
    });
    let uri = format!("rabbitmq-stream://guest:guest@127.0.0.1:{port}/%2f");
    let (mut errors, mut answers) = (0, 0);
    for _ in 0..200 {
        let Ok(env) = tokio::time::timeout(Duration::from_secs(5), Environment::connect(&uri))
            .await
            .expect("connecting does not hang")
        else {
            errors += 1;
            continue;
        };
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            env.create_stream("s", &StreamOptions::default()),
        )
        .await
        .expect("a request on a broken connection does not hang");
        match r {
            Ok(()) => answers += 1,
            Err(_) => errors += 1,
        }
        env.close().await;
    }
    assert!(errors > 150, "{errors} errors, {answers} answers");
    assert!(case.load(Ordering::Relaxed) >= 200);
}
