//! The export/import artifact: a line-oriented format owned here, and nowhere else.
//!
//! ```text
//! {"type":"header","schemaVersion":1,"tenant":"t/p","createdAtMs":1700000000000}
//! {"type":"message", …ConversationRecord…}      one per line, conversation/sequence order
//! {"type":"entry", …ContextInsight…}            one per line, id order, after all messages
//! {"type":"trailer","messages":N,"entries":M}
//! ```
//!
//! Every line ends with `\n`. The digest is `sha256:<hex>` of the whole byte stream.
//! [`Encoder`] turns records into fixed-size chunks (records in, bytes out, a carry buffer
//! for the partial chunk) and can be resumed from a serializable [`EncoderState`];
//! [`Decoder`] turns bytes — split anywhere, even mid-line — back into records with their
//! line numbers, failing with a typed [`DecodeError`] whose [`DecodeError::code`] is a
//! stable operation `errorCode`.

mod decode;
mod digest;
mod encode;
mod wire;

pub use decode::{DecodeError, DecodeErrorKind, Decoded, Decoder, Summary};
pub use digest::{ArtifactDigest, is_digest};
pub use encode::{EncodeError, Encoder, EncoderState, Finished, Section};
pub use wire::*;

/// The schema version this build writes and the only one it reads.
pub const SCHEMA_VERSION: u32 = 1;

/// A line longer than this is rejected (`artifact_bad_line`) instead of buffered: it keeps
/// the decoder's memory bounded whatever it is fed. The largest record an append accepts
/// is far smaller (the whole append body is capped at 8 MiB).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One record of the artifact body.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Message(crate::contract::ConversationRecord),
    Entry(crate::contract::ContextInsight),
}
