//! The machine's CPU time, every process together, for the benches that print CPU per item
//! beside their rates (shared by `operations` and `append`).

use std::time::Duration;

/// The machine's busy CPU time so far, every process together (user, nice, system, irq,
/// softirq from `/proc/stat`; not idle, iowait or steal): on a shared host whose steal
/// moves wall-clock rates by 2x between runs, CPU spent per operation is the steadier
/// figure. `None` where `/proc/stat` is not there.
pub fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).map_while(|f| f.parse().ok()).collect();
    let [user, nice, system, _idle, _iowait, irq, softirq, ..] = fields[..] else { return None };
    // USER_HZ is 100 on every Linux the bench runs on.
    Some(Duration::from_millis((user + nice + system + irq + softirq) * 10))
}

/// CPU time per item between two [`machine_busy`] readings, in milliseconds.
pub fn cpu_ms_per(before: Option<Duration>, after: Option<Duration>, items: usize) -> Option<f64> {
    Some((after?.checked_sub(before?)?).as_secs_f64() * 1000.0 / items.max(1) as f64)
}
