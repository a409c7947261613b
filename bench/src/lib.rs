//! Shared helpers of the benchmark binaries in `src/bin/`: medians, CPU time, quiet
//! peer-tool runs.

use std::process::{Command, Stdio};
use std::time::Duration;

/// Returns the median of the samples (the upper median for an even count).
pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Returns the CPU time (user + system) this process has used, in seconds.
pub fn cpu_seconds() -> f64 {
    // Fields 14 and 15 of /proc/self/stat are utime and stime in clock ticks (USER_HZ = 100).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Runs a peer tool with its output discarded; panics with its stderr if it fails.
pub fn run_quiet(command: &mut Command) {
    run_quiet_keeping_stdout(command.stdout(Stdio::null()));
}

/// Runs a tool whose stdout the caller has set up (a file, say); panics with its
/// stderr if it fails.
pub fn run_quiet_keeping_stdout(command: &mut Command) {
    let output = command
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_picks_the_middle() {
        let ms = Duration::from_millis;
        assert_eq!(median(vec![ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(median(vec![]), Duration::ZERO);
    }
}
