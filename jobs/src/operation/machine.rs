//! The operation state machine: the states an operation moves through, every transition
//! as a value, and the decision after each attempt's outcome.
//!
//! ```text
//!             claim                 succeed / fail / cancelled
//!   queued ─────────────▶ running ──────────────────────────────▶ succeeded | failed | cancelled
//!     ▲  │                  │  ▲ heartbeat, checkpoint (fenced)
//!     │  │ cancel_queued    │  └─ claim again once the lease expired (recovery)
//!     │  └────────▶ cancelled
//!     └──── retry (backoff) / release (shutdown) ───┘
//! ```
//!
//! The shell turns each [`Transition`] into one compare-and-set statement (its guard is
//! [`Transition::from`] and, where [`Transition::fenced`], the lease token); nothing else
//! writes an operation's state. Terminal states never change again.

use super::error_code::ErrorCode;
use super::retry::RetryPolicy;
use crate::contract::ContextOperationState as State;

/// Phases the engine itself sets (a kind's runner sets its own, e.g. `deleting`).
pub mod phase {
    pub const QUEUED: &str = "queued";
    pub const STARTING: &str = "starting";
    pub const RETRYING: &str = "retrying";
    pub const DONE: &str = "done";
    pub const FAILED: &str = "failed";
    pub const CANCELLED: &str = "cancelled";
}

/// Phases of a queued operation that a claim replaces with `starting` (a recovered running
/// operation keeps its phase).
pub const WAITING_PHASES: &[&str] = &[
    phase::QUEUED,
    phase::RETRYING,
    crate::operation::schedule::phase::SCHEDULED,
    crate::operation::schedule::phase::PAUSED,
    crate::operation::schedule::phase::WAITING_FOR_CONCURRENCY,
    crate::operation::schedule::phase::WAITING_FOR_RATE_LIMIT,
];

/// The states a claim may start from with no lease to wait out: a claim of a `running`
/// operation is a recovery and also needs its lease to have expired.
pub const CLAIMABLE: &[State] = &[State::Queued, State::Running];
/// The states that end an operation. `forget` and pruning apply only to these.
pub const TERMINAL: &[State] = &[State::Succeeded, State::Failed, State::Cancelled];
const QUEUED: &[State] = &[State::Queued];
/// What an API retry starts from.
pub const RETRYABLE: &[State] = &[State::Failed, State::Cancelled];
const RUNNING: &[State] = &[State::Running];

/// The `error` shown while a recovered operation runs again.
pub const LEASE_EXPIRED_MESSAGE: &str =
    "the previous worker stopped renewing its lease; resumed from the last checkpoint";

/// What a job records with each batch (in the batch's own transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub phase: &'static str,
    pub processed: i64,
    pub total: i64,
    /// The kind's checkpoint, serialized.
    pub checkpoint: Option<String>,
}

