//! Resource alarms, as RabbitMQ has them: memory above its high watermark,
//! or free disk below its limit. While either is on, connections that
//! publish are blocked (they stop being read); consumers go on, so queues
//! can drain. Each change of state is logged once. In a cluster an alarm
//! is cluster-wide, as RabbitMQ's: another node's alarm, reported over the
//! links, blocks this node's publishers too.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Debug)]
pub struct Alarms {
    memory_limit: AtomicU64,
    disk_free_limit: AtomicU64,
    memory: AtomicBool,
    disk: AtomicBool,
    /// Some other running node of the cluster has its memory (disk)
    /// alarm on.
    remote_memory: AtomicBool,
    remote_disk: AtomicBool,
}

impl Alarms {
    pub fn new(memory_limit: u64, disk_free_limit: u64) -> Alarms {
        Alarms {
            memory_limit: AtomicU64::new(memory_limit),
            disk_free_limit: AtomicU64::new(disk_free_limit),
            memory: AtomicBool::new(false),
            disk: AtomicBool::new(false),
            remote_memory: AtomicBool::new(false),
            remote_disk: AtomicBool::new(false),
        }
    }

    /// Re-evaluate the memory alarm for `used` bytes; returns whether it is on.
    pub fn check_memory(&self, used: u64) -> bool {
        let limit = self.memory_limit.load(Ordering::Relaxed);
        let on = used >= limit;
        if self.memory.swap(on, Ordering::Relaxed) != on {
            if on {
                tracing::warn!("memory resource limit alarm set: {used} bytes used, limit {limit}; publishers are blocked");
            } else {
                tracing::info!("memory resource limit alarm cleared: {used} bytes used, limit {limit}");
            }
        }
        on
    }

    /// Re-evaluate the disk alarm for `free` bytes on the data directory's
    /// file system.
    pub fn check_disk(&self, free: u64) -> bool {
        let limit = self.disk_free_limit.load(Ordering::Relaxed);
        let on = free < limit;
        if self.disk.swap(on, Ordering::Relaxed) != on {
            if on {
                tracing::warn!(
                    "disk resource limit alarm set: {free} bytes free, limit {limit}; publishers are blocked"
                );
            } else {
                tracing::info!("disk resource limit alarm cleared: {free} bytes free, limit {limit}");
            }
        }
        on
    }

    /// Why publishers are blocked, if they are (the reason
    /// connection.blocked carries).
    pub fn blocked_reason(&self) -> Option<&'static str> {
        if self.memory.load(Ordering::Relaxed) || self.remote_memory.load(Ordering::Relaxed) {
            Some("low on memory")
        } else if self.disk.load(Ordering::Relaxed) || self.remote_disk.load(Ordering::Relaxed) {
            Some("low on disk")
        } else {
            None
        }
    }

    /// Other nodes' alarms, as their links last reported them.
    pub fn set_remote(&self, memory: bool, disk: bool) {
        let was = (
            self.remote_memory.swap(memory, Ordering::Relaxed),
            self.remote_disk.swap(disk, Ordering::Relaxed),
        );
        if was != (memory, disk) {
            tracing::info!(memory, disk, "alarms of other cluster nodes changed");
        }
    }

    /// Is this node's memory alarm on?
    pub fn memory_alarm(&self) -> bool {
        self.memory.load(Ordering::Relaxed)
    }

    /// Is the disk alarm on?
    pub fn disk_alarm(&self) -> bool {
        self.disk.load(Ordering::Relaxed)
    }

    pub fn memory_limit(&self) -> u64 {
        self.memory_limit.load(Ordering::Relaxed)
    }

    /// Change the memory high watermark at run time (rabbitmqctl
    /// set_vm_memory_high_watermark); takes effect at the next check.
    pub fn set_memory_limit(&self, bytes: u64) {
        self.memory_limit.store(bytes, Ordering::Relaxed);
    }

    pub fn disk_free_limit(&self) -> u64 {
        self.disk_free_limit.load(Ordering::Relaxed)
    }

    /// Change the disk free limit at run time (rabbitmqctl set_disk_free_limit).
    pub fn set_disk_free_limit(&self, bytes: u64) {
        self.disk_free_limit.store(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarms_set_and_clear() {
        let a = Alarms::new(100, 50);
        assert!(!a.check_memory(99));
        assert_eq!(a.blocked_reason(), None);
        assert!(a.check_memory(100));
        assert_eq!(a.blocked_reason(), Some("low on memory"));
        a.set_memory_limit(1000);
        assert!(!a.check_memory(100));
        assert!(a.check_disk(10));
        assert_eq!(a.blocked_reason(), Some("low on disk"));
        assert!(!a.check_disk(50));
        assert_eq!(a.blocked_reason(), None);
    }
}
