//! The Redis relay of change announcements between processes (production): each process
//! publishes what it commits on one channel of its queue namespace and, where it serves the
//! API, subscribes to it and wakes its own watches for what the others committed.
//!
//! Publishing never waits on Redis: announcements go into a bounded outbox drained by a
//! task (pipelined, coalescing nothing — a message is a few dozen bytes); when the outbox is
//! full or Redis is away they are dropped and the watchers' periodic re-read finds the
//! change instead. After (re)subscribing, every watch of the process wakes once, since
//! whatever was published meanwhile was missed.

use std::time::Duration;

use futures::StreamExt as _;
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Changes;

/// Announcements waiting for the publisher; beyond this they are dropped (see above).
const OUTBOX: usize = 4096;
/// Messages sent in one pipeline.
const BATCH: usize = 256;
/// How long one pipeline may take before its messages are given up.
const PUBLISH_TIMEOUT: Duration = Duration::from_millis(500);
/// Pause before reconnecting a failed subscription.
const RECONNECT: Duration = Duration::from_secs(1);

/// One announcement: an operation's change, or many operations' (`tenant` `None`: of every
/// tenant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    Operation { id: &'a str, tenant: &'a str },
    Many { tenant: Option<&'a str> },
}

impl<'a> Change<'a> {
    /// `{origin} {id|*} {tenant|*}`: operation ids (ULIDs) hold no space; the tenant goes
    /// last so that it may.
    fn encode(&self, origin: &str) -> String {
        match self {
            Change::Operation { id, tenant } => format!("{origin} {id} {tenant}"),
            Change::Many { tenant } => format!("{origin} * {}", tenant.unwrap_or("*")),
        }
    }

    /// The change and the process that published it; `None` for anything else.
    fn decode(payload: &'a str) -> Option<(&'a str, Change<'a>)> {
        let mut parts = payload.splitn(3, ' ');
        let (origin, id, tenant) = (parts.next()?, parts.next()?, parts.next()?);
        let change = match (id, tenant) {
            ("*", "*") => Change::Many { tenant: None },
            ("*", tenant) => Change::Many { tenant: Some(tenant) },
            (id, tenant) => Change::Operation { id, tenant },
        };
        Some((origin, change))
    }
}

/// The sending side, held by [`Changes`] once the relay is attached.
pub(super) struct Outbox {
    origin: String,
    tx: mpsc::Sender<String>,
}

impl Outbox {
    pub(super) fn send(&self, change: Change<'_>) {
        // Full (Redis slow or away): dropped; the watchers' re-read covers it.
        let _ = self.tx.try_send(change.encode(&self.origin));
    }
}

/// The channel of namespace `namespace`.
pub fn channel(namespace: &str) -> String {
    format!("{namespace}:operation-changes")
}

impl Changes {
    /// Attach the Redis relay at `redis_url`: publish this process's announcements on the
    /// namespace's channel and, with `subscribe` (a process serving the API), wake this
    /// process's watches for other processes' changes. Runs until `shutdown`.
    pub fn spawn_relay(
        &self,
        client: redis::Client,
        namespace: &str,
        subscribe: bool,
        shutdown: CancellationToken,
    ) -> anyhow::Result<Vec<JoinHandle<anyhow::Result<()>>>> {
        let origin = ulid::Ulid::generate().to_string();
        let channel = channel(namespace);
        let (tx, rx) = mpsc::channel(OUTBOX);
        if self.inner.relay.set(Outbox { origin: origin.clone(), tx }).is_err() {
            anyhow::bail!("the change relay is already attached");
        }
        let mut tasks = vec![tokio::spawn(publish(client.clone(), channel.clone(), rx, shutdown.clone()))];
        if subscribe {
            tasks.push(tokio::spawn(follow(self.clone(), client, channel, origin, shutdown)));
        }
        Ok(tasks)
    }
}

async fn publish(
    client: redis::Client,
    channel: String,
    mut rx: mpsc::Receiver<String>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut conn: Option<ConnectionManager> = None;
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            n = rx.recv_many(&mut batch, BATCH) => if n == 0 { return Ok(()) },
        }
        if conn.is_none() {
            conn = tokio::time::timeout(PUBLISH_TIMEOUT, ConnectionManager::new(client.clone()))
                .await
                .ok()
                .and_then(Result::ok);
        }
        if let Some(c) = conn.as_mut() {
            let mut pipe = redis::pipe();
            for message in &batch {
                pipe.publish(&channel, message).ignore();
            }
            match tokio::time::timeout(PUBLISH_TIMEOUT, pipe.query_async::<()>(c)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(error = %e, "publishing operation changes failed; watchers re-read"),
                Err(_) => tracing::debug!("publishing operation changes timed out; watchers re-read"),
            }
        }
        batch.clear();
    }
}

async fn follow(
    changes: Changes,
    client: redis::Client,
    channel: String,
    origin: String,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    loop {
        let failed = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            e = follow_once(&changes, &client, &channel, &origin) => e,
        };
        tracing::warn!(error = %failed, "operation change relay lost; long-polls and streams re-read until it is back");
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(RECONNECT) => {}
        }
    }
}

/// Follow the channel until the subscription fails; the failure.
async fn follow_once(changes: &Changes, client: &redis::Client, channel: &str, origin: &str) -> anyhow::Error {
    let mut pubsub = match client.get_async_pubsub().await {
        Ok(p) => p,
        Err(e) => return e.into(),
    };
    if let Err(e) = pubsub.subscribe(channel).await {
        return e.into();
    }
    // Whatever was published before the subscription took hold was missed.
    changes.wake_many(None);
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let Ok(payload) = message.get_payload::<String>() else { continue };
        match Change::decode(&payload) {
            Some((from, _)) if from == origin => {}
            Some((_, change)) => changes.received(change),
            None => tracing::debug!(payload, "unreadable operation change announcement ignored"),
        }
    }
    anyhow::anyhow!("the subscription ended")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_round_trip_with_tenants_holding_spaces() {
        for change in [
            Change::Operation { id: "01K0ABC", tenant: "acme/prod" },
            Change::Operation { id: "01K0ABC", tenant: "a tenant/with spaces" },
            Change::Many { tenant: Some("acme/prod") },
            Change::Many { tenant: None },
        ] {
            let encoded = change.encode("origin-1");
            assert_eq!(Change::decode(&encoded), Some(("origin-1", change)), "{encoded}");
        }
        assert_eq!(Change::decode("no-spaces"), None);
        assert_eq!(Change::decode("origin only"), None);
    }
}
