//! What each operation kind *is*, one file per kind: the stored arguments, the checkpoint
//! a resumed run continues from, the typed result, and the validation of a submission.
//! [`OperationRequest`] is the union of every kind's arguments: the operation's stored
//! `request` and the source of its idempotency fingerprint. The shell's runner of each
//! kind implements its job over these types (`src/kinds/`).
//!
//! Adding a kind: a file here (implementing [`Kind`]), a variant of [`OperationRequest`]
//! and of `ContextOperationKind`, and its runner in the shell's dispatch table.

pub mod delete;
pub mod export;
pub mod import;
pub mod inference;
pub mod rebuild_vector;
pub mod retention;
pub mod shown;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contract::ContextOperationKind;

/// One operation kind's pure part.
pub trait Kind: 'static {
    const KIND: ContextOperationKind;
    /// The body a caller submits (the kind's own endpoint body, and the `request` of a
    /// generic `advanced-operations` submission).
    type Submission: DeserializeOwned + Send;
    /// What is stored as the operation's request.
    type Args: Serialize + DeserializeOwned + Clone + Send + Sync;
    /// Where a resumed run continues (serialized into the operation's `checkpoint`).
    type Checkpoint: Serialize + DeserializeOwned + Send;
    /// The operation's `result` when it succeeds.
    type Output: Serialize + DeserializeOwned + Send;

    /// Whether a retry of a failed or cancelled operation resumes from its checkpoint
    /// (else it starts over).
    const RESUMABLE: bool = true;

    fn wrap(args: Self::Args) -> OperationRequest;
    fn unwrap(request: OperationRequest) -> Option<Self::Args>;
}

/// Why a submission is refused before anything is stored: a 400, or a 413 for a record
/// over a size limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    TooLarge(String),
}

impl From<String> for Rejection {
    fn from(message: String) -> Self {
        Rejection::Invalid(message)
    }
}

impl From<&str> for Rejection {
    fn from(message: &str) -> Self {
        Rejection::Invalid(message.to_string())
    }
}

/// What a submitted operation asks for, tagged by kind. Stored as the operation's
/// `request`; its serialized form is fixed (stored rows and idempotency fingerprints
/// depend on it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OperationRequest {
    Delete(delete::DeleteArgs),
    Retention(retention::RetentionArgs),
    RebuildVector(rebuild_vector::RebuildVectorArgs),
    Export(export::ExportArgs),
    Import(import::ImportArgs),
    Inference(inference::InferenceJob),
}

impl OperationRequest {
    pub fn kind(&self) -> ContextOperationKind {
        match self {
            Self::Delete(_) => ContextOperationKind::Delete,
            Self::Retention(_) => ContextOperationKind::Retention,
            Self::RebuildVector(_) => ContextOperationKind::RebuildVector,
            Self::Export(_) => ContextOperationKind::Export,
            Self::Import(_) => ContextOperationKind::Import,
            Self::Inference(_) => ContextOperationKind::Inference,
        }
    }

    /// A stable digest of the request: the same request always gives the same value,
    /// different requests differ.
    pub fn fingerprint(&self) -> String {
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        format!("sha256:{}", hex(&Sha256::digest(&canonical)))
    }

