//! The streaming encoder: records in, fixed-size chunks out.
//!
//! Lines are appended to a carry buffer; every time it holds `chunk_bytes` a full chunk is
//! split off into the ready list. The shell takes the ready chunks, stores them, and
//! stores [`Encoder::state`] — position-independent: bytes already handed out, the carry,
//! the counts and the section — as its checkpoint, in the same transaction. Memory is
//! bounded by the chunk size plus whatever the shell leaves untaken, whatever the size of
//! the artifact. The shell may hand stored chunks back ([`Encoder::recycle`]): the next
//! chunks are written into them, so a long export reuses a few buffers instead of having
//! the allocator map (and the kernel fault in) a fresh megabyte per chunk.
//!
//! Resuming: the SHA-256 state of the bytes already handed out is not part of the
//! checkpoint. [`Encoder::resume`] takes a digest the shell rebuilt by streaming the
//! committed chunks once (constant memory, only after a crash), then hashes the carry on
//! top. An uninterrupted run never re-reads anything; a resumed one produces exactly the
//! same bytes and the same digest.

use serde::{Deserialize, Serialize};

use super::digest::ArtifactDigest;
use super::wire::{Header, LineRef, StoredColumns, Trailer};
use crate::contract::{ContextInsight, ConversationRecord};

/// Which records the encoder accepts next: messages, then entries, then nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    Messages,
    Entries,
    Done,
}

/// Everything needed to continue an encoding, serializable into a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EncoderState {
    /// Bytes handed out as chunks: the offset of the next chunk.
    pub emitted: u64,
    /// The partial chunk not handed out yet (base64 in JSON).
    #[serde(with = "base64_bytes")]
    pub carry: Vec<u8>,
    pub messages: u64,
    pub entries: u64,
    pub section: Section,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EncodeError {
    #[error("{0} cannot be written in the {1:?} section")]
    OutOfOrder(&'static str, Section),
    #[error("a record does not serialize: {0}")]
    Json(String),
}

/// The result of [`Encoder::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub digest: String,
    pub size_bytes: u64,
    pub messages: u64,
    pub entries: u64,
}

pub struct Encoder {
    chunk_bytes: usize,
    state: EncoderState,
    digest: ArtifactDigest,
    ready: Vec<Vec<u8>>,
    /// Emptied chunk buffers handed back by the shell, for the next chunks.
    spare: Vec<Vec<u8>>,
}

/// The capacity of a chunk buffer: room past the chunk for the line that completes it and
/// overhangs (a longer line grows the buffer as usual).
fn buffer_capacity(chunk_bytes: usize) -> usize {
    chunk_bytes + (chunk_bytes / 16).clamp(256, 64 * 1024)
}
/// Spare buffers kept at most: a few chunks' worth (the export commits four at a time);
/// more kept the peak memory higher for no measured gain.
const MAX_SPARE: usize = 4;

impl Encoder {
    /// A new artifact: the header line is written at once.
    pub fn new(chunk_bytes: usize, header: &Header) -> Self {
        let chunk_bytes = chunk_bytes.max(1);
        let carry = Vec::with_capacity(buffer_capacity(chunk_bytes));
        let state = EncoderState { emitted: 0, carry, messages: 0, entries: 0, section: Section::Messages };
        let mut encoder =
            Self { chunk_bytes, state, digest: ArtifactDigest::new(), ready: Vec::new(), spare: Vec::new() };
        encoder.line(&LineRef::Header(header)).expect("a header always serializes");
        encoder
    }

    /// Continue from a checkpointed `state`. `emitted` must be the digest of exactly the
    /// `state.emitted` bytes handed out before it.
    pub fn resume(chunk_bytes: usize, mut state: EncoderState, mut emitted: ArtifactDigest) -> Self {
        emitted.update(&state.carry);
        let chunk_bytes = chunk_bytes.max(1);
        state.carry.reserve(buffer_capacity(chunk_bytes).saturating_sub(state.carry.len()));
        let mut encoder = Self { chunk_bytes, state, digest: emitted, ready: Vec::new(), spare: Vec::new() };
        encoder.split_full_chunks();
        encoder
    }

    pub fn message(&mut self, record: &ConversationRecord) -> Result<(), EncodeError> {
        if self.state.section != Section::Messages {
            return Err(EncodeError::OutOfOrder("a message", self.state.section));
        }
        self.line(&LineRef::Message(record))?;
        self.state.messages += 1;
        Ok(())
    }

    /// A message straight from its stored columns (the same line as [`Self::message`]).
    pub fn stored_message(&mut self, message: &StoredColumns<'_>) -> Result<(), EncodeError> {
        if self.state.section != Section::Messages {
            return Err(EncodeError::OutOfOrder("a message", self.state.section));
        }
        let start = self.state.carry.len();
        if let Err(e) = message.write_line(&mut self.state.carry) {
            self.state.carry.truncate(start);
            return Err(EncodeError::Json(e));
        }
        self.end_line(start);
        self.state.messages += 1;
        Ok(())
    }

