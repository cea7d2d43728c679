//! Every operation kind's shell half, one file (or folder) per kind: what a submission
//! checks against the database and stores beside the row ([`Job::prepare`]), and the job
//! that runs it ([`Job::run`], with no SQL of its own: it calls the store). The pure half —
//! args, checkpoint, result, validation — is the core's `context_jobs::kinds`.
//!
//! [`KINDS`] is the one dispatch table: the runner runs a claimed operation through it,
//! and the generic submission path (`advanced-operations`) prepares a submission through
//! it. Adding a kind: its core file, its file here, and its row in the table.

pub mod delete;
pub mod export;
pub mod import;
pub mod inference;
pub mod job;
pub mod rebuild_vector;
pub mod retention;

use std::future::Future;
use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;

use crate::config::Config;
use crate::store::operations::SubmitEffect;
use crate::store::{Db, StoreError};
use context_jobs::contract::ContextOperationKind;
use context_jobs::ids::TenantKey;
use context_jobs::kinds::{Kind, OperationRequest, Rejection};
use context_jobs::operation::ErrorCode;
use job::{Finish, JobCtx, JobError, encode};

/// What a submission is checked against.
pub struct SubmitCtx<'a> {
    pub db: &'a Db,
    pub tenant: &'a TenantKey,
    pub config: &'a Arc<Config>,
}

/// A submission ready to store.
#[derive(Debug)]
pub struct Prepared {
    pub request: OperationRequest,
    pub effect: SubmitEffect,
    /// An idempotency key the body itself carries (an import's `idempotencyKey`).
    pub idempotency_key: Option<String>,
    /// What rate limits key the operation by (an inference turn's model).
    pub rate_key: Option<String>,
}

impl Prepared {
    pub fn plain<K: Kind>(args: K::Args) -> Self {
        Self { request: K::wrap(args), effect: SubmitEffect::None, idempotency_key: None, rate_key: None }
    }
}

/// Why a submission is refused (mapped to 400/413, 404 and 409 at the HTTP edge).
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Rejected(#[from] Rejection),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<String> for SubmitError {
    fn from(message: String) -> Self {
        SubmitError::Rejected(Rejection::Invalid(message))
    }
}

/// One kind's shell half.
pub trait Job: Kind {
    /// Check a submission (the core's validation, then anything that needs the database)
    /// and say what to store.
    fn prepare(
        ctx: &SubmitCtx<'_>,
        submission: Self::Submission,
    ) -> impl Future<Output = Result<Prepared, SubmitError>> + Send;

    /// What a submission (or a retry) of these args stores beside the row.
    fn effect(_args: &Self::Args) -> SubmitEffect {
        SubmitEffect::None
    }

    /// Run (or resume, from the checkpoint the context holds) one attempt.
    fn run(ctx: &JobCtx, args: Self::Args) -> impl Future<Output = Result<Finish<Self::Output>, JobError>> + Send;

    /// Pool connections a run holds at once: a pipeline's stages each hold one while
    /// waiting on the others. On PostgreSQL a delivery of a kind of more than one waits for
    /// that many of its process's permits before it claims an operation
    /// (`worker::pipelines`), so pipelines never hold part of what they need while waiting
    /// for the rest.
    const CONNECTIONS: u32 = 1;
}

/// Prepare a submission given as JSON (the `request` of `advanced-operations`).
pub type PrepareFn = for<'a> fn(&'a SubmitCtx<'a>, serde_json::Value) -> BoxFuture<'a, Result<Prepared, SubmitError>>;
/// Run a claimed operation; the result as stored JSON.
pub type RunFn = for<'a> fn(&'a JobCtx) -> BoxFuture<'a, Result<Finish<String>, JobError>>;

/// What a retry of a stored request re-takes (a delete's barrier); `None` if it no longer
/// decodes as this kind.
pub type EffectFn = fn(&OperationRequest) -> Option<SubmitEffect>;

/// A kind's row of the dispatch table.
pub struct KindEntry {
    pub kind: ContextOperationKind,
    pub prepare: PrepareFn,
    pub run: RunFn,
    pub effect: EffectFn,
    /// A retry resumes from the checkpoint (else starts over).
    pub resumable: bool,
    /// Pool connections a run holds at once ([`Job::CONNECTIONS`]).
    pub connections: u32,
}

fn prepare_json<'a, J: Job>(
    ctx: &'a SubmitCtx<'a>,
    request: serde_json::Value,
) -> BoxFuture<'a, Result<Prepared, SubmitError>> {
    async move {
        let submission: J::Submission = serde_json::from_value(request)
            .map_err(|e| format!("invalid request for kind {}: {e}", J::KIND.as_str()))?;
        J::prepare(ctx, submission).await
    }
    .boxed()
}

fn run_stored<'a, J: Job>(ctx: &'a JobCtx) -> BoxFuture<'a, Result<Finish<String>, JobError>> {
    async move {
        let request = ctx.operation.request()?;
        let args = J::unwrap(request).ok_or_else(|| {
            JobError::permanent(ErrorCode::CorruptOperation, format!("stored request is not a {}", J::KIND.as_str()))
        })?;
        J::run(ctx, args).await?.try_map(|output| encode(&output))
    }
    .boxed()
}

fn effect_of<J: Job>(request: &OperationRequest) -> Option<SubmitEffect> {
    J::unwrap(request.clone()).map(|args| J::effect(&args))
}

const fn entry<J: Job>() -> KindEntry {
    KindEntry {
        kind: J::KIND,
        prepare: prepare_json::<J>,
        run: run_stored::<J>,
        effect: effect_of::<J>,
        resumable: J::RESUMABLE,
        connections: J::CONNECTIONS,
    }
}

/// The dispatch table, one row per kind.
pub static KINDS: [KindEntry; 6] = [
    entry::<context_jobs::kinds::delete::Delete>(),
    entry::<context_jobs::kinds::retention::Retention>(),
    entry::<context_jobs::kinds::export::Export>(),
    entry::<context_jobs::kinds::import::Import>(),
    entry::<context_jobs::kinds::rebuild_vector::RebuildVector>(),
    entry::<context_jobs::kinds::inference::Inference>(),
];

/// The table row of `kind`.
pub fn entry_of(kind: ContextOperationKind) -> &'static KindEntry {
    KINDS.iter().find(|e| e.kind == kind).expect("every kind has a row in KINDS")
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_kind_has_exactly_one_row() {
        for kind in context_jobs::contract::ContextOperationKind::ALL {
            assert_eq!(super::KINDS.iter().filter(|e| e.kind == kind).count(), 1, "{kind:?}");
        }
    }
}
