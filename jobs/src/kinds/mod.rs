//! Job payloads, one file per operation kind that carries more than a conversation id:
//! what is stored as the operation's `request` and what its worker decodes.

pub mod export;
pub mod import;
pub mod inference;
pub mod rebuild_vector;
