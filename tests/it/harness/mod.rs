//! The one test harness. What lives where:
//!
//! - **Here** is what more than one test module uses; a helper one module needs lives in
//!   that module (or its folder's `mod.rs`), and moves here when a second module needs it.
//! - [`app`] starts the service in-process ([`TestApp`], [`Backend`], fresh databases) and
//!   defines `backend_tests!`; [`child`] runs the real binary (and a private Redis) as child
//!   processes for fault tests, on a [`fixture`]'s database.
//! - [`client`] is how tests speak HTTP: [`OpClient`] (raw `(status, JSON)` calls for wire
//!   shapes and bad input, typed calls over the contract DTOs for flows); [`wait`] is every
//!   wait — one long-poll for operations, one deadline-bounded poll for other conditions.
//! - [`db`] and [`insights`] reach the database directly (seeding, rows the API does not
//!   show); [`jwt`] mints gateway tokens; [`fake_responses`] fakes the Responses provider;
//!   [`prometheus`] reads a `/metrics` page.
//!
//! Process-wide state: every test runs in this one process, so state the service keeps in
//! statics is shared by every in-process app. The Prometheus recorder is global: tests that
//! assert a counter's value or delta read it from a child process's `/metrics` (its own
//! recorder), never from an in-process app; in-process tests only check that a series
//! exists after their own request made it, which no concurrent test can undo. The
//! long-poll watchers (`context_ops::changes`) are keyed by operation id (a fresh
//! ULID per operation), so another app's notifications wake only the watchers of the
//! operation that changed. The Responses client's connection pool is shared too, but each
//! test's fake provider listens on a port of its own, so no connection serves two tests.

#[macro_use]
pub mod app;
pub mod child;
pub mod client;
pub mod db;
pub mod fake_responses;
pub mod fixture;
pub mod insights;
pub mod jwt;
pub mod prometheus;
pub mod wait;

pub use app::{Backend, TestApp, fresh_database, fresh_linguistic_database, redis_url, unique};
pub use client::{OpClient, OperationExt, assert_api_error, message, read};
