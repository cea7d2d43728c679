//! Context entries ("insights"), recall and the index watermark, as the contract shapes them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ContextInsightStatus {
    Active,
    Corrected,
    Merged,
    Expired,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ContextInsightKind {
    Fact,
    Preference,
    Decision,
    Task,
    Summary,
    Custom,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextProvenance {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub conversation_id: String,
    #[serde(default)]
    pub message_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extractor_ref: Option<String>,
    #[serde(default)]
    pub observed_at_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContextInsight {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub id: String,
    pub kind: ContextInsightKind,
    pub content: Value,
    #[serde(default)]
    pub attributes: Value,
    pub version: u64,
    pub status: ContextInsightStatus,
    pub provenance: ContextProvenance,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PutContextInsightRequest {
    pub entry: ContextInsight,
    #[serde(default)]
    pub expected_version: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetContextInsightRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub entry_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CorrectContextInsightRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub entry_id: String,
    pub expected_version: u64,
    pub content: Value,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpireContextInsightRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::ResourceId))]
    pub entry_id: String,
    pub expected_version: u64,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MergeContextInsightsRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<crate::contract::schema::ResourceId>))]
    pub source_entry_ids: Vec<String>,
    pub merged_entry: ContextInsight,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, crate::contract::schema::EntryVersion>))]
    pub expected_versions: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecallContextRequest {
    pub query: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default = "default_recall_limit")]
    pub limit: usize,
    #[serde(default = "default_lexical_weight")]
    pub lexical_weight: f64,
    #[serde(default = "default_vector_weight")]
    pub vector_weight: f64,
}

fn default_recall_limit() -> usize {
    20
}
fn default_lexical_weight() -> f64 {
    0.35
}
fn default_vector_weight() -> f64 {
    0.65
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RecallScoreBreakdown {
    pub lexical: f64,
    pub vector: f64,
    pub recency: f64,
    pub final_score: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RecalledContext {
    pub entry: ContextInsight,
    pub score: RecallScoreBreakdown,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct IndexWatermark {
    pub projected_version: u64,
    pub source_version: u64,
    pub lag: u64,
    pub updated_at_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RecallContextResponse {
    pub items: Vec<RecalledContext>,
    pub index_watermark: IndexWatermark,
}
