//! SQLite's own statement API for bulk writes: one prepared statement stepped once per row
//! inside the caller's transaction, on the connection's handle (locked out from sqlx's
//! worker thread for the duration). Through sqlx every row's arguments are boxed, copied and
//! shipped to the worker thread, and a multi-row statement is one enormous bind; stepping a
//! single-row statement over borrowed data is the way SQLite itself is fastest (the
//! `execute_rows` of Python's `sqlite3`, for instance).

use std::ffi::{CStr, CString, c_int};
use std::ptr::NonNull;

use libsqlite3_sys as ffi;
use sqlx::SqliteConnection;

/// One bound value, borrowed for the call.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Text(&'a str),
    Int(i64),
    Blob(&'a [u8]),
}

/// Finalizes the statement however the call ends.
struct Statement(NonNull<ffi::sqlite3_stmt>);

impl Drop for Statement {
    fn drop(&mut self) {
        // SAFETY: the statement was prepared on a handle that is still locked by the caller
        // and is finalized exactly once, here.
        unsafe { ffi::sqlite3_finalize(self.0.as_ptr()) };
    }
}

fn error(db: *mut ffi::sqlite3, rc: c_int, what: &str) -> sqlx::Error {
    // SAFETY: `db` is the open, locked handle; the message is copied out at once.
    let message = unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(db)) }.to_string_lossy().into_owned();
    sqlx::Error::Protocol(format!("SQLite {what} failed ({rc}): {message}"))
}

/// Run `sql` (parameters `?1`, `?2`, …) once per row, each row's values bound in order;
/// returns the rows changed in all. Every value must outlive the call (they are bound
/// without a copy).
pub async fn execute_rows<'a, I>(conn: &mut SqliteConnection, sql: &str, rows: I) -> Result<u64, sqlx::Error>
where
    I: IntoIterator<Item = &'a [Arg<'a>]>,
{
    let sql = CString::new(sql).map_err(|e| sqlx::Error::Protocol(format!("statement text: {e}")))?;
    let mut handle = conn.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    let mut raw = std::ptr::null_mut();
    // SAFETY: `db` is open and ours while `handle` is held; `sql` is NUL-terminated.
    let rc = unsafe { ffi::sqlite3_prepare_v2(db, sql.as_ptr(), -1, &mut raw, std::ptr::null_mut()) };
    let statement = match NonNull::new(raw) {
        Some(statement) if rc == ffi::SQLITE_OK => Statement(statement),
        _ => return Err(error(db, rc, "prepare")),
    };
    let stmt = statement.0.as_ptr();
    let mut changed = 0u64;
    for row in rows {
        for (i, arg) in row.iter().enumerate() {
            let index = i as c_int + 1;
            // SAFETY: `stmt` is a live statement of `db`; the data pointers stay valid until
            // the statement is finalized (`SQLITE_STATIC`: the caller's values outlive it).
            let rc = unsafe {
                match arg {
                    Arg::Text(s) => {
                        ffi::sqlite3_bind_text(stmt, index, s.as_ptr().cast(), s.len() as c_int, ffi::SQLITE_STATIC())
                    }
                    Arg::Int(v) => ffi::sqlite3_bind_int64(stmt, index, *v),
                    Arg::Blob(b) => {
                        ffi::sqlite3_bind_blob(stmt, index, b.as_ptr().cast(), b.len() as c_int, ffi::SQLITE_STATIC())
                    }
                }
            };
            if rc != ffi::SQLITE_OK {
                return Err(error(db, rc, "bind"));
            }
        }
        // SAFETY: as above; a step error is read before the reset clears it.
        unsafe {
            let rc = ffi::sqlite3_step(stmt);
            if rc != ffi::SQLITE_DONE {
                let e = error(db, rc, "step");
                ffi::sqlite3_reset(stmt);
                return Err(e);
            }
            changed += ffi::sqlite3_changes(db) as u64;
            ffi::sqlite3_reset(stmt);
        }
    }
    Ok(changed)
}