/// One change of an operation row, as data. The lifetimes borrow what the caller holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Transition<'a> {
    /// `queued` (due, not cancelled) or `running` with an expired lease (or a lease owner
    /// gone silent) → `running` under a fresh lease token held by `owner`; `attempt + 1`.
    /// Taking over an expired lease records `lease_expired` until the operation ends.
    Claim { token: &'a str, lease_until_ms: i64, owner: &'a str },
    /// Extend the lease; nothing else changes.
    Heartbeat { lease_until_ms: i64 },
    /// Record progress (and the checkpoint) and extend the lease.
    Checkpoint { progress: &'a Progress, lease_until_ms: i64 },
    /// Name the artifact the operation produces.
    SetArtifact { artifact_id: &'a str },
    /// → `succeeded` with `result` (JSON text), with the last progress when the job's final
    /// batch commits it together.
    Succeed { result: &'a str, progress: Option<&'a Progress> },
    /// → `failed` with a stable code and a message.
    Fail { code: ErrorCode, message: &'a str },
    /// → `cancelled`: the job stopped at a batch boundary after a cancel request, with
    /// what it had done so far as its `result` when its kind reports that (a delete's
    /// counts).
    Cancelled { result: Option<&'a str> },
    /// → `queued`, not before `not_before_ms` (a transient failure, backed off).
    Retry { not_before_ms: i64, code: ErrorCode, message: &'a str },
    /// → `queued` at once, this attempt not counted (graceful shutdown; a pause, which
    /// leaves the phase saying so).
    Release { phase: Option<&'static str> },
    /// API: a queued operation → `cancelled` at once.
    CancelQueued,
    /// API: flag a running operation; it stops at its next batch boundary.
    RequestCancel,
    /// → `queued` until `not_before_ms`, this attempt not counted, the phase saying why (a
    /// rate limit that will not allow the turn for a while).
    Defer { not_before_ms: i64, phase: &'static str },
    /// Scheduler: a queued operation waits, and its phase says why (paused, a concurrency
    /// limit, a rate limit).
    Hold { phase: &'static str },
    /// Dispatcher: a queued operation past its deadline never starts → `failed`.
    Expire,
    /// API retry: a `failed` or `cancelled` operation → `queued` with a fresh attempt budget
    /// (its checkpoint kept where its kind can resume, else cleared).
    Requeue { keep_checkpoint: bool },
}

impl Transition<'_> {
    /// The states the compare-and-set requires.
    pub fn from(&self) -> &'static [State] {
        match self {
            Self::Claim { .. } => CLAIMABLE,
            Self::CancelQueued | Self::Hold { .. } | Self::Expire => QUEUED,
            Self::Requeue { .. } => RETRYABLE,
            _ => RUNNING,
        }
    }

    /// The state the operation is in afterwards.
    pub fn to(&self) -> State {
        match self {
            Self::Claim { .. }
            | Self::Heartbeat { .. }
            | Self::Checkpoint { .. }
            | Self::SetArtifact { .. }
            | Self::RequestCancel => State::Running,
            Self::Succeed { .. } => State::Succeeded,
            Self::Fail { .. } | Self::Expire => State::Failed,
            Self::Cancelled { .. } | Self::CancelQueued => State::Cancelled,
            Self::Retry { .. }
            | Self::Release { .. }
            | Self::Defer { .. }
            | Self::Hold { .. }
            | Self::Requeue { .. } => State::Queued,
        }
    }

    /// Written by the lease holder, fenced by its token: a worker that lost its lease
    /// matches nothing and its transaction rolls back.
    pub fn fenced(&self) -> bool {
        !matches!(
            self,
            Self::Claim { .. }
                | Self::CancelQueued
                | Self::RequestCancel
                | Self::Hold { .. }
                | Self::Expire
                | Self::Requeue { .. }
        )
    }

    /// Whether the operation's `version` moves (every visible change; a heartbeat or an
    /// artifact name alone is not one a poller waits for).
    pub fn bumps_version(&self) -> bool {
        !matches!(self, Self::Heartbeat { .. } | Self::SetArtifact { .. })
    }

    /// The phase it sets, if it sets one (`Claim` sets `starting` only over `queued` /
    /// `retrying`, keeping a recovered operation's phase).
    pub fn phase(&self) -> Option<&str> {
        match self {
            Self::Claim { .. } => Some(phase::STARTING),
            Self::Checkpoint { progress, .. } => Some(progress.phase),
            Self::Succeed { .. } => Some(phase::DONE),
            Self::Fail { .. } | Self::Expire => Some(phase::FAILED),
            Self::Cancelled { .. } | Self::CancelQueued => Some(phase::CANCELLED),
            Self::Retry { .. } => Some(phase::RETRYING),
            Self::Release { phase } => *phase,
            Self::Defer { phase, .. } => Some(phase),
            Self::Hold { phase } => Some(phase),
            Self::Requeue { .. } => Some(phase::QUEUED),
            _ => None,
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.to().is_terminal()
    }

    /// The `outcome` label of `context_ops_operations_finished_total` (terminal only).
    pub fn outcome(&self) -> Option<&'static str> {
        self.is_terminal().then(|| self.to().as_str())
    }

    /// Whether it ends the current attempt (recorded in the attempt history).
    pub fn ends_attempt(&self) -> bool {
        self.fenced() && !matches!(self, Self::Heartbeat { .. } | Self::Checkpoint { .. } | Self::SetArtifact { .. })
    }

    /// The `errorCode` it records, if any.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            Self::Fail { code, .. } | Self::Retry { code, .. } => Some(*code),
            Self::Expire => Some(ErrorCode::DeadlineExceeded),
            _ => None,
        }
    }
}

/// How one attempt of a job ended, as the runner saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptEnd<'a> {
    /// The job produced its result; `committed` when its last batch already wrote the
    /// `Succeed` transition in the same transaction as its effect. `progress` is the final
    /// progress to record with it, when the job did not commit that already.
    Succeeded {
        result: &'a str,
        committed: bool,
        progress: Option<&'a Progress>,
    },
    /// The job stopped at a boundary after a cancel request (`result`: what it did so far).
    Cancelled {
        result: Option<&'a str>,
    },
    /// The process is shutting down: the job stopped at a boundary.
    ShuttingDown,
    /// The kind was paused (for everyone or for this tenant): the job stopped at a boundary.
    Paused,
    /// The job cannot go on before `until_ms` (a rate limit): back to the queue till then.
    Deferred {
        until_ms: i64,
        phase: &'static str,
    },
    /// Another worker owns the operation now: write nothing.
    LostLease,
    Permanent {
        code: ErrorCode,
        message: &'a str,
    },
    Transient {
        message: &'a str,
    },
}

/// What to write after an attempt (`None`: nothing — someone else owns the row, or the
/// job already committed its own finish). `attempt` is the attempt that just ran (1-based).
pub fn decide<'a>(
    end: &AttemptEnd<'a>,
    attempt: u32,
    policy: &RetryPolicy,
    jitter: f64,
    now_ms: i64,
) -> Option<Transition<'a>> {
    match *end {
        AttemptEnd::Succeeded { committed: true, .. } | AttemptEnd::LostLease => None,
        AttemptEnd::Succeeded { result, committed: false, progress } => Some(Transition::Succeed { result, progress }),
        AttemptEnd::Cancelled { result } => Some(Transition::Cancelled { result }),
        AttemptEnd::ShuttingDown => Some(Transition::Release { phase: None }),
        AttemptEnd::Paused => Some(Transition::Release { phase: Some(crate::operation::schedule::phase::PAUSED) }),
        AttemptEnd::Deferred { until_ms, phase } => Some(Transition::Defer { not_before_ms: until_ms, phase }),
        AttemptEnd::Permanent { code, message } => Some(Transition::Fail { code, message }),
        AttemptEnd::Transient { message } if policy.may_retry(attempt) => Some(Transition::Retry {
            not_before_ms: now_ms.saturating_add(policy.backoff_ms(attempt, jitter) as i64),
            code: ErrorCode::Transient,
            message,
        }),
        AttemptEnd::Transient { message } => Some(Transition::Fail { code: ErrorCode::RetriesExhausted, message }),
    }
}

