//! The vector projection against both real databases: writing vectors (`store`), how a
//! rebuild's walk decides what to trust (`walks`), SIGKILL of the real binary in the
//! middle of a `rebuild_vector` operation (`rebuild_fault`), and the durable commit of
//! every write that takes a sequence (`durable`, PostgreSQL).

mod durable;
mod rebuild_fault;
mod store;
mod walks;
