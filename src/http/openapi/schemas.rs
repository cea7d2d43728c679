//! Schemas the derives cannot say alone, built from the derived ones so they cannot drift:
//! a kind's submission body (the kind's own request plus the scheduling options every
//! submission may carry at its top level — `crate::http::body::submission` splits them the
//! same way), the generic `advanced-operations` body (one variant per kind), and the
//! operation view in the contract's vocabulary (the contract's own paths).

use std::borrow::Cow;

use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use context_jobs::contract::schema::ResourceId;
use context_jobs::contract::{
    ContextOperationKind, DeleteConversationRequest, ExportContextRequest, ImportContextRequest,
    RebuildVectorProjectionRequest, RetentionRequest,
};
use context_jobs::kinds::inference::InferenceSubmission;
use context_jobs::operation::SubmitOptions;
use context_jobs::operation::contract_form::schema::ContractOperation;
use context_jobs::operation::view::OperationView;

fn object_of(schema: RefOr<Schema>, what: &str) -> utoipa::openapi::schema::Object {
    match schema {
        RefOr::T(Schema::Object(object)) => object,
        _ => panic!("{what} is documented as an object schema"),
    }
}

/// `T`'s properties plus [`SubmitOptions`]'s, unknown fields refused (both refuse them).
fn with_options<T: PartialSchema>(what: &str) -> RefOr<Schema> {
    let mut body = object_of(T::schema(), what);
    let options = object_of(SubmitOptions::schema(), "SubmitOptions");
    body.properties.extend(options.properties);
    body.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
    let own = body.description.take().map(|d| format!("{d}\n\n")).unwrap_or_default();
    body.description = Some(format!(
        "{own}Beside the kind's own fields, any submission may carry its scheduling options at the top level: \
         `priority` (1..=9), `deadlineMs` or `timeoutMs`, `notBeforeMs`."
    ));
    body.into()
}

/// One submission body per kind: `$name` is the kind's request `$body` with the options.
macro_rules! submissions {
    ($($name:ident = $body:ty;)+) => {$(
        #[doc = concat!("`", stringify!($body), "` with the scheduling options.")]
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                with_options::<$body>(stringify!($body))
            }
        }

        impl ToSchema for $name {
            fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
                <$body as ToSchema>::schemas(schemas);
            }
        }
    )+};
}

submissions! {
    SubmitDelete = DeleteConversationRequest;
    SubmitRetention = RetentionRequest;
    SubmitExport = ExportContextRequest;
    SubmitImport = ImportContextRequest;
    SubmitRebuildVector = RebuildVectorProjectionRequest;
    SubmitInference = InferenceSubmission;
}

/// Named schemas, as `ToSchema::schemas` collects them.
type Schemas = Vec<(String, RefOr<Schema>)>;

/// The request a kind's own endpoint takes (the `request` of an `advanced-operations` body):
/// its schema's name, and how to collect the schemas it needs.
fn kind_request(kind: ContextOperationKind) -> (Cow<'static, str>, fn(&mut Schemas)) {
    fn named<T: ToSchema>() -> (Cow<'static, str>, fn(&mut Schemas)) {
        (T::name(), |schemas| {
            T::schemas(schemas);
            schemas.push((T::name().into_owned(), T::schema()));
        })
    }
    match kind {
        ContextOperationKind::Delete => named::<DeleteConversationRequest>(),
        ContextOperationKind::Retention => named::<RetentionRequest>(),
        ContextOperationKind::Export => named::<ExportContextRequest>(),
        ContextOperationKind::Import => named::<ImportContextRequest>(),
        ContextOperationKind::RebuildVector => named::<RebuildVectorProjectionRequest>(),
        ContextOperationKind::Inference => named::<InferenceSubmission>(),
    }
}

/// The body of `POST …/advanced-operations`: `{kind, request, idempotencyKey?}` and the
/// scheduling options, where `request` is what the kind's own endpoint takes.
pub struct AdvancedSubmission;

impl PartialSchema for AdvancedSubmission {
    fn schema() -> RefOr<Schema> {
        let options = object_of(SubmitOptions::schema(), "SubmitOptions");
        let mut one_of = OneOfBuilder::new().description(Some(
            "A submission of any kind: `request` is the body of that kind's own endpoint (without the scheduling \
             options, which sit beside it here). An idempotency key may be given here or as the `Idempotency-Key` \
             header.",
        ));
        for kind in ContextOperationKind::ALL {
            let (request, _) = kind_request(kind);
            let mut variant = ObjectBuilder::new()
                .title(Some(kind.as_str()))
                .property("kind", ObjectBuilder::new().schema_type(Type::String).enum_values(Some([kind.as_str()])))
                .required("kind")
                .property("request", Ref::from_schema_name(request))
                .required("request")
                .property(
                    "idempotencyKey",
                    OneOfBuilder::new()
                        .item(ObjectBuilder::new().schema_type(Type::Null))
                        .item(Ref::from_schema_name(ResourceId::name())),
                )
                .additional_properties(Some(AdditionalProperties::FreeForm(false)));
            for (name, schema) in &options.properties {
                variant = variant.property(name.clone(), schema.clone());
            }
            one_of = one_of.item(variant);
        }
        one_of.into()
    }
}

impl ToSchema for AdvancedSubmission {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((ResourceId::name().into_owned(), ResourceId::schema()));
        for kind in ContextOperationKind::ALL {
            (kind_request(kind).1)(schemas);
        }
    }
}

/// `OperationView` on the contract's paths: the same fields, the contract's vocabulary.
pub struct ContractOperationView;

impl PartialSchema for ContractOperationView {
    fn schema() -> RefOr<Schema> {
        let full = serde_json::to_string(&OperationView::schema()).expect("a schema serializes");
        let contract = full.replace(
            &format!("\"#/components/schemas/{}\"", context_jobs::contract::ContextOperation::name()),
            &format!("\"#/components/schemas/{}\"", ContractOperation::name()),
        );
        assert_ne!(full, contract, "OperationView refers to ContextOperation");
        serde_json::from_str(&contract).expect("a schema deserializes")
    }
}

impl ToSchema for ContractOperationView {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        <OperationView as ToSchema>::schemas(schemas);
        schemas.push((ContractOperation::name().into_owned(), ContractOperation::schema()));
        <ContractOperation as ToSchema>::schemas(schemas);
    }
}

/// The answer to a submission on the contract's paths (and the kinds' own endpoints): the
/// operation with the headers to poll it — one spelling for every submitting route.
#[derive(utoipa::IntoResponses)]
#[response(
    status = 202,
    description = "Submitted (or the operation an idempotency key already names).",
    headers(
        ("Location" = String, description = "The operation: `…/operations/{id}`."),
        ("Retry-After" = u64, description = "Seconds before polling, while it is not finished."),
        ("ETag" = String, description = "`\"{id}.{version}\"`: changes with every change of the operation.")
    )
)]
pub struct Submitted(ContractOperationView);
