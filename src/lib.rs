//! context-ops: the imperative shell. Configuration, the database, the HTTP API, the
//! queue and the workers, wired around the pure core in `context-jobs`.

pub mod api;
pub mod app;
pub mod auth;
pub mod config;
pub mod db;
pub mod embedder;
pub mod error;
pub mod metrics;
pub mod nodelay;
pub mod provider;
pub mod queue;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod worker;