    /// The digest an idempotency key is checked against: the request and its scheduling
    /// options as given (no options: exactly [`Self::fingerprint`], as rows stored before
    /// options existed hold).
    pub fn fingerprint_with(&self, options: &crate::operation::SubmitOptions) -> String {
        if *options == crate::operation::SubmitOptions::default() {
            return self.fingerprint();
        }
        let canonical =
            serde_json::to_vec(&serde_json::json!({"request": self, "options": options})).unwrap_or_default();
        format!("sha256:{}", hex(&Sha256::digest(&canonical)))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

/// Implements [`Kind::wrap`] / [`Kind::unwrap`] for the variant holding the kind's args.
macro_rules! request_variant {
    ($variant:ident) => {
        fn wrap(args: Self::Args) -> $crate::kinds::OperationRequest {
            $crate::kinds::OperationRequest::$variant(args)
        }
        fn unwrap(request: $crate::kinds::OperationRequest) -> Option<Self::Args> {
            match request {
                $crate::kinds::OperationRequest::$variant(args) => Some(args),
                _ => None,
            }
        }
    };
}
pub(crate) use request_variant;

/// The schema of an operation's `result` (feature `openapi`): its kind's [`Kind::Output`].
#[cfg(feature = "openapi")]
pub mod schema {
    use utoipa::openapi::schema::{AnyOfBuilder, Schema};
    use utoipa::openapi::{Ref, RefOr};
    use utoipa::{PartialSchema, ToSchema};

    use super::{Kind, delete, export, import, inference, rebuild_vector, retention};
    use crate::contract::ContextOperationKind;

    type Schemas = Vec<(String, RefOr<Schema>)>;

    /// The output schema of `kind` (a match, so a new kind cannot be left out).
    fn output(kind: ContextOperationKind) -> (String, fn(&mut Schemas)) {
        fn of<K: Kind>() -> (String, fn(&mut Schemas))
        where
            K::Output: ToSchema,
        {
            (K::Output::name().into_owned(), |schemas| {
                K::Output::schemas(schemas);
                schemas.push((K::Output::name().into_owned(), K::Output::schema()));
            })
        }
        match kind {
            ContextOperationKind::Delete => of::<delete::Delete>(),
            ContextOperationKind::Retention => of::<retention::Retention>(),
            ContextOperationKind::Export => of::<export::Export>(),
            ContextOperationKind::Import => of::<import::Import>(),
            ContextOperationKind::RebuildVector => of::<rebuild_vector::RebuildVector>(),
            ContextOperationKind::Inference => of::<inference::Inference>(),
        }
    }

    /// An operation's `result`: the kind's result once it succeeded, and for a cancelled
    /// `delete` or `retention` what it did so far.
    pub struct OperationResult;

    impl PartialSchema for OperationResult {
        fn schema() -> RefOr<Schema> {
            let mut any_of = AnyOfBuilder::new().description(Some(
                "The kind's result: once it succeeded, and for a cancelled delete or retention what it removed so far.",
            ));
            for kind in ContextOperationKind::ALL {
                any_of = any_of.item(Ref::from_schema_name(output(kind).0));
            }
            any_of.into()
        }
    }

    impl ToSchema for OperationResult {
        fn schemas(schemas: &mut Schemas) {
            for kind in ContextOperationKind::ALL {
                (output(kind).1)(schemas);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_is_stable_and_discriminating() {
        let a = OperationRequest::Delete(delete::DeleteArgs { conversation_id: "c".into(), reason: String::new() });
        let b = OperationRequest::Delete(delete::DeleteArgs { conversation_id: "d".into(), reason: String::new() });
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert!(a.fingerprint().starts_with("sha256:"));
        let json: OperationRequest = serde_json::from_value(serde_json::to_value(&a).unwrap()).unwrap();
        assert_eq!(json, a);
    }

    /// The stored form of every kind, as rows written before this layout hold it: these
    /// bytes (and so every idempotency fingerprint) must never change.
    #[test]
    fn stored_requests_keep_their_wire_form() {
        let stored = [
            r#"{"kind":"delete","conversationId":"c","reason":"r"}"#,
            r#"{"kind":"retention","conversationId":"c","policy":{"maxAgeDays":3,"maxMessages":null}}"#,
            r#"{"kind":"rebuild_vector","force":true}"#,
            r#"{"kind":"export","includeExpired":false}"#,
            r#"{"kind":"import","artifactRef":"01ARZ3NDEKTSV4RRFFQ69G5FAV","messages":[],"entries":[]}"#,
        ];
        for text in stored {
            let request: OperationRequest = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&request).unwrap(), text);
        }
        // The fingerprint is the digest of exactly those bytes.
        let delete: OperationRequest = serde_json::from_str(stored[0]).unwrap();
        assert_eq!(delete.fingerprint(), format!("sha256:{}", hex(&Sha256::digest(stored[0].as_bytes()))));
    }
}
