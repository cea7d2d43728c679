//! The vector projection: walks over a tenant's active entries in change order, the
//! index watermark, coverage and the recall index's change feeds ([`reads`]), and vector
//! writes fenced by entry version, moving the watermark in the same commit ([`writes`]).

pub mod reads;
pub mod writes;

pub use reads::{ToEmbed, WalkPage, coverage, projected_seq, walk_page, watermark};
pub use writes::{VectorBatch, Written, encode_all};

/// The texts to embed, in order: each entry's `content_text`.
pub fn texts(items: &[ToEmbed]) -> Vec<String> {
    items.iter().map(|e| context_jobs::entries::stored_entry_text(&e.content)).collect()
}
