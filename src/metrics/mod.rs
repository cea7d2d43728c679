//! Prometheus metrics: the recorder (installed once per process), the HTTP middleware, and
//! the names of every metric we emit, so a name is spelled in one place only, with its
//! HELP text (`describe`, in `catalogue.rs`) and its zero series registered at startup.
//! Labels are bounded: route templates, methods, status codes, kinds, states, outcomes;
//! `kind` is always an operation kind.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

mod catalogue;

pub const HTTP_REQUESTS: &str = "context_ops_http_requests_total";
pub const HTTP_DURATION: &str = "context_ops_http_request_duration_seconds";
pub const MESSAGES_APPENDED: &str = "context_ops_messages_appended_total";
pub const MESSAGES_SKIPPED: &str = "context_ops_messages_skipped_total";

const LATENCY_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// The process-wide Prometheus handle; the recorder is installed on first use.
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .expect("static bucket list is non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (an embedding program): keep ours
            // rendering what it has rather than failing startup.
            let _ = metrics::set_global_recorder(recorder);
            catalogue::describe();
            catalogue::register_zeros();
            handle
        })
        .clone()
}

pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// A request's method as a label: the standard ones by name, any other as `other` (a
/// method is any token a client sends, before authentication: one series each would let
/// anyone grow the registry without bound).
fn method_label(method: &axum::http::Method) -> &'static str {
    const KNOWN: [&str; 9] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE"];
    KNOWN.into_iter().find(|known| *known == method.as_str()).unwrap_or("other")
}

/// Count and time every request by route template (never the raw path), method and status.
pub async fn track_http(request: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = method_label(request.method()).to_owned();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    // The status code alone: a class is `status=~"5.."` away.
    let labels = [("route", route), ("method", method), ("status", status.to_string())];
    metrics::counter!(HTTP_REQUESTS, &labels).increment(1);
    metrics::histogram!(HTTP_DURATION, &labels[..2]).record(start.elapsed().as_secs_f64());
    response
}

pub const OPERATIONS_SUBMITTED: &str = "context_ops_operations_submitted_total";
pub const OPERATIONS_FINISHED: &str = "context_ops_operations_finished_total";
pub const IDEMPOTENT_REPLAYS: &str = "context_ops_idempotent_replays_total";
pub const QUEUE_WAIT: &str = "context_ops_queue_wait_seconds";
pub const RUN_DURATION: &str = "context_ops_operation_run_duration_seconds";
pub const ITEMS_PROCESSED: &str = "context_ops_items_processed_total";
/// Vectors the projector wrote (not an operation kind: a metric of its own).
pub const PROJECTOR_VECTORS: &str = "context_ops_projector_vectors_written_total";
/// Retention sweeps run, and the `retention` operations they submitted (the sweep has
/// metrics of its own; the deleting is counted under its operations' kind).
pub const SWEEP_RUNS: &str = "context_ops_retention_sweep_runs_total";
pub const SWEEP_SUBMITTED: &str = "context_ops_retention_sweep_operations_total";
pub const RETRIES: &str = "context_ops_operation_retries_total";
pub const LEASE_RECOVERIES: &str = "context_ops_lease_recoveries_total";
pub const DUPLICATE_DELIVERIES: &str = "context_ops_duplicate_deliveries_total";
pub const DISPATCHED: &str = "context_ops_dispatcher_pushes_total";
/// The `reason` of [`DISPATCHED`] for work a resume pushes (besides `queued` and
/// `lease_expired`).
pub const DISPATCHED_RESUMED: &str = "resumed";
pub const OPERATIONS_GAUGE: &str = "context_ops_operations";
pub const QUEUE_DEPTH: &str = "context_ops_queue_depth";
pub const OLDEST_QUEUED: &str = "context_ops_oldest_queued_timestamp_seconds";
pub const PRUNED: &str = "context_ops_operations_pruned_total";
pub const INFERENCE_TOKENS: &str = "context_ops_inference_tokens_total";
/// Finished turns by `outcome`: `completed`, `refused`, `cancelled`, or the error code.
pub const INFERENCE_OUTCOMES: &str = "context_ops_inference_outcomes_total";
/// Provider attempts that were retried, by the `reason` class of the failure.
pub const INFERENCE_PROVIDER_RETRIES: &str = "context_ops_inference_provider_retries_total";
pub const QUEUE_PUSHES: &str = "context_ops_queue_pushes_total";
pub const QUEUE_DELIVERIES: &str = "context_ops_queue_deliveries_total";
pub const QUEUE_WORKER_RESTARTS: &str = "context_ops_queue_worker_restarts_total";
/// 1 while a kind is paused for everyone (from the database, refreshed with the other
/// gauges by every process that runs a dispatcher; also set at once by the process that
/// paused or resumed it).
pub const QUEUE_PAUSED: &str = "context_ops_queue_paused";
/// Tenants a kind is paused for (pauses of one tenant).
pub const QUEUE_PAUSED_TENANTS: &str = "context_ops_queue_paused_tenants";
/// Queue-control changes by kind and action (`pause`, `resume`).
pub const QUEUE_CONTROLS: &str = "context_ops_queue_controls_total";

/// Event streams open in this process, by `stream` (`operation`: one operation's;
/// `operations`: a listing's).
pub const EVENT_STREAMS_OPEN: &str = "context_ops_event_streams_open";
/// Events sent on event streams, by `stream`.
pub const EVENTS_SENT: &str = "context_ops_events_sent_total";
/// Event streams refused because the process had `CONTEXT_OPS_MAX_EVENT_STREAMS` open.
pub const EVENT_STREAMS_REFUSED: &str = "context_ops_event_streams_refused_total";
/// The `stream` label's values.
pub const EVENT_STREAM_KINDS: [&str; 2] = ["operation", "operations"];

/// Record a pause or resume.
pub fn set_paused(kind: context_jobs::contract::ContextOperationKind, everyone: bool, paused: bool) {
    let action = if paused { "pause" } else { "resume" };
    metrics::counter!(QUEUE_CONTROLS, "kind" => kind.as_str(), "action" => action).increment(1);
    if everyone {
        metrics::gauge!(QUEUE_PAUSED, "kind" => kind.as_str()).set(if paused { 1.0 } else { 0.0 });
    }
}
/// Inference turns a rate limit held back, by `outcome`: `waited` (in place) or
/// `deferred` (back to the queue).
pub const RATE_LIMIT_WAITS: &str = "context_ops_rate_limit_waits_total";
