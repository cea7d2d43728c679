//! The incremental decoder: bytes in (split anywhere, even mid-line or mid-character),
//! records out with their line numbers and the byte offset just past their line.
//!
//! Memory is bounded by the longest line ([`super::MAX_LINE_BYTES`]): complete lines are
//! parsed straight from the input and only a partial last line is buffered. Every failure
//! is a [`DecodeError`] naming its kind (a stable `errorCode`) and the line it was found on.

use std::borrow::Cow;

use serde::Deserialize;

use super::digest::ArtifactDigest;
use super::wire::{Header, Trailer};
use super::{MAX_LINE_BYTES, Record, SCHEMA_VERSION};
use crate::contract::{ContextInsight, ConversationRecord};
use crate::operation::ErrorCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeErrorKind {
    BadDigest,
    Truncated,
    BadLine,
    UnknownSchema,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct DecodeError {
    pub kind: DecodeErrorKind,
    /// 1-based line the problem was found on (0: the artifact as a whole).
    pub line: u64,
    pub message: String,
}

impl DecodeError {
    fn new(kind: DecodeErrorKind, line: u64, message: impl Into<String>) -> Self {
        Self { kind, line, message: message.into() }
    }

    /// The stable `errorCode` of this failure.
    pub fn code(&self) -> ErrorCode {
        match self.kind {
            DecodeErrorKind::BadDigest => ErrorCode::ArtifactBadDigest,
            DecodeErrorKind::Truncated => ErrorCode::ArtifactTruncated,
            DecodeErrorKind::BadLine => ErrorCode::ArtifactBadLine,
            DecodeErrorKind::UnknownSchema => ErrorCode::ArtifactUnknownSchema,
        }
    }

    fn describe(&self) -> String {
        if self.line == 0 { self.message.clone() } else { format!("line {}: {}", self.line, self.message) }
    }
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub line: u64,
    /// Offset just past this record's newline: where a resumed decoder continues.
    pub end_offset: u64,
    pub record: Record,
}

/// What a complete, well-formed artifact held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// `None` for a decoder resumed mid-artifact (it never saw the header).
    pub header: Option<Header>,
    pub messages: u64,
    pub entries: u64,
    pub bytes: u64,
    /// `None` for a resumed decoder (it never saw the first bytes).
    pub digest: Option<String>,
}

