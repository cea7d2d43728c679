//! Wire shapes of the artifact: its header and trailer lines, the tagged line written for
//! each record, and the JSON of the artifact endpoints beyond the contract (metadata,
//! listing, uploads).

use serde::{Deserialize, Serialize};

use crate::contract::{ContextInsight, ConversationRecord};

/// The first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    pub schema_version: u32,
    pub tenant: String,
    pub created_at_ms: i64,
}

impl Header {
    /// The header this build writes.
    pub fn new(tenant: impl Into<String>, created_at_ms: i64) -> Self {
        Self { schema_version: super::SCHEMA_VERSION, tenant: tenant.into(), created_at_ms }
    }
}

/// The last line: how many records of each kind precede it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trailer {
    pub messages: u64,
    pub entries: u64,
}

/// A line as written: `{"type":"…", …fields of the payload…}`.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum LineRef<'a> {
    Header(&'a Header),
    Message(&'a ConversationRecord),
    Entry(&'a ContextInsight),
    Trailer(&'a Trailer),
}

/// A message as the store holds it, its JSON columns (`scope`, `content`, `metadata`) still
/// the text they are stored as: [`crate::artifact::Encoder::stored_message`] writes them
/// through without parsing them into values and serializing them again. Field names, order
/// and omissions are those of [`ConversationRecord`], so when the stored JSON is compact
/// (as every write path stores it) the line is byte for byte the one the record would give
/// (`stored_messages_write_the_record_line` holds the two together).
#[derive(Debug, Clone, Copy)]
pub struct StoredColumns<'a> {
    pub id: &'a str,
    pub scope: &'a str,
    pub role: &'a str,
    pub content: &'a str,
    pub name: Option<&'a str>,
    pub tool_call_id: Option<&'a str>,
    pub sequence: i64,
    pub created_at_ms: i64,
    pub metadata: Option<&'a str>,
}

impl StoredColumns<'_> {
    /// Append the message line (without its newline). Stored JSON is trusted to be JSON
    /// (the import's validation pass reads every line back); what is checked is that it
    /// cannot break the line framing.
    pub(crate) fn write_line(&self, out: &mut Vec<u8>) -> Result<(), String> {
        let json = |out: &mut Vec<u8>, what: &str, text: &str| {
            if text.is_empty() || memchr::memchr2(b'\n', b'\r', text.as_bytes()).is_some() {
                return Err(format!("message {:?} has a stored {what} that is not one-line JSON", self.id));
            }
            out.extend_from_slice(text.as_bytes());
            Ok(())
        };
        let string = |out: &mut Vec<u8>, s: &str| serde_json::to_writer(out, s).map_err(|e| e.to_string());
        out.extend_from_slice(br#"{"type":"message","id":"#);
        string(out, self.id)?;
        out.extend_from_slice(br#","scope":"#);
        json(out, "scope", self.scope)?;
        out.extend_from_slice(br#","role":"#);
        string(out, self.role)?;
        out.extend_from_slice(br#","content":"#);
        json(out, "content", self.content)?;
        if let Some(name) = self.name {
            out.extend_from_slice(br#","name":"#);
            string(out, name)?;
        }
        if let Some(id) = self.tool_call_id {
            out.extend_from_slice(br#","toolCallId":"#);
            string(out, id)?;
        }
        // itoa rather than `write!`: the formatter's machinery was ~4% of an export's CPU.
        let mut number = itoa::Buffer::new();
        out.extend_from_slice(br#","sequence":"#);
        out.extend_from_slice(number.format(self.sequence).as_bytes());
        out.extend_from_slice(br#","createdAtMs":"#);
        out.extend_from_slice(number.format(self.created_at_ms).as_bytes());
        if let Some(metadata) = self.metadata.filter(|m| *m != "null") {
            out.extend_from_slice(br#","metadata":"#);
            json(out, "metadata", metadata)?;
        }
        out.push(b'}');
        Ok(())
    }
}

/// The JSON line of `line`, without its newline (tests and tools build artifacts with it).
pub fn header_line(header: &Header) -> String {
    serde_json::to_string(&LineRef::Header(header)).unwrap_or_default()
}

/// The artifact resource beyond the contract's `export-artifacts/get` and `/chunk`:
/// `GET` lists, `GET`/`DELETE` `{ARTIFACTS_PATH}/{id}` reads metadata or deletes.
pub const ARTIFACTS_PATH: &str = "/internal/v1/context/export-artifacts";
/// `POST {}`: start an upload (201, [`ArtifactInfo`]).
pub const ARTIFACT_UPLOADS_PATH: &str = "/internal/v1/context/export-artifacts/uploads";
/// `POST` [`AppendUploadRequest`]: append bytes at an offset.
pub const ARTIFACT_UPLOAD_CHUNK_PATH: &str = "/internal/v1/context/export-artifacts/uploads/chunk";
/// `POST` [`FinalizeUploadRequest`]: seal with the expected digest.
pub const ARTIFACT_UPLOAD_FINALIZE_PATH: &str = "/internal/v1/context/export-artifacts/uploads/finalize";

/// Where an artifact came from.
pub mod origin {
    pub const EXPORT: &str = "export";
    pub const UPLOAD: &str = "upload";
}

/// Lifecycle of an artifact: an export `writing` it or a client `uploading` it, then
/// `ready` (immutable, downloadable, importable).
pub mod state {
    pub const WRITING: &str = "writing";
    pub const UPLOADING: &str = "uploading";
    pub const READY: &str = "ready";
}

/// An artifact's metadata (`GET …/export-artifacts/{id}`, listings, upload replies).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ArtifactInfo {
    pub id: String,
    pub origin: String,
    pub state: String,
    pub size_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub messages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub entries: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub operation_id: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub expires_at_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ArtifactList {
    pub items: Vec<ArtifactInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    pub next_cursor: Option<String>,
}

/// Append bytes to an upload at `offset` (which must be the bytes received so far).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppendUploadRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::Ulid))]
    pub artifact_id: String,
    pub offset: u64,
    pub data_base64: String,
}

/// Seal an upload: the bytes must hash to `digest`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FinalizeUploadRequest {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::contract::schema::Ulid))]
    pub artifact_id: String,
    pub digest: String,
}
