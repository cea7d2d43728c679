//! A worker process announces itself every second (`worker_heartbeats`), so the dispatcher
//! of any process can tell an operation whose lease owner died (SIGKILL, a lost machine)
//! without waiting out the lease: it is recovered once the owner has been silent for
//! `OWNER_SILENCE_MS`. A graceful stop removes the announcement.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::store::Db;
use crate::store::operations::controls;

/// How often a worker process announces itself.
pub const ANNOUNCE_EVERY: Duration = Duration::from_millis(1000);

/// Announce `holder` every [`ANNOUNCE_EVERY`] until `shutdown`; then, once `stopped`
/// (every queue worker has stopped), forget it.
pub fn spawn(
    db: Db,
    holder: String,
    shutdown: CancellationToken,
    stopped: CancellationToken,
) -> JoinHandle<anyhow::Result<()>> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(ANNOUNCE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(e) = controls::announce_worker(&db, &holder).await {
                        tracing::warn!(error = %e, "could not announce this worker process");
                    }
                }
                () = shutdown.cancelled() => break,
            }
        }
        // Keep announcing while running jobs finish and release their leases.
        loop {
            tokio::select! {
                _ = tick.tick() => { let _ = controls::announce_worker(&db, &holder).await; }
                () = stopped.cancelled() => break,
            }
        }
        if let Err(e) = controls::forget_worker(&db, &holder).await {
            tracing::debug!(error = %e, "could not remove this worker's announcement");
        }
        Ok(())
    })
}
