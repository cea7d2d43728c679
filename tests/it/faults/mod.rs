//! Fault tests on the real binary: `context-ops` runs as child processes that are killed
//! (SIGKILL, `sigkill`, `orphan`, `dead_cancel`), frozen (SIGSTOP/SIGCONT, `fencing`) and left without
//! their Redis (`redis_restart`), and the operation protocol (DESIGN.md §4) must still end
//! every operation exactly once — the database is the truth, checkpoints commit with their
//! effects, writes are fenced by the lease.
//!
//! Data is seeded with SQL (`generate_series` / a recursive CTE), not over HTTP. Waits use
//! the long-poll endpoint and `/health` with deadlines; the one fixed sleep is explained
//! where it is.

use std::time::Duration;

mod dead_cancel;
mod fencing;
mod orphan;
mod outages;
mod proxy;
mod redis_restart;
mod sigkill;

const LEASE_SECS: u64 = 3;
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);
