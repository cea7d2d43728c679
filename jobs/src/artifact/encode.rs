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
#[path = "encode_tests.rs"]
mod tests;