/// Right after a claim: an operation whose every attempt so far killed its worker (each
/// claim counts one) ends instead of running again — failed, or cancelled if a cancel was
/// requested (the runner decides) — so a crash loop still ends.
pub fn over_budget(attempt: u32, policy: &RetryPolicy) -> bool {
    attempt > policy.max_attempts
}

/// The message of that failure: the last recorded error, or why there is none.
pub fn crash_loop_message(last_error: Option<&str>) -> &str {
    last_error.unwrap_or("the worker died on every attempt")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy { max_attempts: 3, ..RetryPolicy::default() }
    }

    #[test]
    fn transitions_know_their_guards_and_targets() {
        let p = Progress { phase: "deleting", processed: 1, total: 2, checkpoint: None };
        let claim = Transition::Claim { token: "t", lease_until_ms: 1, owner: "w" };
        assert_eq!((claim.from(), claim.to(), claim.fenced()), (CLAIMABLE, State::Running, false));
        let cp = Transition::Checkpoint { progress: &p, lease_until_ms: 1 };
        assert_eq!((cp.from(), cp.fenced(), cp.phase()), (RUNNING, true, Some("deleting")));
        assert!(!Transition::Heartbeat { lease_until_ms: 1 }.bumps_version());
        assert_eq!(Transition::CancelQueued.from(), QUEUED);
        assert!(!Transition::RequestCancel.fenced());
        for t in [Transition::Succeed { result: "{}", progress: None }, Transition::Cancelled { result: None }] {
            assert!(t.is_terminal() && t.fenced());
        }
        assert_eq!(Transition::Fail { code: ErrorCode::Internal, message: "" }.outcome(), Some("failed"));
        let release = Transition::Release { phase: None };
        assert_eq!((release.outcome(), release.to(), release.ends_attempt()), (None, State::Queued, true));
        assert_eq!(Transition::Requeue { keep_checkpoint: true }.from(), RETRYABLE);
        assert!(!Transition::Requeue { keep_checkpoint: true }.fenced());
        assert_eq!((Transition::Expire.from(), Transition::Expire.to()), (QUEUED, State::Failed));
        assert_eq!(Transition::Expire.error_code(), Some(ErrorCode::DeadlineExceeded));
        assert_eq!(Transition::Hold { phase: "paused" }.phase(), Some("paused"));
        assert!(!Transition::Heartbeat { lease_until_ms: 1 }.ends_attempt());
        assert!(TERMINAL.iter().all(|s| s.is_terminal()) && !CLAIMABLE.iter().any(|s| s.is_terminal()));
    }

    #[test]
    fn decisions_after_each_outcome() {
        let p = policy();
        let ok = AttemptEnd::Succeeded { result: "{}", committed: false, progress: None };
        assert_eq!(decide(&ok, 1, &p, 0.0, 0), Some(Transition::Succeed { result: "{}", progress: None }));
        let last = Progress { phase: "done", processed: 1, total: 1, checkpoint: None };
        let at = AttemptEnd::Succeeded { result: "{}", committed: false, progress: Some(&last) };
        assert_eq!(decide(&at, 1, &p, 0.0, 0), Some(Transition::Succeed { result: "{}", progress: Some(&last) }));
        let committed = AttemptEnd::Succeeded { result: "{}", committed: true, progress: None };
        assert_eq!(decide(&committed, 1, &p, 0.0, 0), None);
        assert_eq!(decide(&AttemptEnd::LostLease, 1, &p, 0.0, 0), None);
        assert_eq!(decide(&AttemptEnd::ShuttingDown, 1, &p, 0.0, 0), Some(Transition::Release { phase: None }));
        assert_eq!(decide(&AttemptEnd::Paused, 1, &p, 0.0, 0), Some(Transition::Release { phase: Some("paused") }));
        let deferred = AttemptEnd::Deferred { until_ms: 9, phase: "waiting_for_rate_limit" };
        let defer = decide(&deferred, 1, &p, 0.0, 0).unwrap();
        assert_eq!(defer, Transition::Defer { not_before_ms: 9, phase: "waiting_for_rate_limit" });
        assert!(defer.fenced() && defer.ends_attempt() && defer.to() == State::Queued);
        assert_eq!(
            decide(&AttemptEnd::Cancelled { result: None }, 1, &p, 0.0, 0),
            Some(Transition::Cancelled { result: None })
        );
        let partial = r#"{"deletedMessages":3}"#;
        assert_eq!(
            decide(&AttemptEnd::Cancelled { result: Some(partial) }, 1, &p, 0.0, 0),
            Some(Transition::Cancelled { result: Some(partial) })
        );
        let transient = AttemptEnd::Transient { message: "db down" };
        assert_eq!(
            decide(&transient, 2, &p, 0.0, 10_000),
            Some(Transition::Retry { not_before_ms: 12_000, code: ErrorCode::Transient, message: "db down" })
        );
        assert_eq!(
            decide(&transient, 3, &p, 0.0, 0),
            Some(Transition::Fail { code: ErrorCode::RetriesExhausted, message: "db down" })
        );
        let bad = AttemptEnd::Permanent { code: ErrorCode::InvalidRequest, message: "no" };
        assert_eq!(
            decide(&bad, 1, &p, 0.0, 0),
            Some(Transition::Fail { code: ErrorCode::InvalidRequest, message: "no" })
        );
        assert!(!over_budget(3, &p) && over_budget(4, &p));
        assert_eq!(crash_loop_message(None), "the worker died on every attempt");
    }
}
