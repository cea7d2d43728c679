//! The TCP options of every connection to a backing service (PostgreSQL, Redis): one
//! owner, so both agree on how soon a dead peer is noticed.
//!
//! A peer that vanishes without a word — a host that lost power, a NAT or firewall that
//! dropped the flow, a failover that moved the address — leaves a half-open connection.
//! Without these options a statement or command sent on it waits for the kernel's
//! defaults (~15 minutes of retransmissions; two hours before an idle one is probed), and a
//! Redis subscription on it simply stops hearing anything. With them the kernel closes the
//! connection within [`DEAD_PEER_AFTER`]: the statement fails with a transient error (a
//! 503 at the edge, a retry in a job), the pool or the connection manager makes a new
//! connection, and the change relay subscribes again.
//!
//! Leaf module: it imports nothing of the shell, so the store may use it.

use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};

/// Idle time before the first keepalive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// Time between unanswered probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the connection is closed.
pub const KEEPALIVE_PROBES: u32 = 3;
/// How long sent data may stay unacknowledged before the connection is closed
/// (`TCP_USER_TIMEOUT`); with keepalive on, it also bounds the probing.
pub const USER_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a dead peer goes unnoticed, idle or busy.
pub const DEAD_PEER_AFTER: Duration = Duration::from_secs(30);

const _: () = assert!(
    KEEPALIVE_IDLE.as_secs() + KEEPALIVE_INTERVAL.as_secs() * KEEPALIVE_PROBES as u64 <= DEAD_PEER_AFTER.as_secs()
        && USER_TIMEOUT.as_secs() <= DEAD_PEER_AFTER.as_secs()
);

fn keepalive() -> TcpKeepalive {
    TcpKeepalive::new().with_time(KEEPALIVE_IDLE).with_interval(KEEPALIVE_INTERVAL).with_retries(KEEPALIVE_PROBES)
}

/// Set the options on an open socket: keepalive probes, the user timeout, and
/// `TCP_NODELAY` (requests and answers are small and latency-bound).
pub fn apply(socket: SockRef<'_>) -> std::io::Result<()> {
    socket.set_tcp_nodelay(true)?;
    socket.set_tcp_keepalive(&keepalive())?;
    socket.set_tcp_user_timeout(Some(USER_TIMEOUT))
}

/// A Redis client whose connections get the same options (set by the redis crate as it
/// connects; Unix sockets are left alone).
pub fn redis_client(url: &str) -> redis::RedisResult<redis::Client> {
    use redis::IntoConnectionInfo as _;
    let settings = redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive())
        .set_user_timeout(USER_TIMEOUT);
    redis::Client::open(url.into_connection_info()?.set_tcp_settings(settings))
}

/// The options as a socket has them, to check them (tests, diagnostics).
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    pub nodelay: bool,
    pub keepalive: bool,
    pub keepalive_idle: Duration,
    pub keepalive_interval: Duration,
    pub keepalive_probes: u32,
    pub user_timeout: Option<Duration>,
}

impl Options {
    /// What [`apply`] sets.
    pub fn expected() -> Self {
        Self {
            nodelay: true,
            keepalive: true,
            keepalive_idle: KEEPALIVE_IDLE,
            keepalive_interval: KEEPALIVE_INTERVAL,
            keepalive_probes: KEEPALIVE_PROBES,
            user_timeout: Some(USER_TIMEOUT),
        }
    }

    pub fn of(socket: SockRef<'_>) -> std::io::Result<Self> {
        Ok(Self {
            nodelay: socket.tcp_nodelay()?,
            keepalive: socket.keepalive()?,
            keepalive_idle: socket.tcp_keepalive_time()?,
            keepalive_interval: socket.tcp_keepalive_interval()?,
            keepalive_probes: socket.tcp_keepalive_retries()?,
            user_timeout: socket.tcp_user_timeout()?,
        })
    }
}

/// Every TCP socket of this process bound to local `port` (Linux: found through
/// `/proc/self/fd`), handed to `f`. Several can match: Linux may reuse one ephemeral
/// port for connections to different servers.
pub fn with_sockets_on_local_port(port: u16, mut f: impl FnMut(SockRef<'_>)) {
    use std::os::fd::BorrowedFd;
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return };
    for entry in fds.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if !std::fs::read_link(entry.path()).is_ok_and(|target| target.to_string_lossy().starts_with("socket:")) {
            continue;
        }
        // SAFETY: `fd` was open a moment ago and is a socket; borrowing it closes nothing.
        // If it was closed and reused meanwhile, the calls below only read its address and
        // set options on whatever socket it is now (harmless for any of ours).
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = SockRef::from(&fd);
        if socket.local_addr().ok().and_then(|a| a.as_socket()).is_some_and(|a| a.port() == port) {
            f(socket);
        }
    }
}
