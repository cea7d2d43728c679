//! One operation's events: its current state first (unless the client has seen that
//! version), then every change it makes as it is read, until the terminal one — after
//! which the stream ends. A change wakes the stream through [`crate::changes::Watch`]
//! (armed before each read, so nothing committed after the read is slept through).

use futures::Stream;

use super::{Event, StreamCtx, StreamPermit, pause};
use crate::store::operations::{self as ops, OperationRow};
use context_jobs::ids::TenantKey;

struct State {
    ctx: StreamCtx,
    tenant: TenantKey,
    watch: crate::changes::Watch,
    /// Read and not sent yet.
    pending: Option<OperationRow>,
    /// The newest version the client has.
    seen: i64,
    done: bool,
    _permit: StreamPermit,
}

/// The events of `first` (just read for `tenant`) after version `seen` (`None`: from its
/// current version on, which is sent first).
pub fn events(
    ctx: StreamCtx,
    tenant: TenantKey,
    first: OperationRow,
    seen: Option<i64>,
    permit: StreamPermit,
) -> impl Stream<Item = Event> + Send + 'static {
    let state = State {
        watch: ctx.changes.watch(&first.id),
        ctx,
        tenant,
        seen: seen.unwrap_or(0),
        pending: Some(first),
        done: false,
        _permit: permit,
    };
    futures::stream::unfold(state, next)
}

async fn next(mut s: State) -> Option<(Event, State)> {
    loop {
        if s.done {
            return None;
        }
        if let Some(row) = s.pending.take() {
            if row.version > s.seen {
                s.seen = row.version;
                s.done = row.state.is_terminal();
                let token = row.version.to_string();
                return Some((Event::Operation(Box::new(row), token), s));
            }
            if row.state.is_terminal() {
                return None;
            }
        }
        let woken = {
            let changed = s.watch.armed();
            match ops::get(&s.ctx.db, &s.tenant, &s.watch_id()).await {
                Ok(Some(row)) if row.version > s.seen || row.state.is_terminal() => {
                    s.pending = Some(row);
                    continue;
                }
                Ok(Some(_)) => {}
                // Forgotten meanwhile: nothing more will come.
                Ok(None) => return None,
                Err(e) if e.is_transient() => tracing::debug!(error = %e, "event stream read failed; reading again"),
                Err(e) => {
                    tracing::warn!(error = %e, "event stream read failed; ending the stream");
                    return None;
                }
            }
            pause(&s.ctx, changed).await
        };
        if !woken {
            return None;
        }
    }
}

impl State {
    fn watch_id(&self) -> context_jobs::ids::OperationId {
        self.watch.operation_id()
    }
}
