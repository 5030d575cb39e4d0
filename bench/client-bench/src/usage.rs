//! This process's CPU time and context switches (getrusage), so each run
//! reports its cost per message beside its rate.

use std::time::Duration;

pub struct Usage {
    pub cpu: Duration,
    pub context_switches: u64,
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
    }
}

impl Usage {
    pub fn since(&self, before: &Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(before.cpu),
            context_switches: self.context_switches.saturating_sub(before.context_switches),
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
