//! The socket options of each new PostgreSQL connection (`crate::tcp`): `TCP_NODELAY`,
//! which sqlx 0.9.0 no longer sets (transact-rs/sqlx#4335; fixed upstream by #4336, not yet
//! released) — with Nagle's algorithm on, the tail of any statement larger than a segment
//! can wait for the server's delayed ACK, 40 ms on Linux — and the keepalive and user
//! timeout that notice a dead server, for which sqlx has no option at all.
//!
//! sqlx does not hand out its socket, so after each connection is made every TCP socket of
//! the process connected to the server's port gets the options: the new one and, again,
//! the pool's others (the options are the same, and harmless on any other connection to
//! that port). Matching the port we dialled, not the address the server reports, works
//! through a proxy or a published container port too. A Unix socket needs none of it.

use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::postgres::PgConnectOptions;

/// Set the options on the sockets connected to `options`' server, when there are any.
pub fn harden(options: &PgConnectOptions) {
    if options.get_socket().is_some() {
        return;
    }
    let port = options.get_port();
    let mut found = false;
    crate::tcp::with_sockets_to_peer_port(port, |socket| {
        found = true;
        if let Err(e) = crate::tcp::apply(socket) {
            tracing::debug!(error = %e, port, "could not set a PostgreSQL socket's options");
        }
    });
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !found && !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(port, "no socket to PostgreSQL found: its connections go without keepalive and user timeout");
    }
}
