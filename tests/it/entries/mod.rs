//! Entries: the HTTP endpoints (`api`) and the store interface other jobs build on
//! (`store`).

mod api;
mod store;
