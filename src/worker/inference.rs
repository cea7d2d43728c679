//! The `inference` job. (Being built: see the issue for this kind.)

use serde_json::Value;

use super::{JobCtx, JobError};
use context_jobs::kinds::inference::*;
use context_jobs::operation::error_code;

pub async fn run(ctx: &JobCtx, job: &InferenceJob) -> Result<Value, JobError> {
    let _ = job;
    Err(JobError::permanent(
        error_code::INVALID_REQUEST,
        format!("operations of kind {} are not available in this version", ctx.operation.kind.as_str()),
    ))
}
