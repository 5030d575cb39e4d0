//! The disk alarm's monitor: checks the free space of the data directory's
//! file system every second (RabbitMQ checks at a similar pace) and sets or
//! clears the broker's disk alarm.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use warren_core::Broker;

const PERIOD: Duration = Duration::from_secs(1);

/// Bytes available to an unprivileged writer on `path`'s file system.
pub fn disk_free(path: &Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we pass; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (r == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// Check once now (so an alarm holds from the first connection on).
pub fn check(broker: &Broker, dir: &Path) {
    if let Some(free) = disk_free(dir) {
        broker.alarms.check_disk(free);
    }
}

pub fn spawn(broker: Arc<Broker>, dir: PathBuf, mut shutdown: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PERIOD);
        loop {
            tokio::select! {
                _ = tick.tick() => check(&broker, &dir),
                _ = shutdown.changed() => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_free_space() {
        let free = super::disk_free(&std::env::temp_dir()).expect("statvfs works");
        assert!(free > 0);
        assert!(super::disk_free(std::path::Path::new("/no/such/dir")).is_none());
    }
}
