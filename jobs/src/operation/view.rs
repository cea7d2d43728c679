//! The operation resource as this service shows it: the contract's `ContextOperation`
//! (every field a contract client reads, in the contract's places) and, beside them, the
//! scheduling and attempt details the contract does not have. Contract clients ignore the
//! extra fields.

use serde::{Deserialize, Serialize};

use crate::contract::ContextOperation;

/// One finished attempt of an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    pub attempt: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: i64,
    /// `succeeded`, `failed`, `cancelled`, `retrying`, `released`, `paused`, `lease_expired`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub error: Option<String>,
    /// The worker process that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub worker: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct OperationView {
    #[serde(flatten)]
    pub operation: ContextOperation,
    pub priority: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub deadline_ms: Option<i64>,
    /// A scheduled start (`notBeforeMs`), or a retry's backoff, while it is in the future.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub not_before_ms: Option<i64>,
    /// The current (or last) attempt, 1-based; 0 before the first start.
    pub attempt: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub started_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub finished_at_ms: Option<i64>,
    /// The worker process holding the lease while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub lease_owner: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_requested: bool,
    /// Finished attempts, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptRecord>,
    /// The owning tenant (`tenantId/projectId`): an admin's listings span tenants.
    pub tenant: String,
}

/// A page of operations (`GET …/operations`), newest first; `nextCursor` while more remain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct OperationList {
    pub items: Vec<OperationView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub next_cursor: Option<String>,
}
