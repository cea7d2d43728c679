//! Bad input on both engines: NUL in any string field (`nul`), path and query parameters
//! that are not UTF-8 or not ids (`paths`), and what an operation that fails on the
//! database shows (`driver_text`), input that would be stored but not read back
//! (`read_back`). Every rejection is a 4xx `ApiError`, and nothing is stored.

mod driver_text;
mod edges;
mod nul;
mod paths;
mod read_back;
