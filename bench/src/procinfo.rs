//! What `/proc` tells about a process (resident memory, CPU time) and about the machine.

use serde::Serialize;

/// Memory of one process, in MiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Memory {
    /// Resident set size now (`VmRSS`).
    pub rss_mb: f64,
    /// Peak resident set size so far (`VmHWM`).
    pub hwm_mb: f64,
    /// Anonymous resident memory now (`RssAnon`: heap, stacks).
    pub anon_mb: f64,
    /// File-backed resident memory now (`RssFile`: the binary's and libraries' pages).
    pub file_mb: f64,
}

/// Reads `VmRSS` and `VmHWM` of `pid`; `None` when the process is gone.
pub fn memory(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Memory {
        rss_mb: status_kib(&status, "VmRSS:")? / 1024.0,
        hwm_mb: status_kib(&status, "VmHWM:")? / 1024.0,
        anon_mb: status_kib(&status, "RssAnon:").unwrap_or(0.0) / 1024.0,
        file_mb: status_kib(&status, "RssFile:").unwrap_or(0.0) / 1024.0,
    })
}

fn status_kib(status: &str, field: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// Returns the user + system CPU time of `pid` in seconds (`/proc/<pid>/stat`), `None` when
/// the process is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields after it are space separated.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name, `state` is field 3; utime and stime are fields 14 and 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// Returns the machine's busy and steal CPU seconds so far, summed over all CPUs (the `cpu`
/// line of `/proc/stat`: busy is everything but idle and iowait).
pub fn machine_cpu_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: f64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4)?;
    let steal = *ticks.get(7)?;
    Some(((total - idle) / clock_ticks(), steal / clock_ticks()))
}

/// The kernel's USER_HZ; 100 on every Linux this runs on (`getconf CLK_TCK`).
fn clock_ticks() -> f64 {
    100.0
}

/// The machine a run happened on.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub nproc: usize,
    /// CPU model name.
    pub cpu: String,
    /// Total memory in MiB.
    pub memory_mb: u64,
    /// Kernel release.
    pub kernel: String,
    /// Operating system (`PRETTY_NAME` of `/etc/os-release`).
    pub os: String,
}

/// Describes this machine.
pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_mb = status_kib(&meminfo, "MemTotal:").map_or(0, |kib| (kib / 1024.0) as u64);
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let os = os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_default();
    Machine {
        nproc: std::thread::available_parallelism().map_or(0, usize::from),
        cpu,
        memory_mb,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        os,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_has_memory_and_cpu_time_and_the_machine_is_described() {
        let me = std::process::id();
        let mem = memory(me).unwrap();
        assert!(mem.rss_mb > 0.0 && mem.hwm_mb >= mem.rss_mb);
        assert!(mem.anon_mb > 0.0 && mem.file_mb > 0.0);
        assert!(mem.anon_mb + mem.file_mb <= mem.rss_mb + 0.01);
        assert!(cpu_seconds(me).unwrap() >= 0.0);
        let (busy, steal) = machine_cpu_seconds().unwrap();
        assert!(busy > 0.0 && steal >= 0.0);
        assert!(memory(u32::MAX).is_none());
        let m = machine();
        assert!(m.nproc >= 1 && m.memory_mb > 0 && !m.kernel.is_empty());
    }
}
