//! Facts about the machine a benchmark ran on: load, CPU, peak memory.

use serde::Serialize;

/// The machine, as printed next to every result (the load average matters:
/// numbers taken on a busy machine are only comparable as ratios).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Machine {
    /// CPU model name.
    pub(crate) cpu: String,
    /// Logical cores.
    pub(crate) cores: usize,
    /// 1-, 5- and 15-minute load averages when the run started.
    pub(crate) load_avg: [f64; 3],
}

impl Machine {
    /// Reads the machine facts now.
    pub(crate) fn now() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Self { cpu, cores, load_avg: load_avg() }
    }
}

/// The 1-, 5- and 15-minute load averages (zeros where unavailable).
pub(crate) fn load_avg() -> [f64; 3] {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    parse_load_avg(&s)
}

fn parse_load_avg(s: &str) -> [f64; 3] {
    let mut out = [0.0; 3];
    for (o, f) in out.iter_mut().zip(s.split_whitespace()) {
        *o = f.parse().unwrap_or(0.0);
    }
    out
}

/// Peak resident memory of this process in MiB (`VmHWM`), if known.
pub(crate) fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kib(&s, "VmHWM:").map(|kib| kib as f64 / 1024.0)
}

/// Resets the peak-RSS mark to the current RSS (Linux `clear_refs` 5), so
/// each configuration reports its own peak. Best effort.
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.trim_start_matches(key).split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_formats() {
        assert_eq!(parse_load_avg("4.66 5.46 6.91 7/131 2598\n"), [4.66, 5.46, 6.91]);
        assert_eq!(parse_load_avg(""), [0.0; 3]);
        let status = "Name:\tkiln\nVmPeak:\t  100 kB\nVmHWM:\t   2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(2048));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn peak_rss_is_readable_here() {
        let p = peak_rss_mib().unwrap_or(0.0);
        assert!(p > 0.0, "VmHWM should be readable on Linux");
    }
}
