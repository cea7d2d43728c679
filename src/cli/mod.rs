//! `context-ops op …`: the command-line client of a running service.

pub mod sse;
