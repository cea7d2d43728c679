//! The operations engine on the real binary (DESIGN.md §4, §6): a SIGTERM mid-operation
//! releases it at the next batch boundary (no lease to wait out, the attempt not counted)
//! and a new process resumes it from the checkpoint (`sigterm`); the operation gauges of a
//! process count what its database holds (`gauges`); long-polls are answered at shutdown
//! and woken by changes another process commits (`long_polls`).
//!
//! Data is seeded with SQL through the fixture's `Db`. Waits are long-polls and `/health` /
//! `/metrics` polls with deadlines.

use std::time::Duration;

mod gauges;
mod long_polls;
mod sigterm;

/// Long, so that an operation left leased at shutdown would take 15 s to come back: the
/// restart assertion in `sigterm` tells a release from a lease expiry.
const LEASE_SECS: u64 = 15;
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);
