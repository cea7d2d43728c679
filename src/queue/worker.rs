//! What runs inside an apalis worker, and the supervisor around it: the lenient payload
//! codec, the delivery function (handler spawned so a panic is caught), the poll strategy,
//! unique worker names, and the restart / graceful-stop loop.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use apalis::prelude::{Codec, PollSnapshot, PollStrategy, WorkerContext};
use apalis_core::error::WorkerError;
use context_jobs::contract::ContextOperationKind;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use tokio::sync::{Notify, futures::OwnedNotified};
use tokio_util::sync::CancellationToken;

use super::{Backend, OperationHandler, OperationMessage, POLL_INTERVAL, Queue, SHUTDOWN_TIMEOUT, kind_index};
use crate::metrics::{QUEUE_DELIVERIES, QUEUE_WORKER_RESTARTS};

/// A delivered payload. Decoding never fails: anything that is not an `OperationMessage`
/// becomes `Undecodable`, is logged and acknowledged (a failed decode would kill the worker
/// and strand the messages behind it).
#[derive(Debug)]
pub(super) enum Envelope {
    Message(OperationMessage),
    Undecodable(Vec<u8>),
}

/// JSON codec for [`Envelope`] whose `decode` is infallible.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LenientCodec;

impl Codec<Envelope> for LenientCodec {
    type Error = Infallible;
    type Compact = Vec<u8>;

    fn encode(&self, value: &Envelope) -> Result<Vec<u8>, Infallible> {
        Ok(match value {
            Envelope::Message(message) => serde_json::to_vec(message).expect("a struct of strings serializes"),
            Envelope::Undecodable(raw) => raw.clone(),
        })
    }

    fn decode(&self, compact: &Vec<u8>) -> Result<Envelope, Infallible> {
        Ok(match serde_json::from_slice::<OperationMessage>(compact) {
            Ok(message) if !message.operation_id.is_empty() => Envelope::Message(message),
            _ => Envelope::Undecodable(compact.clone()),
        })
    }
}

/// The service every worker runs: calls the handler for one message and always completes
/// `Ok`, so apalis' own retry/dead-letter logic never comes into play.
#[derive(Clone)]
pub(super) struct Deliver {
    pub(super) kind: ContextOperationKind,
    pub(super) handler: Arc<dyn OperationHandler>,
    pub(super) in_flight: Arc<InFlight>,
}

/// How many deliveries of one worker are running, so shutdown can wait for them while
/// apalis still polls its backend (see [`stop_gracefully`]).
#[derive(Default)]
pub(super) struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

