//! Following an operation to its end (`wait`, `submit --wait`): the event stream
//! (`GET …/operations/{id}/events`, resumed with `Last-Event-ID` after a broken
//! connection), falling back to long-polls (`GET …/operations/{id}/wait`) when the stream
//! is unavailable (an older service, a process at its stream limit, a proxy that cuts
//! streams). Each state seen moves the progress bar.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use tokio::time::Instant;

use super::client::Client;
use super::exit::{CliError, CliResult};
use super::progress::OperationBar;
use super::sse::{Frame, Parser};
use context_jobs::contract::CONTEXT_OPERATIONS_PATH;
use context_jobs::operation::view::OperationView;

/// Stream failures in a row before falling back to long-polls.
const STREAM_ATTEMPTS: u32 = 3;
/// One long-poll's wait (the service caps it at 30 s).
const LONG_POLL: Duration = Duration::from_secs(25);

/// How a follow ended.
pub struct Followed {
    /// The last state seen.
    pub op: OperationView,
    /// The deadline passed before the operation ended.
    pub timed_out: bool,
}

/// Follow `id` until it is terminal or `timeout` passes.
pub async fn follow(
    client: &Client,
    id: &str,
    timeout: Option<Duration>,
    bar: &mut OperationBar,
) -> CliResult<Followed> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut last: Option<OperationView> = None;
    let mut failures = 0;
    while failures < STREAM_ATTEMPTS {
        if timed_out(deadline) {
            return at_deadline(client, id, last).await;
        }
        let seen = version(&last);
        match stream(client, id, deadline, &mut last, bar).await {
            // What the stream last showed may be old by now: the state at the deadline is
            // read afresh.
            Ok(Some(followed)) if followed.timed_out => return at_deadline(client, id, Some(followed.op)).await,
            Ok(Some(followed)) => return Ok(followed),
            // The stream ended without the terminal state (the service shutting down):
            // connect again, resuming after the last version seen. One that ends showing
            // nothing new (a proxy that does not stream) counts as a failure, so the client
            // backs off and falls back to long-polls instead of reconnecting at once forever.
            Ok(None) if version(&last) > seen => failures = 0,
            Ok(None) => failures += 1,
            Err(e @ CliError::Api { status: 401 | 403, .. }) => return Err(e),
            // No stream route (an older service, a proxy that does not route it): long-polls,
            // if the operation itself is there.
            Err(CliError::Api { status: 404, .. }) => {
                let op: OperationView = client.get(&format!("{CONTEXT_OPERATIONS_PATH}/{id}")).await?;
                last = Some(op);
                break;
            }
            Err(_) => failures += 1,
        }
        if failures > 0 {
            tokio::time::sleep(Duration::from_millis(200 * u64::from(failures))).await;
        }
    }
    long_poll(client, id, deadline, last, bar).await
}

fn version(op: &Option<OperationView>) -> Option<u64> {
    op.as_ref().map(|op| op.operation.version)
}

/// The operation as it stands when the wait gives up: read afresh, or, if the service does
/// not answer that (it is why the wait ran out, perhaps), the last state seen.
async fn at_deadline(client: &Client, id: &str, last: Option<OperationView>) -> CliResult<Followed> {
    let path = format!("{CONTEXT_OPERATIONS_PATH}/{id}");
    let op: OperationView = match last {
        None => client.get(&path).await?,
        Some(last) => match tokio::time::timeout(AT_DEADLINE, client.get::<OperationView>(&path)).await {
            Ok(Ok(op)) => op,
            Ok(Err(e)) if !e.is_transient() => return Err(e),
            _ => last,
        },
    };
    let timed_out = !op.operation.state.is_terminal();
    Ok(Followed { op, timed_out })
}

/// How long the read at the deadline may take.
const AT_DEADLINE: Duration = Duration::from_secs(2);

fn timed_out(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// One connection to the event stream. `Ok(None)`: it ended before the terminal state.
async fn stream(
    client: &Client,
    id: &str,
    deadline: Option<Instant>,
    last: &mut Option<OperationView>,
    bar: &mut OperationBar,
) -> CliResult<Option<Followed>> {
    let mut request = client.request(Method::GET, &format!("{CONTEXT_OPERATIONS_PATH}/{id}/events"));
    if let Some(op) = last.as_ref() {
        request = request.header("last-event-id", op.operation.version.to_string());
    }
    let response = client.send(request).await?;
    if response.status() == StatusCode::NO_CONTENT {
        // We already have its terminal state.
        let op = match last.take() {
            Some(op) => op,
            None => client.get(&format!("{CONTEXT_OPERATIONS_PATH}/{id}")).await?,
        };
        return Ok(Some(Followed { op, timed_out: false }));
    }
    let mut response = client.check(response).await?;
    let mut parser = Parser::new();
    loop {
        let chunk = match deadline {
            Some(d) => match tokio::time::timeout_at(d, response.chunk()).await {
                Ok(chunk) => chunk,
                Err(_) => return Ok(last.take().map(|op| Followed { op, timed_out: true })),
            },
            None => response.chunk().await,
        };
        let Some(bytes) = chunk.map_err(|e| client.unreachable(&e))? else { return Ok(None) };
        for frame in parser.feed(&bytes) {
            let Frame::Message(message) = frame else { continue };
            let Some(data) = message.data else { continue };
            let op: OperationView = serde_json::from_str(&data).map_err(|e| CliError::Api {
                status: 200,
                message: format!("an event this client does not understand ({e})"),
            })?;
            bar.update(&op);
            let terminal = op.operation.state.is_terminal();
            *last = Some(op);
            if terminal {
                return Ok(last.take().map(|op| Followed { op, timed_out: false }));
            }
        }
        if timed_out(deadline) {
            return Ok(last.take().map(|op| Followed { op, timed_out: true }));
        }
    }
}

/// Long-polls until terminal or the deadline; transient failures are retried.
async fn long_poll(
    client: &Client,
    id: &str,
    deadline: Option<Instant>,
    mut last: Option<OperationView>,
    bar: &mut OperationBar,
) -> CliResult<Followed> {
    let mut failures = 0u32;
    loop {
        if let Some(op) = last.take_if(|op| op.operation.state.is_terminal() || timed_out(deadline)) {
            let timed_out = !op.operation.state.is_terminal();
            return Ok(Followed { op, timed_out });
        }
        let wait = deadline.map_or(LONG_POLL, |d| d.saturating_duration_since(Instant::now()).min(LONG_POLL));
        let path = match &last {
            Some(op) => format!(
                "{CONTEXT_OPERATIONS_PATH}/{id}/wait?sinceVersion={}&timeoutMs={}",
                op.operation.version,
                wait.as_millis().max(1)
            ),
            None => format!("{CONTEXT_OPERATIONS_PATH}/{id}"),
        };
        match client.get::<OperationView>(&path).await {
            Ok(op) => {
                failures = 0;
                bar.update(&op);
                last = Some(op);
            }
            Err(e) if e.is_transient() && failures < 30 && !timed_out(deadline) => {
                failures += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