    pub fn entry(&mut self, entry: &ContextInsight) -> Result<(), EncodeError> {
        match self.state.section {
            Section::Messages => self.state.section = Section::Entries,
            Section::Entries => {}
            Section::Done => return Err(EncodeError::OutOfOrder("an entry", Section::Done)),
        }
        self.line(&LineRef::Entry(entry))?;
        self.state.entries += 1;
        Ok(())
    }

    /// Declare the messages done (so a checkpoint records it even before any entry).
    pub fn end_messages(&mut self) {
        if self.state.section == Section::Messages {
            self.state.section = Section::Entries;
        }
    }

    /// Write the trailer and make the last, possibly short, chunk ready.
    pub fn finish(&mut self) -> Result<Finished, EncodeError> {
        if self.state.section == Section::Done {
            return Err(EncodeError::OutOfOrder("the trailer", Section::Done));
        }
        let trailer = Trailer { messages: self.state.messages, entries: self.state.entries };
        self.line(&LineRef::Trailer(&trailer))?;
        self.state.section = Section::Done;
        if !self.state.carry.is_empty() {
            self.ready.push(std::mem::take(&mut self.state.carry));
        }
        Ok(Finished {
            digest: std::mem::take(&mut self.digest).finish(),
            size_bytes: self.state.emitted + self.ready_bytes() as u64,
            messages: self.state.messages,
            entries: self.state.entries,
        })
    }

    /// Bytes in chunks ready to be taken.
    pub fn ready_bytes(&self) -> usize {
        self.ready.iter().map(Vec::len).sum()
    }

