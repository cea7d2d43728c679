//! Messages and the conversation directory: the one sequence-assignment path ([`append`],
//! shared with import, writing [`stored`] batches), reads ([`reads`]), batched deletes for delete and retention
//! ([`deletes`]), and the conversation rows' barrier and counts ([`conversations`]).

pub mod append;
mod append_new;
pub mod conversations;
pub mod deletes;
mod message_rows;
pub mod reads;
pub mod stored;

pub use append::{Locked, append, append_in, insert_locked, lock_conversations};
pub use reads::{count_estimate, list_conversations, newest_through, page, recent, search};
pub use stored::StoredMessages;
