//! How an operation reads on the contract's own paths. This service has more kinds
//! (`retention`, `inference`) and one more state (`cancelled`) than the contract's
//! `ContextOperationKind` and `ContextOperationState` can hold, so a contract client would
//! fail to parse them. On the contract's paths an operation is shown in the contract's
//! vocabulary; the REST forms (`GET …/operations/{id}`, `…/wait`, `…/cancel`, `…/retry`,
//! listings, events) and this service's own paths keep the full one.
//!
//! | full | contract form |
//! |---|---|
//! | kind `retention` | kind `delete` (it deletes messages); `conversations/retention` answers a `DeletionOperation`, like `conversations/delete` |
//! | kind `inference` | kind `import` (it brings a record — the reply — in) |
//! | state `cancelled` | state `failed`, `errorCode: "cancelled"`, `error` saying so |
//!
//! Everything else (phase, progress, result, the other codes) is the same in both.

use super::ErrorCode;
use crate::contract::{
    ContextOperation, ContextOperationKind as Kind, ContextOperationState as State, DeletionOperation,
};

const CANCELLED_ERROR: &str = "the operation was cancelled";

/// The contract's kind for `kind`.
pub fn contract_kind(kind: Kind) -> Kind {
    match kind {
        Kind::Retention => Kind::Delete,
        Kind::Inference => Kind::Import,
        contract => contract,
    }
}

/// The contract's state for `state`.
pub fn contract_state(state: State) -> State {
    match state {
        State::Cancelled => State::Failed,
        contract => contract,
    }
}

/// `op` in the contract's vocabulary.
pub fn contract_form(mut op: ContextOperation) -> ContextOperation {
    op.kind = contract_kind(op.kind);
    if op.state == State::Cancelled {
        op.state = contract_state(op.state);
        op.error_code = Some(ErrorCode::Cancelled.as_str().to_string());
        op.error.get_or_insert_with(|| CANCELLED_ERROR.to_string());
    }
    op
}

/// `op` as the contract's `DeletionOperation` (the answer of `conversations/delete` and
/// `conversations/retention`), in the contract's vocabulary.
pub fn deletion_form(op: ContextOperation) -> DeletionOperation {
    let op = contract_form(op);
    DeletionOperation {
        id: op.id,
        state: op.state.as_str().to_string(),
        deleted_messages: op.processed,
        created_at_ms: op.created_at_ms,
        next_poll_after_ms: op.next_poll_after_ms,
        error_code: op.error_code,
    }
}

/// The OpenAPI schemas of the contract vocabulary, computed from the mapping above so the
/// document cannot drift from it: [`schema::ContractOperationKind`],
/// [`schema::ContractOperationState`] and [`schema::ContractOperation`] (a
/// `ContextOperation` whose `kind` and `state` take only the contract's values).
#[cfg(feature = "openapi")]
pub mod schema {
    use std::borrow::Cow;

    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    use utoipa::openapi::{Ref, RefOr};
    use utoipa::{PartialSchema, ToSchema};

    use super::{Kind, State, contract_kind, contract_state};
    use crate::contract::ContextOperation;

    fn vocabulary<T: Copy + PartialEq>(all: &[T], map: fn(T) -> T, word: fn(T) -> &'static str) -> Vec<&'static str> {
        let mut words = Vec::new();
        for shown in all.iter().map(|v| map(*v)) {
            if !words.contains(&word(shown)) {
                words.push(word(shown));
            }
        }
        words
    }

    fn string_enum(description: &str, words: Vec<&'static str>) -> RefOr<Schema> {
        ObjectBuilder::new().schema_type(Type::String).description(Some(description)).enum_values(Some(words)).into()
    }

    /// The contract's operation kinds: what a contract path shows for each kind.
    pub struct ContractOperationKind;

    impl PartialSchema for ContractOperationKind {
        fn schema() -> RefOr<Schema> {
            string_enum(
                "An operation kind in the contract's vocabulary (retention shows as delete, inference as import).",
                vocabulary(&Kind::ALL, contract_kind, Kind::as_str),
            )
        }
    }

    impl ToSchema for ContractOperationKind {}

    /// The contract's operation states: what a contract path shows for each state.
    pub struct ContractOperationState;

    impl PartialSchema for ContractOperationState {
        fn schema() -> RefOr<Schema> {
            string_enum(
                "An operation state in the contract's vocabulary (cancelled shows as failed with errorCode \"cancelled\").",
                vocabulary(&State::ALL, contract_state, State::as_str),
            )
        }
    }

    impl ToSchema for ContractOperationState {}

    /// `ContextOperation` as a contract path shows it.
    pub struct ContractOperation;

    impl PartialSchema for ContractOperation {
        fn schema() -> RefOr<Schema> {
            let RefOr::T(Schema::Object(mut object)) = ContextOperation::schema() else {
                unreachable!("ContextOperation is an object schema")
            };
            object.properties.insert("kind".into(), Ref::from_schema_name(ContractOperationKind::name()).into());
            object.properties.insert("state".into(), Ref::from_schema_name(ContractOperationState::name()).into());
            object.description = Some("An operation in the contract's vocabulary (the contract's own paths).".into());
            object.into()
        }
    }

    impl ToSchema for ContractOperation {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("ContractOperation")
        }

        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            for (name, schema) in [
                (ContractOperationKind::name(), ContractOperationKind::schema()),
                (ContractOperationState::name(), ContractOperationState::schema()),
            ] {
                schemas.push((name.into_owned(), schema));
            }
            <ContextOperation as ToSchema>::schemas(schemas);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: Kind, state: State) -> ContextOperation {
        ContextOperation {
            id: "01ARZ3NDEKTSV4RRFFQ69G5FAV".into(),
            kind,
            state,
            phase: "cancelled".into(),
            processed: 3,
            total: 9,
            artifact_ref: None,
            result: Some(serde_json::json!({"deletedMessages": 3})),
            error: None,
            error_code: None,
            created_at_ms: 1,
            updated_at_ms: 2,
            version: 4,
            next_poll_after_ms: None,
        }
    }

    #[test]
    fn only_the_contracts_words_remain() {
        for kind in Kind::ALL {
            for state in State::ALL {
                let shown = contract_form(op(kind, state));
                assert!(!matches!(shown.kind, Kind::Retention | Kind::Inference), "{shown:?}");
                assert_ne!(shown.state, State::Cancelled);
                let deletion = deletion_form(op(kind, state));
                assert_ne!(deletion.state, "cancelled");
            }
        }
        let cancelled = contract_form(op(Kind::Retention, State::Cancelled));
        assert_eq!((cancelled.kind, cancelled.state), (Kind::Delete, State::Failed));
        assert_eq!(cancelled.error_code.as_deref(), Some("cancelled"));
        assert_eq!(cancelled.result, Some(serde_json::json!({"deletedMessages": 3})), "counts so far stay");
        let deletion = deletion_form(op(Kind::Delete, State::Cancelled));
        assert_eq!((deletion.state.as_str(), deletion.deleted_messages), ("failed", 3));
        assert_eq!(contract_form(op(Kind::Export, State::Running)), op(Kind::Export, State::Running));
        assert_eq!(contract_kind(Kind::Inference), Kind::Import);
    }
}
