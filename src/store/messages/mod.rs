//! Messages and the conversation directory: the one sequence-assignment path ([`append`],
//! shared with import), reads ([`reads`]), batched deletes for delete and retention
//! ([`deletes`]), and the conversation rows' barrier and counts ([`conversations`]).

pub mod append;
pub mod conversations;
pub mod deletes;
pub mod reads;

pub use append::{append, append_in};
pub use reads::{count_estimate, list_conversations, newest_through, page, recent, search};
