//! The worker side of the operation protocol: the runner that claims an operation, keeps
//! its lease alive, runs its kind's job and writes the machine's decision ([`runner`]);
//! and the loops every worker process runs beside it — the dispatcher and gauges
//! ([`dispatcher`]), the vector projector ([`projector`]) and the retention sweep
//! ([`sweep`]). The jobs themselves, one per kind, and what they are handed, are in
//! `crate::kinds`.

pub mod dispatcher;
pub mod liveness;
pub mod pipelines;
pub mod projector;
pub mod runner;
pub mod sweep;

pub use crate::kinds::job::{Finish, JobCtx, JobError, encode};
