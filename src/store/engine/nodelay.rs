//! A workaround for sqlx 0.9.0, which no longer sets `TCP_NODELAY` on its sockets
//! (transact-rs/sqlx#4335; fixed upstream by #4336, not yet released). With Nagle's
//! algorithm on, the tail of any statement larger than a segment — a bulk insert, an
//! artifact chunk — can wait for the server's delayed ACK: 40 ms on Linux, per statement.
//!
//! After each PostgreSQL connection is made, the server tells us the connection's client
//! port (`inet_client_port()`); the process's own socket bound to that local port gets
//! `TCP_NODELAY`. Anything unusual — a Unix socket, a proxy in between, no `/proc` — finds
//! no match and changes nothing. Delete this module once sqlx sets the option itself.

use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd as _;

use sqlx::PgConnection;

/// Turn Nagle's algorithm off on `conn`'s socket, when it can be found.
pub async fn disable_nagle(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let port: Option<i32> = sqlx::query_scalar("SELECT inet_client_port()").fetch_one(&mut *conn).await?;
    if let Some(port) = port.and_then(|p| u16::try_from(p).ok()) {
        set_nodelay_on_local_port(port);
    }
    Ok(())
}

fn set_nodelay_on_local_port(port: u16) {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return };
    for entry in fds.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if !std::fs::read_link(entry.path()).is_ok_and(|target| target.to_string_lossy().starts_with("socket:")) {
            continue;
        }
        // SAFETY: `fd` was open a moment ago and is a socket; the stream is never dropped,
        // so the descriptor is not closed. If it was closed and reused meanwhile, the two
        // calls below only read its address and set an option on whatever socket it is.
        let stream = ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(fd) });
        // Every match, not the first: Linux may reuse one ephemeral port for connections
        // to different servers, and TCP_NODELAY on another of our sockets is harmless.
        if stream.local_addr().is_ok_and(|a| a.port() == port) {
            let _ = stream.set_nodelay(true);
        }
    }
}
