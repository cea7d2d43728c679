//! What the CLI prints: with `--json`, one JSON document on stdout in the API's own shape
//! (the contract DTOs); otherwise lines for a person. Progress and notes go to stderr, so
//! stdout stays what a script reads.

use std::io::Write as _;

use serde::Serialize;

use context_jobs::contract::ConversationRecord;
use context_jobs::operation::view::{OperationList, OperationView};

/// Print `value` as one JSON document.
pub fn json(value: &impl Serialize) {
    // Every value printed here is a DTO that serializes (no maps with non-string keys).
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    println!("{text}");
}

/// A note for the person at the terminal (stderr).
pub fn note(text: impl AsRef<str>) {
    let _ = writeln!(std::io::stderr(), "{}", text.as_ref());
}

/// `2026-01-01T12:00:00Z` for epoch milliseconds (UTC; days from the civil calendar
/// algorithm, so no date library for one format).
pub fn time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Server text for a terminal: control characters written as escapes (`\u{1b}`), so a
/// stored message (or an error quoting one) cannot drive the terminal with escape
/// sequences. `--json` prints JSON, which escapes them itself.
fn shown(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

fn progress(op: &OperationView) -> String {
    let o = &op.operation;
    if o.total > 0 { format!("{}/{}", o.processed, o.total) } else { o.processed.to_string() }
}

/// An operation, for a person.
pub fn operation(op: &OperationView) {
    let o = &op.operation;
    println!("{}  {}  {}", o.id, o.kind.as_str(), o.state.as_str());
    let line = |key: &str, value: String| println!("  {key:<10} {value}");
    line("phase", shown(&o.phase));
    line("progress", progress(op));
    line("attempt", op.attempt.to_string());
    line("created", time(o.created_at_ms));
    line("updated", time(o.updated_at_ms));
    if let Some(t) = op.finished_at_ms {
        line("finished", time(t));
    }
    if let Some(artifact) = &o.artifact_ref {
        line("artifact", artifact.clone());
    }
    if let Some(code) = &o.error_code {
        line("errorCode", code.clone());
    }
    if let Some(error) = &o.error {
        line("error", shown(error));
    }
    if let Some(result) = &o.result {
        line("result", result.to_string());
    }
}

/// A page of operations as a table.
pub fn operations(list: &OperationList) {
    println!("{:<26}  {:<14}  {:<9}  {:<24}  {:>13}  CREATED", "ID", "KIND", "STATE", "PHASE", "PROGRESS");
    for op in &list.items {
        let o = &op.operation;
        let phase: String = shown(&o.phase).chars().take(24).collect();
        println!(
            "{:<26}  {:<14}  {:<9}  {phase:<24}  {:>13}  {}",
            o.id,
            o.kind.as_str(),
            o.state.as_str(),
            progress(op),
            time(o.created_at_ms)
        );
    }
}

/// Messages, one per line: sequence, role, text.
pub fn messages(items: &[ConversationRecord]) {
    for m in items {
        let text = shown(&context_jobs::contract::content_text(&m.content).replace('\n', " "));
        println!("{:>6}  {:<9}  {text}", m.sequence, m.role);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(super::shown("red \u{1b}[31mtext\r!\ttab ü"), "red \\u{1b}[31mtext\\u{d}!\\u{9}tab ü");
    }

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(super::time(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::time(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(super::time(1_767_225_600_000 + 3_723_000), "2026-01-01T01:02:03Z");
        assert_eq!(super::time(-1000), "1969-12-31T23:59:59Z");
    }
}
