//! Event streams of operations (issue 13): `GET …/operations/{id}/events` and
//! `GET …/operations/events`, read as a client reads them (the CLI's own SSE parser).
//!
//! - `resume`: `Last-Event-ID` resumes both streams with nothing seen twice and nothing
//!   missed; the list stream's order is commit order.
//! - `streams`: the terminal event ends a stream (and a client that has it gets 204), the
//!   data is exactly `GET …/operations/{id}`, heartbeats, tenant walls and admin scope,
//!   the cap on open streams, shutdown, bad input.
//! - `cross_process`: a change committed by a worker process reaches an API process's
//!   streams (on PostgreSQL by notification alone).
//! - `positions`: a read that finds nothing moves a filtered stream's position on.

mod cross_process;
mod positions;
mod resume;
mod streams;

use std::collections::VecDeque;
use std::time::Duration;

use context_jobs::contract::CONTEXT_OPERATIONS_PATH;
use context_jobs::operation::view::OperationView;
use context_ops::cli::sse::{Frame, Parser};
use serde_json::Value;

use crate::harness::OpClient;

/// How long one read waits: generous, as every test runs beside others.
const WITHIN: Duration = Duration::from_secs(30);

pub fn list_path(query: &str) -> String {
    format!("{CONTEXT_OPERATIONS_PATH}/events{query}")
}

pub fn op_path(id: &str) -> String {
    format!("{CONTEXT_OPERATIONS_PATH}/{id}/events")
}

/// An open event stream, read frame by frame.
pub struct EventStream {
    response: reqwest::Response,
    parser: Parser,
    frames: VecDeque<Frame>,
    ended: bool,
}

/// One operation event: its `id:` and its data.
pub struct OpEvent {
    pub id: String,
    pub op: OperationView,
    pub raw: Value,
}

impl EventStream {
    /// GET `path` as `api`'s caller (with `Last-Event-ID` when given); `Err((status,
    /// body))` unless it answers 200 with an event stream.
    pub async fn open(api: &OpClient, path: &str, last_event_id: Option<&str>) -> Result<EventStream, (u16, Value)> {
        let mut request = api.request(reqwest::Method::GET, path);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        if response.status() != 200 {
            return Err(crate::harness::read(response).await);
        }
        let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
        assert_eq!(content_type, "text/event-stream", "{path}");
        Ok(EventStream { response, parser: Parser::new(), frames: VecDeque::new(), ended: false })
    }

    /// [`Self::open`], which must succeed.
    pub async fn opened(api: &OpClient, path: &str, last_event_id: Option<&str>) -> EventStream {
        match Self::open(api, path, last_event_id).await {
            Ok(stream) => stream,
            Err((status, body)) => panic!("{path}: {status} {body}"),
        }
    }

    /// The next frame; `None` once the server ended the stream. Panics after `within`.
    pub async fn frame(&mut self, within: Duration) -> Option<Frame> {
        loop {
            if let Some(frame) = self.frames.pop_front() {
                return Some(frame);
            }
            if self.ended {
                return None;
            }
            let chunk = tokio::time::timeout(within, self.response.chunk())
                .await
                .unwrap_or_else(|_| panic!("no frame within {within:?}"))
                .expect("the stream failed");
            match chunk {
                Some(bytes) => self.frames.extend(self.parser.feed(&bytes)),
                None => self.ended = true,
            }
        }
    }

    /// The next operation event (skipping comments and bare positions); `None` at the end.
    /// Panics if none comes within [`WITHIN`] (heartbeats do not count).
    pub async fn operation(&mut self) -> Option<OpEvent> {
        let deadline = tokio::time::Instant::now() + WITHIN;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            assert!(!left.is_zero(), "no operation event within {WITHIN:?}");
            match self.frame(left).await? {
                Frame::Message(m) => {
                    let Some(data) = m.data else { continue };
                    let raw: Value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data}"));
                    let op = serde_json::from_value(raw.clone()).unwrap_or_else(|e| panic!("{e}: {data}"));
                    return Some(OpEvent { id: m.id.expect("every operation event has an id"), op, raw });
                }
                Frame::Comment(_) => {}
            }
        }
    }

    /// The next operation event, which must come.
    pub async fn expect_operation(&mut self) -> OpEvent {
        self.operation().await.expect("the stream ended early")
    }

    /// The first frame of a list stream that starts now: its position alone.
    pub async fn position(&mut self) -> String {
        match self.frame(WITHIN).await {
            Some(Frame::Message(m)) if m.data.is_none() => m.id.expect("a position has an id"),
            other => panic!("expected the stream's position first, got {other:?}"),
        }
    }
}