impl InFlight {
    fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

struct InFlightGuard(Arc<InFlight>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Deliver {
    pub(super) fn call(&self, envelope: Envelope) -> BoxFuture<'static, ()> {
        let kind = self.kind;
        let handler = self.handler.clone();
        let guard = self.in_flight.enter();
        async move {
            let outcome = match envelope {
                Envelope::Message(message) => {
                    // Spawned (the `handle` call included), so a panic stays inside its task;
                    // joined, so concurrency and graceful shutdown see it running until done.
                    // The in-flight guard goes with the task: a worker that fails and is
                    // restarted drops this future, not the handler, and a shutdown must still
                    // wait for that handler (it would be released, not left running).
                    let operation_id = message.operation_id.clone();
                    let handled = async move {
                        let _guard = guard;
                        handler.handle_message(kind, message).await
                    };
                    match tokio::spawn(handled).await {
                        Ok(()) => "handled",
                        Err(e) if e.is_panic() => {
                            let panic = e.into_panic();
                            let message = panic
                                .downcast_ref::<&str>()
                                .map(|s| (*s).to_owned())
                                .or_else(|| panic.downcast_ref::<String>().cloned())
                                .unwrap_or_else(|| "non-string panic payload".to_owned());
                            tracing::error!(kind = kind.as_str(), operation_id, panic = %message, "operation handler panicked; message acknowledged");
                            "panicked"
                        }
                        Err(_) => "cancelled",
                    }
                }
                Envelope::Undecodable(raw) => {
                    drop(guard);
                    let shown: String = String::from_utf8_lossy(&raw).chars().take(200).collect();
                    tracing::warn!(kind = kind.as_str(), payload = %shown, "undecodable queue payload acknowledged and dropped");
                    "undecodable"
                }
            };
            metrics::counter!(QUEUE_DELIVERIES, "kind" => kind.as_str(), "outcome" => outcome).increment(1);
        }
        .boxed()
    }
}

/// Poll every [`POLL_INTERVAL`], and at once when this process pushed to the queue.
///
/// A wake that arrives while a fetch is already in flight is consumed by that fetch's
/// polling, yet the fetch may have looked at the queue before the push landed: the job
/// would then wait for the next interval. So on Redis each wake also brings the next
/// [`REDIS_RECHECKS`] ticks forward to [`RECHECK`] apart, which is sure to start a fetch
/// after the push (at most two extra fetches per wake; wakes coalesce under load). On
/// SQLite a fetch is a write transaction on the database the jobs themselves write, so
/// there a wake is not followed by re-checks.
pub(super) struct WakeOrInterval {
    wake: Arc<Notify>,
    notified: Pin<Box<OwnedNotified>>,
    tick: Pin<Box<tokio::time::Sleep>>,
    /// Re-checks after each wake, and how many of them are still due.
    per_wake: u8,
    rechecks: u8,
}

const RECHECK: Duration = Duration::from_millis(5);
pub(super) const REDIS_RECHECKS: u8 = 2;

impl WakeOrInterval {
    pub(super) fn new(wake: Arc<Notify>, per_wake: u8) -> Self {
        Self {
            notified: Box::pin(wake.clone().notified_owned()),
            wake,
            tick: Box::pin(tokio::time::sleep(POLL_INTERVAL)),
            per_wake,
            rechecks: 0,
        }
    }
}

impl PollStrategy for WakeOrInterval {
    fn poll_drive(&mut self, cx: &mut Context<'_>, _: &PollSnapshot) -> Poll<Option<()>> {
        let mut ready = false;
        // Re-arm until pending, so both wakers stay registered with this task.
        while self.notified.as_mut().poll(cx).is_ready() {
            self.notified = Box::pin(self.wake.clone().notified_owned());
            self.rechecks = self.per_wake;
            if self.per_wake > 0 {
                self.tick.as_mut().reset(tokio::time::Instant::now() + RECHECK);
            }
            ready = true;
        }
        while self.tick.as_mut().poll(cx).is_ready() {
            let next = if self.rechecks > 0 {
                self.rechecks -= 1;
                RECHECK
            } else {
                POLL_INTERVAL
            };
            self.tick.as_mut().reset(tokio::time::Instant::now() + next);
            ready = true;
        }
        if ready { Poll::Ready(Some(())) } else { Poll::Pending }
    }
}

/// A worker name unique per process and per restart: host, pid, kind, restart count and a
/// random suffix (apalis refuses a name seen alive recently, and fixed names across
/// replicas would hide orphans).
pub(super) fn worker_name(kind: ContextOperationKind, restarts: u32) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .unwrap_or_default();
    let host: String =
        host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')).take(63).collect();
    let host = if host.is_empty() { "host".to_owned() } else { host };
    format!("{host}-{}-{}-r{restarts}-{:08x}", std::process::id(), kind.as_str(), fastrand::u32(..))
}

fn restart_delay(consecutive_failures: u32) -> Duration {
    let base = Duration::from_millis(250).saturating_mul(1 << consecutive_failures.min(6));
    // Capped low: after a Redis outage the workers must be fetching again within seconds.
    base.min(Duration::from_secs(2)) + Duration::from_millis(fastrand::u64(..250))
}

/// Run one kind's worker until `shutdown`: restart it (new name, backoff) whenever it ends on
/// its own, release whatever it still held, and on shutdown let it drain within the timeout.
pub(super) async fn supervise(
    queue: Queue,
    kind: ContextOperationKind,
    handler: Arc<dyn OperationHandler>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let queue_name = queue.queue_name(kind);
    let in_flight = Arc::new(InFlight::default());
    let deliver = Deliver { kind, handler, in_flight: in_flight.clone() };
    let wake = queue.inner.wake[kind_index(kind)].clone();
    let mut restarts = 0u32;
    let mut consecutive_failures = 0u32;
    loop {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        let name = worker_name(kind, restarts);
        let (ctx, mut run) = start_worker(
            &queue.inner.backend,
            &queue_name,
            &name,
            deliver.clone(),
            queue.inner.concurrency,
            wake.clone(),
        );
        let started = Instant::now();
        tracing::debug!(queue = %queue_name, worker = %name, "queue worker starting");
        let ended = tokio::select! {
            biased;
            result = &mut run => Some(result),
            () = shutdown.cancelled() => None,
        };
        let Some(result) = ended else {
            return stop_gracefully(&queue.inner.backend, &queue_name, &name, ctx, run, &in_flight).await;
        };
        release(&queue.inner.backend, &queue_name, &name).await;
        restarts += 1;
        consecutive_failures = if started.elapsed() > Duration::from_secs(60) { 1 } else { consecutive_failures + 1 };
        let delay = restart_delay(consecutive_failures);
        metrics::counter!(QUEUE_WORKER_RESTARTS, "kind" => kind.as_str()).increment(1);
        match result {
            Ok(()) => {
                tracing::warn!(queue = %queue_name, worker = %name, ?delay, "queue worker ended on its own; restarting")
            }
            Err(e) => {
                tracing::warn!(queue = %queue_name, worker = %name, error = %e, ?delay, "queue worker failed; restarting")
            }
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => return Ok(()),
        }
    }
}

