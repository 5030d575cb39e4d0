//! This process's CPU time and context switches (getrusage), so each run
//! reports its cost per message beside its rate; and the broker's CPU
//! time when `CLIENT_BENCH_BROKER_PIDS` names its processes
//! (comma-separated): on two shared cores the broker's cost per message
//! is what bounds how far a cheaper client can pull ahead.

use std::time::Duration;

pub struct Usage {
    pub cpu: Duration,
    pub context_switches: u64,
    /// The broker's processes' CPU time, when they are named.
    pub broker: Option<Duration>,
}

pub fn now() -> Usage {
    of(libc::RUSAGE_SELF)
}

/// The same for this process's children that ended (a client run as a
/// program of its own, such as the Go client's).
pub fn children_now() -> Usage {
    of(libc::RUSAGE_CHILDREN)
}

fn of(who: libc::c_int) -> Usage {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        context_switches: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
        broker: broker_cpu(),
    }
}

/// User and system time of the processes `CLIENT_BENCH_BROKER_PIDS`
/// names (fields 14 and 15 of /proc/PID/stat, in clock ticks).
fn broker_cpu() -> Option<Duration> {
    let pids = std::env::var("CLIENT_BENCH_BROKER_PIDS").ok()?;
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let mut ticks = 0u64;
    for pid in pids.split(',').filter(|p| !p.is_empty()) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces: count from its ')'.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        ticks += f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    }
    Some(Duration::from_micros(ticks * 1_000_000 / hz))
}

impl Usage {
    pub fn since(&self, before: &Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(before.cpu),
            context_switches: self.context_switches.saturating_sub(before.context_switches),
            broker: self.broker.zip(before.broker).map(|(a, b)| a.saturating_sub(b)),
        }
    }
}

/// This process's resident memory in KiB (/proc/self/statm).
pub fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4
}