impl Summary {
    /// Fail with `artifact_bad_digest` unless the bytes hashed to `expected`.
    pub fn check_digest(&self, expected: &str) -> Result<(), DecodeError> {
        match &self.digest {
            Some(actual) if actual == expected => Ok(()),
            Some(actual) => Err(DecodeError::new(
                DecodeErrorKind::BadDigest,
                0,
                format!("the artifact's bytes hash to {actual}, not its recorded digest {expected}"),
            )),
            None => Err(DecodeError::new(DecodeErrorKind::BadDigest, 0, "a resumed decoder cannot check the digest")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Header,
    Body,
    Ended,
}

pub struct Decoder {
    buf: Vec<u8>,
    /// Offset of the first byte of `buf` (everything before it is consumed lines).
    consumed: u64,
    /// Lines completed so far.
    line: u64,
    stage: Stage,
    saw_entry: bool,
    messages: u64,
    entries: u64,
    header: Option<Header>,
    digest: Option<ArtifactDigest>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// Decode from the first byte, hashing everything.
    pub fn new() -> Self {
        Self {
            buf: Vec::new(),
            consumed: 0,
            line: 0,
            stage: Stage::Header,
            saw_entry: false,
            messages: 0,
            entries: 0,
            header: None,
            digest: Some(ArtifactDigest::new()),
        }
    }

    /// Decode from the first byte without hashing, for a pass whose bytes another pass
    /// checks against the digest (the import's importing pass: hashing 233 MiB costs
    /// ~0.12 s of CPU it shares with the validating pass).
    pub fn unhashed() -> Self {
        Self { digest: None, ..Self::new() }
    }

    /// Continue a validated artifact at a line boundary: `offset` is the byte after line
    /// `line`, which held the `messages`-th message and `entries`-th entry.
    pub fn resume(offset: u64, line: u64, messages: u64, entries: u64) -> Self {
        Self {
            consumed: offset,
            line,
            stage: Stage::Body,
            saw_entry: entries > 0,
            messages,
            entries,
            digest: None,
            ..Self::new()
        }
    }

    /// Feed the next bytes; complete records are pushed onto `out`.
    pub fn feed(&mut self, mut data: &[u8], out: &mut Vec<Decoded>) -> Result<(), DecodeError> {
        if let Some(d) = &mut self.digest {
            d.update(data);
        }
        while !data.is_empty() {
            let Some(newline) = memchr::memchr(b'\n', data) else {
                self.check_length(data.len())?;
                self.buf.extend_from_slice(data);
                break;
            };
            let (line, rest) = (&data[..newline], &data[newline + 1..]);
            data = rest;
            let end = self.consumed + (self.buf.len() + newline + 1) as u64;
            if self.buf.is_empty() {
                self.process(line, end, out)?;
            } else {
                self.check_length(line.len())?;
                let mut whole = std::mem::take(&mut self.buf);
                whole.extend_from_slice(line);
                self.process(&whole, end, out)?;
                whole.clear();
                self.buf = whole;
            }
            self.consumed = end;
        }
        Ok(())
    }

    /// End of input: the artifact must have ended with its trailer.
    pub fn finish(mut self) -> Result<Summary, DecodeError> {
        if !self.buf.is_empty() {
            // A last line without its newline: accepted if complete, truncated if cut off.
            let last = std::mem::take(&mut self.buf);
            if serde_json::from_slice::<serde::de::IgnoredAny>(&last).is_err_and(|e| e.is_eof()) {
                return Err(DecodeError::new(DecodeErrorKind::Truncated, self.line + 1, "the last line is cut off"));
            }
            let end = self.consumed + last.len() as u64;
            self.process(&last, end, &mut Vec::new())?;
            self.consumed = end;
        }
        match self.stage {
            Stage::Header => {
                Err(DecodeError::new(DecodeErrorKind::Truncated, 1, "the artifact is empty: no header line"))
            }
            Stage::Body => Err(DecodeError::new(
                DecodeErrorKind::Truncated,
                self.line + 1,
                "the artifact ends without its trailer line",
            )),
            Stage::Ended => Ok(Summary {
                header: self.header,
                messages: self.messages,
                entries: self.entries,
                bytes: self.consumed,
                digest: self.digest.map(ArtifactDigest::finish),
            }),
        }
    }

    fn check_length(&self, more: usize) -> Result<(), DecodeError> {
        if self.buf.len() + more > MAX_LINE_BYTES {
            return Err(DecodeError::new(
                DecodeErrorKind::BadLine,
                self.line + 1,
                format!("the line is longer than {MAX_LINE_BYTES} bytes"),
            ));
        }
        Ok(())
    }

    fn process(&mut self, bytes: &[u8], end_offset: u64, out: &mut Vec<Decoded>) -> Result<(), DecodeError> {
        self.line += 1;
        let line = self.line;
        let bad = |message: String| DecodeError::new(DecodeErrorKind::BadLine, line, message);
        // The one NUL rule (PostgreSQL cannot store it): the validating pass and the
        // importing pass run this same decoder, so no line the import would refuse gets
        // past validation.
        crate::contract::nul::check_json("the line", bytes).map_err(bad)?;
        match self.stage {
            Stage::Header => {
                self.header = Some(parse_header(bytes).map_err(|mut e| {
                    e.line = line;
                    e
                })?);
                self.stage = Stage::Body;
            }
            Stage::Ended => return Err(bad("data after the trailer line".into())),
            Stage::Body => match line_type(bytes).map_err(bad)?.as_ref() {
                "message" => {
                    if self.saw_entry {
                        return Err(bad("a message after the entries (messages come first)".into()));
                    }
                    let record: ConversationRecord =
                        serde_json::from_slice(bytes).map_err(|e| bad(format!("not a valid message record: {e}")))?;
                    validate_message(&record).map_err(|e| bad(format!("invalid message: {e}")))?;
                    self.messages += 1;
                    out.push(Decoded { line, end_offset, record: Record::Message(record) });
                }
                "entry" => {
                    let entry: ContextInsight =
                        serde_json::from_slice(bytes).map_err(|e| bad(format!("not a valid entry record: {e}")))?;
                    validate_entry(&entry).map_err(|e| bad(format!("invalid entry: {e}")))?;
                    self.saw_entry = true;
                    self.entries += 1;
                    out.push(Decoded { line, end_offset, record: Record::Entry(entry) });
                }
                "trailer" => {
                    let trailer: Trailer =
                        serde_json::from_slice(bytes).map_err(|e| bad(format!("not a valid trailer: {e}")))?;
                    if trailer.messages != self.messages || trailer.entries != self.entries {
                        return Err(DecodeError::new(
                            DecodeErrorKind::Truncated,
                            line,
                            format!(
                                "the trailer counts {} messages and {} entries but the artifact holds {} and {}",
                                trailer.messages, trailer.entries, self.messages, self.entries
                            ),
                        ));
                    }
                    self.stage = Stage::Ended;
                }
                "header" => return Err(bad("a second header line".into())),
                other => return Err(bad(format!("unknown record type {:?}", truncate(other)))),
            },
        }
        Ok(())
    }
}

/// The `type` of a line: a prefix check for what our encoder writes, else a parse.
fn line_type(bytes: &[u8]) -> Result<Cow<'_, str>, String> {
    const OURS: [(&[u8], &str); 3] = [
        (br#"{"type":"message","#, "message"),
        (br#"{"type":"entry","#, "entry"),
        (br#"{"type":"trailer","#, "trailer"),
    ];
    if let Some((_, known)) = OURS.iter().find(|(prefix, _)| bytes.starts_with(prefix)) {
        return Ok(Cow::Borrowed(known));
    }
    #[derive(Deserialize)]
    struct Probe<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<Cow<'a, str>>,
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("an empty line".into());
    }
    let probe: Probe<'_> = serde_json::from_slice(bytes).map_err(|e| format!("not a JSON object: {e}"))?;
    probe.kind.ok_or_else(|| "a record without a \"type\"".to_string())
}

fn parse_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    let bad = |m: String| DecodeError::new(DecodeErrorKind::BadLine, 1, m);
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("the header is not JSON: {e}")))?;
    if value.get("type").and_then(|t| t.as_str()) != Some("header") {
        return Err(bad("the first line must be the header".into()));
    }
    let version = value.get("schemaVersion").and_then(|v| v.as_u64());
    match version {
        None => return Err(bad("the header has no numeric schemaVersion".into())),
        Some(v) if v != u64::from(SCHEMA_VERSION) => {
            return Err(DecodeError::new(
                DecodeErrorKind::UnknownSchema,
                1,
                format!("schema version {v} is not supported (this build reads version {SCHEMA_VERSION})"),
            ));
        }
        Some(_) => {}
    }
    serde_json::from_value(value).map_err(|e| bad(format!("invalid header: {e}")))
}

/// The rules every record obeys, wherever it comes from (the contract module owns them).
fn validate_message(r: &ConversationRecord) -> Result<(), String> {
    crate::contract::validate_record(r)
}

/// The rules every imported entry obeys (the entries module owns them).
fn validate_entry(e: &ContextInsight) -> Result<(), String> {
    crate::entries::validate_imported_entry(e).map_err(|e| e.to_string())
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
