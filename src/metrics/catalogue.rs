//! Every metric's HELP text and unit (`describe`), and the series registered at zero when
//! the recorder is installed (`register_zeros`), so `rate()` works from the first scrape
//! and `promtool check metrics` finds no metric without HELP. A metric emitted anywhere is
//! listed here (and in the README's metrics table).

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

use super::*;
use crate::provider::responses_client::{PROVIDER_LATENCY, PROVIDER_REQUESTS};
use context_jobs::contract::{ContextOperationKind, ContextOperationState};
use context_jobs::operation::ErrorCode;

pub(super) fn describe() {
    let counters: &[(&str, &str)] = &[
        (HTTP_REQUESTS, "HTTP requests by route template, method and status code."),
        (MESSAGES_APPENDED, "Messages appended (new records stored)."),
        (MESSAGES_SKIPPED, "Appended records skipped because their id was already stored (idempotent retries)."),
        (OPERATIONS_SUBMITTED, "Operations submitted (new rows; idempotent replays are counted apart)."),
        (OPERATIONS_FINISHED, "Operations that reached a terminal state, by kind and outcome."),
        (IDEMPOTENT_REPLAYS, "Submissions answered with an existing operation of the same idempotency key."),
        (ITEMS_PROCESSED, "Records processed by operations (deleted, exported, imported, re-embedded), by kind."),
        (PROJECTOR_VECTORS, "Entry vectors written by the vector projector."),
        (SWEEP_RUNS, "Runs of the scheduled retention sweep."),
        (SWEEP_SUBMITTED, "Retention operations submitted by the scheduled retention sweep."),
        (RETRIES, "Operation attempts that failed transiently and were re-queued with backoff."),
        (LEASE_RECOVERIES, "Orphaned operations recovered (their owner fell silent or their lease expired)."),
        (DUPLICATE_DELIVERIES, "Queue deliveries of an operation that another worker already had or had finished."),
        (
            DISPATCHED,
            "Operations pushed to the queue by the dispatcher or a resume, by reason (queued, lease_expired, resumed).",
        ),
        (PRUNED, "Terminal operations deleted after their retention period."),
        (INFERENCE_TOKENS, "Provider tokens used by inference turns, by direction (input, output)."),
        (INFERENCE_OUTCOMES, "Finished inference turns by outcome (completed, refused, cancelled, or an error code)."),
        (INFERENCE_PROVIDER_RETRIES, "Provider calls retried, by the reason class of the failure."),
        (
            PROVIDER_REQUESTS,
            "Calls to the Responses provider, by status class (2xx, 429, other 4xx, 5xx, timeout, connect_error, transport_error).",
        ),
        (QUEUE_PUSHES, "Pushes to an operation kind's queue, by outcome (ok, error)."),
        (QUEUE_DELIVERIES, "Queue messages delivered to a handler, by outcome."),
        (QUEUE_WORKER_RESTARTS, "Queue workers restarted after they ended or failed."),
        (QUEUE_CONTROLS, "Queue-control changes, by kind and action (pause, resume)."),
        (RATE_LIMIT_WAITS, "Inference turns a provider rate limit held back, by outcome (waited, deferred)."),
        (EVENTS_SENT, "Events sent on event streams, by stream (operation, operations)."),
        (EVENT_STREAMS_REFUSED, "Event streams refused with 503: the process had CONTEXT_OPS_MAX_EVENT_STREAMS open."),
    ];
    for (name, help) in counters {
        describe_counter!(*name, *help);
    }
    let gauges: &[(&str, Unit, &str)] = &[
        (
            OPERATIONS_GAUGE,
            Unit::Count,
            "Operations by kind and state (from the database, refreshed by the dispatcher).",
        ),
        (
            QUEUE_DEPTH,
            Unit::Count,
            "Messages in an operation kind's queue, by status (pending, scheduled, inflight, dead).",
        ),
        (OLDEST_QUEUED, Unit::Seconds, "Creation time (Unix seconds) of the oldest queued operation; 0 when none."),
        (QUEUE_PAUSED, Unit::Count, "1 while an operation kind is paused for everyone."),
        (QUEUE_PAUSED_TENANTS, Unit::Count, "Tenants an operation kind is paused for."),
        (EVENT_STREAMS_OPEN, Unit::Count, "Event streams open in this process, by stream (operation, operations)."),
    ];
    for (name, unit, help) in gauges {
        describe_gauge!(*name, *unit, *help);
    }
    let histograms: &[(&str, &str)] = &[
        (HTTP_DURATION, "HTTP request latency by route template and method."),
        (QUEUE_WAIT, "Time from submission to an operation's first start, by kind."),
        (RUN_DURATION, "Duration of one operation attempt, by kind."),
        (PROVIDER_LATENCY, "Latency of calls to the Responses provider (headers and body), by status class."),
    ];
    for (name, help) in histograms {
        describe_histogram!(*name, Unit::Seconds, *help);
    }
}

/// The counters' series of known, bounded label sets, at zero (`increment(0)` adds nothing
/// to a series that already counts).
pub(super) fn register_zeros() {
    for name in [MESSAGES_APPENDED, MESSAGES_SKIPPED, PRUNED, PROJECTOR_VECTORS, SWEEP_RUNS, SWEEP_SUBMITTED] {
        metrics::counter!(name).increment(0);
    }
    for direction in ["input", "output"] {
        metrics::counter!(INFERENCE_TOKENS, "direction" => direction).increment(0);
    }
    for outcome in ["waited", "deferred"] {
        metrics::counter!(RATE_LIMIT_WAITS, "outcome" => outcome).increment(0);
    }
    metrics::counter!(EVENT_STREAMS_REFUSED).increment(0);
    for stream in EVENT_STREAM_KINDS {
        metrics::counter!(EVENTS_SENT, "stream" => stream).increment(0);
        metrics::gauge!(EVENT_STREAMS_OPEN, "stream" => stream).set(0.0);
    }
    for kind in ContextOperationKind::ALL.map(|k| k.as_str()) {
        for name in [
            OPERATIONS_SUBMITTED,
            IDEMPOTENT_REPLAYS,
            ITEMS_PROCESSED,
            RETRIES,
            LEASE_RECOVERIES,
            DUPLICATE_DELIVERIES,
            QUEUE_WORKER_RESTARTS,
        ] {
            metrics::counter!(name, "kind" => kind).increment(0);
        }
        for outcome in
            [ContextOperationState::Succeeded, ContextOperationState::Failed, ContextOperationState::Cancelled]
        {
            metrics::counter!(OPERATIONS_FINISHED, "kind" => kind, "outcome" => outcome.as_str()).increment(0);
        }
        for reason in [ContextOperationState::Queued.as_str(), ErrorCode::LeaseExpired.as_str(), DISPATCHED_RESUMED] {
            metrics::counter!(DISPATCHED, "kind" => kind, "reason" => reason).increment(0);
        }
        for outcome in ["ok", "error"] {
            metrics::counter!(QUEUE_PUSHES, "kind" => kind, "outcome" => outcome).increment(0);
        }
        for outcome in ["handled", "panicked", "cancelled", "undecodable"] {
            metrics::counter!(QUEUE_DELIVERIES, "kind" => kind, "outcome" => outcome).increment(0);
        }
        for action in ["pause", "resume"] {
            metrics::counter!(QUEUE_CONTROLS, "kind" => kind, "action" => action).increment(0);
        }
    }
}
