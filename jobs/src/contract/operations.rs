//! Operation-facing contract shapes: the operation resource, deletion and retention
//! requests, maintenance status, export/import requests and artifacts.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ContextInsight, ConversationRecord, ConversationScope, IndexWatermark};

/// Operation kinds: the contract's four plus `retention` and `inference`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ContextOperationKind {
    Delete,
    Export,
    Import,
    RebuildVector,
    Retention,
    Inference,
}

impl ContextOperationKind {
    pub const ALL: [Self; 6] =
        [Self::Delete, Self::Export, Self::Import, Self::RebuildVector, Self::Retention, Self::Inference];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Export => "export",
            Self::Import => "import",
            Self::RebuildVector => "rebuild_vector",
            Self::Retention => "retention",
            Self::Inference => "inference",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Operation states: the contract's four plus `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ContextOperationState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl ContextOperationState {
    pub const ALL: [Self; 5] = [Self::Queued, Self::Running, Self::Succeeded, Self::Failed, Self::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContextOperation {
    pub id: String,
    pub kind: ContextOperationKind,
    pub state: ContextOperationState,
    pub phase: String,
    pub processed: u64,
    pub total: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub artifact_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::kinds::schema::OperationResult))]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub error_code: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub next_poll_after_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetContextOperationRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::Ulid))]
    pub operation_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetentionPolicy {
    pub max_age_days: Option<u32>,
    pub max_messages: Option<u32>,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        Self { max_age_days: Some(90), max_messages: Some(100_000) }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetentionRequest {
    pub scope: ConversationScope,
    #[serde(default)]
    pub policy: RetentionPolicy,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeleteConversationRequest {
    pub scope: ConversationScope,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeletionOperation {
    pub id: String,
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = crate::operation::contract_form::schema::ContractOperationState)
    )]
    pub state: String,
    pub deleted_messages: u64,
    pub created_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub next_poll_after_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub error_code: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContextMaintenanceStatus {
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub projector_last_run_ms: Option<i64>,
    pub projector_processed: u64,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub retention_last_run_ms: Option<i64>,
    pub retention_processed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub index_watermark: Option<IndexWatermark>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportContextRequest {
    #[serde(default)]
    pub include_expired: bool,
    /// Beyond the contract: export only some records (`transfer::ExportFilter`).
    #[serde(default, skip_serializing_if = "super::ExportFilter::is_empty")]
    pub filter: super::ExportFilter,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportContextRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_ref: Option<String>,
    #[serde(default)]
    pub messages: Vec<ConversationRecord>,
    #[serde(default)]
    pub entries: Vec<ContextInsight>,
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub idempotency_key: String,
    /// Beyond the contract: rename conversations on the way in (`transfer::ConversationIdMap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id_map: Option<super::ConversationIdMap>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContextExportArtifact {
    pub id: String,
    pub schema_version: u32,
    pub messages: Vec<ConversationRecord>,
    pub entries: Vec<ContextInsight>,
    pub created_at_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetContextExportArtifactRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::Ulid))]
    pub artifact_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetContextExportArtifactChunkRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::Ulid))]
    pub artifact_id: String,
    #[serde(default)]
    pub offset: u64,
    #[serde(default = "default_artifact_chunk_bytes")]
    pub limit: usize,
}

fn default_artifact_chunk_bytes() -> usize {
    1024 * 1024
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContextExportArtifactChunk {
    pub artifact_id: String,
    pub offset: u64,
    pub data_base64: String,
    pub next_offset: u64,
    pub eof: bool,
    pub digest: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RebuildVectorProjectionRequest {
    #[serde(default)]
    pub force: bool,
}