    /// Hand out the ready chunks with their offsets. After this, [`Self::state`] describes
    /// an encoder whose output so far is exactly the chunks handed out.
    pub fn take_ready(&mut self) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::with_capacity(self.ready.len());
        for chunk in self.ready.drain(..) {
            let offset = self.state.emitted;
            self.state.emitted += chunk.len() as u64;
            out.push((offset, chunk));
        }
        out
    }

    /// Hand back a chunk taken with [`Self::take_ready`] once it is stored: a later chunk is
    /// written into its buffer. Its contents are discarded.
    pub fn recycle(&mut self, mut chunk: Vec<u8>) {
        if self.spare.len() < MAX_SPARE && chunk.capacity() >= self.chunk_bytes {
            chunk.clear();
            self.spare.push(chunk);
        }
    }

    /// The checkpointable state (meaningful once the ready chunks are taken).
    pub fn state(&self) -> &EncoderState {
        &self.state
    }

    fn line(&mut self, line: &LineRef<'_>) -> Result<(), EncodeError> {
        let start = self.state.carry.len();
        if let Err(e) = serde_json::to_writer(&mut self.state.carry, line) {
            self.state.carry.truncate(start);
            return Err(EncodeError::Json(e.to_string()));
        }
        self.end_line(start);
        Ok(())
    }

    /// The line that starts at `start` in the carry is written: end it, hash it, and split
    /// off any chunk it completed.
    fn end_line(&mut self, start: usize) {
        self.state.carry.push(b'\n');
        self.digest.update(&self.state.carry[start..]);
        self.split_full_chunks();
    }

    fn split_full_chunks(&mut self) {
        while self.state.carry.len() >= self.chunk_bytes {
            let mut next = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(buffer_capacity(self.chunk_bytes)));
            next.extend_from_slice(&self.state.carry[self.chunk_bytes..]);
            self.state.carry.truncate(self.chunk_bytes);
            self.ready.push(std::mem::replace(&mut self.state.carry, next));
        }
    }
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ConversationScope;
    use serde_json::{Value, json};

    fn message(i: usize) -> ConversationRecord {
        ConversationRecord {
            id: format!("m{i}"),
            scope: ConversationScope::conversation("c"),
            role: "user".into(),
            content: json!(format!("hello {i}")),
            name: None,
            tool_call_id: None,
            sequence: i as i64 + 1,
            created_at_ms: 1000 + i as i64,
            metadata: Value::Null,
        }
    }

    fn drain(enc: &mut Encoder, out: &mut Vec<u8>) {
        for (offset, chunk) in enc.take_ready() {
            assert_eq!(offset as usize, out.len(), "chunks are contiguous");
            out.extend_from_slice(&chunk);
        }
    }

    #[test]
    fn lines_have_the_documented_shape_and_chunks_are_fixed_size() {
        let mut enc = Encoder::new(64, &Header::new("t/p", 42));
        let mut out = Vec::new();
        for i in 0..10 {
            enc.message(&message(i)).unwrap();
            for (_, chunk) in enc.take_ready() {
                assert_eq!(chunk.len(), 64);
                out.extend_from_slice(&chunk);
            }
        }
        let finished = enc.finish().unwrap();
        drain(&mut enc, &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], r#"{"type":"header","schemaVersion":1,"tenant":"t/p","createdAtMs":42}"#);
        assert!(lines[1].starts_with(r#"{"type":"message","id":"m0","scope":{"conversationId":"c"},"role":"user""#));
        assert_eq!(lines[11], r#"{"type":"trailer","messages":10,"entries":0}"#);
        assert!(text.ends_with('\n'));
        assert_eq!(finished.size_bytes as usize, out.len());
        assert_eq!(finished.digest, ArtifactDigest::of(&out));
        assert_eq!(finished.messages, 10);
    }

    /// Chunks handed back are written again, and the artifact is the same bytes as
    /// without recycling. (Handed back with a capacity no fresh buffer has, so a chunk
    /// written into one is told apart from a new allocation at the same address.)
    #[test]
    fn recycled_chunks_are_reused_and_change_nothing() {
        const MARK: usize = 8192;
        let header = Header::new("t/p", 42);
        let (mut plain, mut recycling) = (Encoder::new(256, &header), Encoder::new(256, &header));
        let (mut expected, mut out) = (Vec::new(), Vec::new());
        let mut reused = 0;
        for i in 0..200 {
            plain.message(&message(i)).unwrap();
            recycling.message(&message(i)).unwrap();
            drain(&mut plain, &mut expected);
            for (offset, mut chunk) in recycling.take_ready() {
                assert_eq!(offset as usize, out.len());
                out.extend_from_slice(&chunk);
                reused += usize::from(chunk.capacity() >= MARK);
                chunk.reserve_exact(MARK);
                recycling.recycle(chunk);
            }
        }
        plain.finish().unwrap();
        let finished = recycling.finish().unwrap();
        drain(&mut plain, &mut expected);
        drain(&mut recycling, &mut out);
        assert_eq!(out, expected);
        assert_eq!(finished.digest, ArtifactDigest::of(&expected));
        assert!(expected.len() > 40 * 256, "many chunks: {}", expected.len());
        assert!(reused > 30, "chunks written into recycled buffers: {reused}");
    }

    #[test]
    fn stored_messages_write_the_record_line() {
        let mut full = message(3);
        full.name = Some("calc".into());
        full.tool_call_id = Some("call-1".into());
        full.metadata = json!({"b": [1, 2.5, null], "a": "é\n\"q\""});
        full.content = json!([{"type": "text", "text": "tab\there"}]);
        full.scope.agent_id = Some("agent".into());
        for record in [message(1), full] {
            let scope = serde_json::to_string(&record.scope).unwrap();
            let content = record.content.to_string();
            let metadata = (!record.metadata.is_null()).then(|| record.metadata.to_string());
            let stored = StoredColumns {
                id: &record.id,
                scope: &scope,
                role: &record.role,
                content: &content,
                name: record.name.as_deref(),
                tool_call_id: record.tool_call_id.as_deref(),
                sequence: record.sequence,
                created_at_ms: record.created_at_ms,
                metadata: metadata.as_deref(),
            };
            let mut typed = Encoder::new(1 << 20, &Header::new("t", 0));
            let mut raw = Encoder::new(1 << 20, &Header::new("t", 0));
            typed.message(&record).unwrap();
            raw.stored_message(&stored).unwrap();
            assert_eq!(typed.finish().unwrap(), raw.finish().unwrap());
        }
        let spans_lines = StoredColumns {
            id: "m",
            scope: "{\"conversationId\":\n\"c\"}",
            role: "user",
            content: "1",
            name: None,
            tool_call_id: None,
            sequence: 1,
            created_at_ms: 1,
            metadata: None,
        };
        let mut enc = Encoder::new(1 << 20, &Header::new("t", 0));
        assert!(matches!(enc.stored_message(&spans_lines), Err(EncodeError::Json(_))));
        assert_eq!(enc.state().messages, 0, "a refused message leaves nothing behind");
    }

    #[test]
    fn order_is_enforced() {
        let mut enc = Encoder::new(1024, &Header::new("t", 0));
        enc.end_messages();
        assert!(matches!(enc.message(&message(0)), Err(EncodeError::OutOfOrder(..))));
        enc.finish().unwrap();
        assert!(enc.finish().is_err());
    }

    #[test]
    fn resume_from_any_checkpoint_gives_identical_bytes() {
        let run = |stop_after: Option<usize>| {
            let mut enc = Encoder::new(50, &Header::new("t/p", 7));
            let mut out = Vec::new();
            for i in 0..20 {
                enc.message(&message(i)).unwrap();
                drain(&mut enc, &mut out);
                if stop_after == Some(i) {
                    // "Crash": keep only the committed bytes and the checkpoint JSON.
                    let saved = serde_json::to_string(enc.state()).unwrap();
                    let state: EncoderState = serde_json::from_str(&saved).unwrap();
                    let mut prefix = ArtifactDigest::new();
                    prefix.update(&out);
                    enc = Encoder::resume(50, state, prefix);
                }
            }
            let finished = enc.finish().unwrap();
            drain(&mut enc, &mut out);
            (out, finished)
        };
        let (whole, finished) = run(None);
        for stop in [0, 3, 11, 19] {
            let (resumed, f) = run(Some(stop));
            assert_eq!(resumed, whole, "resumed after record {stop}");
            assert_eq!(f, finished);
        }
    }
}
