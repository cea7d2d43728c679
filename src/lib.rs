//! context-ops: the imperative shell around the pure core in `context-jobs`.
//!
//! - [`http`] — the HTTP edge: router, auth, errors, one handler file per resource.
//! - [`kinds`] — each operation kind's submission checks and job, and the dispatch table.
//! - [`worker`] — the runner (claim, lease, run, the machine's decision), dispatcher,
//!   projector and retention sweep.
//! - [`store`] — every SQL statement, both engines.
//! - [`queue`] — the apalis delivery pipe (Redis or SQLite).
//! - [`changes`], [`events`] — change notifications; event streams of operation changes.
//! - [`recall`], [`embedder`], [`provider`] — hybrid recall, the vector embedder, the
//!   Responses client.
//! - [`ui`] — the operator dashboard's embedded files (`/ui`).
//! - [`config`], [`metrics`], [`server`], [`telemetry`] — wiring; [`tcp`] — the TCP
//!   options of every connection to PostgreSQL and Redis.
//!
//! See `docs/architecture.md` for the map and the path of an operation.

pub mod changes;
pub mod cli;
pub mod config;
pub mod embedder;
pub mod events;
pub mod http;
pub mod kinds;
pub mod metrics;
pub mod provider;
pub mod queue;
pub mod ratelimit;
pub mod recall;
pub mod server;
pub mod store;
pub mod tcp;
pub mod telemetry;
pub mod ui;
pub mod worker;
