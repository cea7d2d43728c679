//! Clients of external model providers. They only move bytes: what goes on the wire
//! and what a reply means are decided by the pure codecs in `context_jobs`.

pub mod responses_client;
