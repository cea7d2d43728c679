//! The OpenAPI schemas of the contract's string rules (feature `openapi`), built from the
//! constants that own them so the document states what the validation checks: a resource
//! id ([`super::validate_resource_id`]: 1–191 characters, not blank, no NUL), a message role
//! ([`super::MESSAGE_ROLES`]), and the text of an operation or artifact id (a ULID).

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::{MAX_RESOURCE_ID_CHARS, MESSAGE_ROLES};

/// What `str::trim` removes (Unicode `White_Space`), spelled out: regex engines disagree on
/// what `\s` means, and the document must say exactly what the service refuses.
const WHITE_SPACE: &str = r"\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000";

/// A resource id.
pub struct ResourceId;

impl PartialSchema for ResourceId {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(format!("An id: 1–{MAX_RESOURCE_ID_CHARS} characters, not blank, no NUL.")))
            .min_length(Some(1))
            .max_length(Some(MAX_RESOURCE_ID_CHARS))
            .pattern(Some(format!(r"^[^\x00]*[^\x00{WHITE_SPACE}][^\x00]*$")))
            .into()
    }
}

impl ToSchema for ResourceId {}

/// A version an entry is at (`expectedVersions` of a merge): versions start at 1.
pub struct EntryVersion;

impl PartialSchema for EntryVersion {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Int64)))
            .minimum(Some(1))
            .into()
    }
}

impl ToSchema for EntryVersion {}

/// A message role.
pub struct MessageRole;

impl PartialSchema for MessageRole {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new().schema_type(Type::String).enum_values(Some(MESSAGE_ROLES)).into()
    }
}

impl ToSchema for MessageRole {}

/// The text of an operation or artifact id: a ULID (Crockford base32, either case).
pub struct Ulid;

impl PartialSchema for Ulid {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("A ULID: 26 characters of Crockford base32."))
            .pattern(Some("^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$"))
            .into()
    }
}

impl ToSchema for Ulid {}
