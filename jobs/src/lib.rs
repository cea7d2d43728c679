//! `context-jobs`: the functional core of context-ops. What each job *is* — payloads, the
//! operation state machine, wire contracts, codecs and scoring — as data and pure
//! functions. No I/O, no async runtime, no database: everything here is unit-testable.

pub mod artifact;
pub mod contract;
pub mod embed;
pub mod entries;
pub mod ids;
pub mod kinds;
pub mod operation;
pub mod recall;
pub mod recall_index;
pub mod responses;
pub mod retention;
pub mod text;
pub mod vector_codec;