async fn stop_gracefully(
    backend: &Backend,
    queue_name: &str,
    name: &str,
    ctx: WorkerContext,
    mut run: BoxFuture<'static, Result<(), WorkerError>>,
    in_flight: &InFlight,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + SHUTDOWN_TIMEOUT;
    // Running handlers see the shutdown at their next boundary and release. Until they
    // have, apalis must go on polling its backend: a stopped worker stops polling it while
    // handlers run, which can freeze a fetch mid-transaction — on SQLite holding the write
    // lock every handler's next commit waits for (seen: shutdowns hung for the 30 s busy
    // timeout). Deliveries arriving meanwhile start nothing (see `Runner::deliver`).
    let ended_early = tokio::select! {
        result = &mut run => Some(result),
        () = in_flight.idle() => None,
        () = tokio::time::sleep_until(deadline) => None,
    };
    let handlers_done = ended_early.is_none() && in_flight.count.load(Ordering::SeqCst) == 0;
    // Stop taking messages; handlers still running finish and are acknowledged, then
    // apalis closes the backend.
    if let Err(e) = ctx.stop() {
        tracing::debug!(worker = %name, error = %e, "stopping a worker that had not started");
    }
    // Once the handlers are done, only apalis' own acknowledgements are left, which take a
    // round trip or two — unless they never come: apalis sends each on a channel of
    // `4 × batch size` places that it drains only while it runs, and a stopped worker waits
    // for its tasks (each waiting on its send) before it closes. Handlers that finish
    // together (more than 4) as the worker stops leave it so for good, so the close is
    // bounded here; what it did not acknowledge is released below, and comes back as
    // duplicates the claim drops.
    let close_by = if handlers_done { deadline.min(tokio::time::Instant::now() + CLOSE_GRACE) } else { deadline };
    let outcome = match ended_early {
        Some(result) => Ok(result),
        None => tokio::time::timeout_at(close_by, run).await,
    };
    // Anything still held (a fetch cut short, acknowledgements not made, handlers past the
    // deadline) goes back to the queue now instead of after the orphan timeout; duplicates
    // are dropped by the claim.
    release(backend, queue_name, name).await;
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            tracing::warn!(queue = %queue_name, worker = %name, error = %e, "queue worker failed while stopping");
            Ok(())
        }
        Err(_) if handlers_done => {
            tracing::info!(queue = %queue_name, worker = %name, "queue worker stopped before apalis acknowledged its last messages; they were released");
            Ok(())
        }
        Err(_) => anyhow::bail!(
            "worker {name} on {queue_name} did not finish its running handlers within {}s; they were left running detached",
            SHUTDOWN_TIMEOUT.as_secs()
        ),
    }
}

/// How long a worker whose handlers are done may take to close (see `stop_gracefully`).
const CLOSE_GRACE: Duration = Duration::from_secs(2);

pub(super) type WorkerRun = BoxFuture<'static, Result<(), WorkerError>>;

fn start_worker(
    backend: &Backend,
    queue_name: &str,
    name: &str,
    deliver: Deliver,
    concurrency: usize,
    wake: Arc<Notify>,
) -> (WorkerContext, WorkerRun) {
    match backend {
        Backend::Redis(r) => r.worker(queue_name, name, deliver, concurrency, wake),
        Backend::Sqlite(s) => s.worker(queue_name, name, deliver, concurrency, wake),
    }
}

async fn release(backend: &Backend, queue_name: &str, name: &str) {
    let result = match backend {
        Backend::Redis(r) => r.release_worker(queue_name, name).await,
        Backend::Sqlite(s) => s.release_worker(queue_name, name).await,
    };
    match result {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(queue = %queue_name, worker = %name, released = n, "re-enqueued messages a stopped worker still held")
        }
        Err(e) => {
            tracing::warn!(queue = %queue_name, worker = %name, error = %format!("{e:#}"), "cannot release a stopped worker's messages; the orphan timeout will")
        }
    }
}
