//! The socket options of each new PostgreSQL connection (`crate::tcp`): `TCP_NODELAY`,
//! which sqlx 0.9.0 no longer sets (transact-rs/sqlx#4335; fixed upstream by #4336, not yet
//! released) — with Nagle's algorithm on, the tail of any statement larger than a segment
//! can wait for the server's delayed ACK, 40 ms on Linux — and the keepalive and user
//! timeout that notice a dead server, for which sqlx has no option at all.
//!
//! sqlx does not hand out its socket, so after each connection is made the server tells us
//! the connection's client port (`inet_client_port()`), and the process's own socket bound
//! to that local port gets the options. Anything unusual — a Unix socket, a proxy in
//! between, no `/proc` — finds no match and changes nothing.

use sqlx::PgConnection;

/// Set the options on `conn`'s socket, when it can be found.
pub async fn harden(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let port: Option<i32> = sqlx::query_scalar("SELECT inet_client_port()").fetch_one(&mut *conn).await?;
    if let Some(port) = port.and_then(|p| u16::try_from(p).ok()) {
        // Every match, not the first: the options are harmless on another of our sockets.
        crate::tcp::with_sockets_on_local_port(port, |socket| {
            if let Err(e) = crate::tcp::apply(socket) {
                tracing::debug!(error = %e, port, "could not set a PostgreSQL socket's options");
            }
        });
    }
    Ok(())
}
