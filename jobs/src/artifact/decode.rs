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
use super::{MAX_LINE_BYTES, Record, SCHEMA_VERSION, error_code};
use crate::contract::{ContextInsight, ConversationRecord, validate_resource_id, validate_roles, validate_scope};

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
    pub fn code(&self) -> &'static str {
        match self.kind {
            DecodeErrorKind::BadDigest => error_code::BAD_DIGEST,
            DecodeErrorKind::Truncated => error_code::TRUNCATED,
            DecodeErrorKind::BadLine => error_code::BAD_LINE,
            DecodeErrorKind::UnknownSchema => error_code::UNKNOWN_SCHEMA,
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

fn validate_message(r: &ConversationRecord) -> Result<(), String> {
    validate_resource_id("id", &r.id)?;
    validate_scope(&r.scope)?;
    validate_roles(std::slice::from_ref(&r.role))?;
    if r.created_at_ms < 0 {
        return Err("createdAtMs must not be negative".into());
    }
    Ok(())
}

/// The rules every entry write obeys (the entries module owns them).
fn validate_entry(e: &ContextInsight) -> Result<(), String> {
    crate::entries::validate_entry(e).map_err(|e| e.to_string())
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::{Encoder, header_line};
    use crate::contract::{ContextInsightKind, ContextInsightStatus, ContextProvenance, ConversationScope};
    use serde_json::{Value, json};

    fn message(i: usize) -> ConversationRecord {
        ConversationRecord {
            id: format!("m{i}"),
            scope: ConversationScope::conversation(format!("c{}", i / 3)),
            role: "assistant".into(),
            content: json!([{"type": "text", "text": format!("é∑ {i}")}]),
            name: None,
            tool_call_id: None,
            sequence: i as i64 + 1,
            created_at_ms: 5,
            metadata: json!({"k": i}),
        }
    }

    fn entry(i: usize) -> ContextInsight {
        ContextInsight {
            id: format!("e{i}"),
            kind: ContextInsightKind::Fact,
            content: json!("sky is blue"),
            attributes: Value::Null,
            version: 1,
            status: ContextInsightStatus::Active,
            provenance: ContextProvenance {
                conversation_id: "c0".into(),
                message_ids: vec!["m0".into()],
                extractor_ref: None,
                observed_at_ms: 3,
            },
            superseded_by: None,
            expires_at_ms: None,
            created_at_ms: 1,
            updated_at_ms: 2,
        }
    }

    fn artifact(messages: usize, entries: usize) -> (Vec<u8>, String) {
        let mut enc = Encoder::new(37, &Header::new("t/p", 9));
        for i in 0..messages {
            enc.message(&message(i)).unwrap();
        }
        for i in 0..entries {
            enc.entry(&entry(i)).unwrap();
        }
        let finished = enc.finish().unwrap();
        let bytes: Vec<u8> = enc.take_ready().into_iter().flat_map(|(_, c)| c).collect();
        (bytes, finished.digest)
    }

    fn decode_in(bytes: &[u8], piece: usize) -> Result<(Vec<Decoded>, Summary), DecodeError> {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        for part in bytes.chunks(piece.max(1)) {
            decoder.feed(part, &mut out)?;
        }
        Ok((out, decoder.finish()?))
    }

    fn lines_to_bytes(lines: &[String]) -> Vec<u8> {
        lines.iter().flat_map(|l| format!("{l}\n").into_bytes()).collect()
    }

    fn error(bytes: &[u8]) -> DecodeError {
        decode_in(bytes, 7).expect_err("must fail")
    }

    #[test]
    fn round_trips_whatever_the_split() {
        let (bytes, digest) = artifact(7, 3);
        for piece in [1, 2, 3, 5, 64, bytes.len()] {
            let (records, summary) = decode_in(&bytes, piece).unwrap();
            assert_eq!(records.len(), 10);
            assert_eq!(records[0].record, Record::Message(message(0)));
            assert_eq!(records[7].record, Record::Entry(entry(0)));
            assert_eq!(records[0].line, 2);
            let trailer = r#"{"type":"trailer","messages":7,"entries":3}"#.len() + 1;
            assert_eq!(records.last().unwrap().end_offset as usize, bytes.len() - trailer);
            assert_eq!(summary.messages, 7);
            assert_eq!(summary.entries, 3);
            assert_eq!(summary.bytes as usize, bytes.len());
            assert_eq!(summary.header, Some(Header::new("t/p", 9)));
            summary.check_digest(&digest).unwrap();
        }
    }

    #[test]
    fn resumes_at_a_record_boundary() {
        let (bytes, _) = artifact(6, 2);
        let (all, _) = decode_in(&bytes, 1000).unwrap();
        let cut = &all[3];
        let mut decoder = Decoder::resume(cut.end_offset, cut.line, 4, 0);
        let mut out = Vec::new();
        decoder.feed(&bytes[cut.end_offset as usize..], &mut out).unwrap();
        let summary = decoder.finish().unwrap();
        assert_eq!(out, all[4..].to_vec());
        assert_eq!(summary.messages, 6);
        assert!(summary.digest.is_none());
    }

    #[test]
    fn each_failure_has_its_code_and_line() {
        let (bytes, digest) = artifact(3, 1);
        let text = String::from_utf8(bytes.clone()).unwrap();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();

        let (_, summary) = decode_in(&bytes, 10).unwrap();
        let mut tampered = digest.clone();
        tampered.replace_range(10..11, if &digest[10..11] == "0" { "1" } else { "0" });
        let e = summary.check_digest(&tampered).unwrap_err();
        assert_eq!(e.code(), "artifact_bad_digest");

        // Truncated: cut mid-line, missing trailer, empty, trailer counts off.
        let e = error(&bytes[..bytes.len() - 10]);
        assert_eq!((e.code(), e.line), ("artifact_truncated", 6));
        let e = error(&lines_to_bytes(&lines[..5]));
        assert_eq!((e.code(), e.line), ("artifact_truncated", 6), "{e}");
        assert_eq!(error(b"").code(), "artifact_truncated");
        let mut short = lines.clone();
        short.remove(2);
        let e = error(&lines_to_bytes(&short));
        assert_eq!((e.code(), e.line), ("artifact_truncated", 5), "{e}");

        // Bad lines: garbage, unknown type, order, after trailer, invalid record, blank.
        for (index, replacement, expected_line) in [
            (2, "{not json".to_string(), 3),
            (2, r#"{"type":"vector","id":"x"}"#.to_string(), 3),
            (1, lines[4].clone(), 3),
            (2, r#"{"type":"message","id":"","scope":{"conversationId":"c"},"role":"user","content":"x"}"#.into(), 3),
            (
                2,
                r#"{"type":"message","id":"m","scope":{"conversationId":"c"},"role":"wizard","content":"x"}"#.into(),
                3,
            ),
            (3, String::new(), 4),
            (0, lines[5].clone(), 1),
        ] {
            let mut bad = lines.clone();
            bad[index] = replacement;
            let e = error(&lines_to_bytes(&bad));
            assert_eq!((e.code(), e.line), ("artifact_bad_line", expected_line), "{e}");
            assert!(e.to_string().starts_with(&format!("line {expected_line}: ")), "{e}");
        }
        let mut after = lines.clone();
        after.push(lines[1].clone());
        let e = error(&lines_to_bytes(&after));
        assert_eq!((e.code(), e.line), ("artifact_bad_line", 7));
        assert_eq!(error(br#"{"type":"hea"#).code(), "artifact_truncated", "a header cut off at EOF");
        assert_eq!(error(&[b'x'; 10]).code(), "artifact_bad_line", "junk is not a cut-off line");
        let mut invalid_utf8 = lines_to_bytes(&lines);
        invalid_utf8[lines[0].len() + 10] = 0xff;
        assert_eq!(error(&invalid_utf8).code(), "artifact_bad_line");

        // Unknown schema version.
        let mut v2 = lines.clone();
        v2[0] = header_line(&Header { schema_version: 2, ..Header::new("t/p", 9) });
        let e = error(&lines_to_bytes(&v2));
        assert_eq!((e.code(), e.line), ("artifact_unknown_schema", 1));
    }

    #[test]
    fn a_last_line_without_newline_is_accepted_when_complete() {
        let (bytes, _) = artifact(2, 0);
        let (records, summary) = decode_in(&bytes[..bytes.len() - 1], 4).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(summary.bytes as usize, bytes.len() - 1);
    }

    #[test]
    fn overlong_lines_are_rejected_without_buffering_them() {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        let header = format!("{}\n", header_line(&Header::new("t", 0)));
        decoder.feed(header.as_bytes(), &mut out).unwrap();
        let block = vec![b' '; 1024 * 1024];
        let mut result = Ok(());
        for _ in 0..17 {
            result = decoder.feed(&block, &mut out);
            if result.is_err() {
                break;
            }
        }
        let e = result.unwrap_err();
        assert_eq!((e.code(), e.line), ("artifact_bad_line", 2));
    }
}
