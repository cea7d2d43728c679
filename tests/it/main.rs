//! The integration tests: one binary (`cargo test --test it`), one harness
//! ([`harness`]), the real service over real HTTP against both backends (DESIGN.md §7).
//!
//! One module per area. A module that outgrows ~300 lines becomes a folder, split by what
//! its tests exercise, with the helpers only it uses in its `mod.rs`.

#[macro_use]
mod harness;

mod artifacts;
mod auth_tenancy;
mod bad_input;
mod cli;
mod collation;
mod contract_vocabulary;
mod dead_peers;
mod embeddings_provider;
mod engine;
mod engine_faults;
mod entries;
mod events;
mod faults;
mod inference;
mod messages;
mod metrics_scrape;
mod observability;
mod openapi;
mod operations;
mod pool;
mod projection_migration;
mod queue;
mod readiness;
mod recall;
mod recall_quality;
mod scheduling;
mod startup;
mod subtransactions;
mod ui;
mod ui_assets;
mod vectors;
