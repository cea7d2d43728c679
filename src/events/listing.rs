//! A listing's events: changes to the caller's operations (or, for an admin, another
//! tenant's or every tenant's), optionally of one kind or leaving one state, in commit
//! order across every process (`store::operations::changes`). Each operation is sent as it
//! is when read, with the position after it as its `id:`; a client reconnecting with that
//! `Last-Event-ID` gets every later change and none it had.

use std::collections::VecDeque;

use futures::Stream;

use super::{Event, StreamCtx, StreamPermit, pause};
use crate::changes::TenantWatch;
use crate::store::operations::changes::{self, Change, ChangeFilter};
use context_jobs::operation::change_position::ChangePosition;

/// Rows read at a time: what a slow client can make a stream hold.
pub const PAGE: usize = 100;

struct State {
    ctx: StreamCtx,
    filter: ChangeFilter,
    watch: TenantWatch,
    /// Where the client is once it has everything sent so far.
    position: ChangePosition,
    /// Read and not sent yet (at most a page).
    pending: VecDeque<Change>,
    /// Send the starting position first (a stream that starts at the head).
    announce: bool,
    _permit: StreamPermit,
}

/// Watch for `filter`'s changes; the watch must be taken before `from` is read, so that a
/// change committed in between wakes the stream.
pub fn watch(ctx: &StreamCtx, filter: &ChangeFilter) -> TenantWatch {
    ctx.changes.watch_tenant(filter.tenant.clone())
}

/// The changes after `from`. With `announce`, `from` itself is sent first as a bare
/// position.
pub fn events(
    ctx: StreamCtx,
    filter: ChangeFilter,
    watch: TenantWatch,
    from: ChangePosition,
    announce: bool,
    permit: StreamPermit,
) -> impl Stream<Item = Event> + Send + 'static {
    let state = State { ctx, filter, watch, position: from, pending: VecDeque::new(), announce, _permit: permit };
    futures::stream::unfold(state, next)
}

async fn next(mut s: State) -> Option<(Event, State)> {
    if std::mem::take(&mut s.announce) {
        let token = s.position.encode();
        return Some((Event::Position(token), s));
    }
    loop {
        if let Some(change) = s.pending.pop_front() {
            return Some((Event::Operation(Box::new(change.row), change.position.encode()), s));
        }
        match changes::after(&s.ctx.db, &s.filter, &s.position, PAGE).await {
            Ok(page) => {
                // A batch finished without changes moved the position: read on from it.
                let moved = page.next != s.position && !page.caught_up;
                s.position = page.next;
                s.pending = page.changes.into();
                if moved || !s.pending.is_empty() {
                    continue;
                }
            }
            Err(e) if e.is_transient() => tracing::debug!(error = %e, "event stream read failed; reading again"),
            Err(e) => {
                tracing::warn!(error = %e, "event stream read failed; ending the stream");
                return None;
            }
        }
        if !pause(&s.ctx, s.watch.changed()).await {
            return None;
        }
    }
}
