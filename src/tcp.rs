//! The TCP options of every connection to a backing service (PostgreSQL, Redis): one
//! owner, so both agree on how soon a dead peer is noticed.
//!
//! A peer that vanishes without a word — a host that lost power, a NAT or firewall that
//! dropped the flow, a failover that moved the address — leaves a half-open connection.
//! Without these options a statement or command sent on it waits for the kernel's
//! retransmissions to give up (~15 minutes), an idle connection is never probed, and a
//! Redis subscription on it simply stops hearing anything. With them (Linux) the kernel
//! closes the connection once [`USER_TIMEOUT`] has passed since what we sent went
//! unanswered, or, on an idle connection, since the last answer to a keepalive probe
//! (probes start after [`KEEPALIVE_IDLE`]): the statement fails with a transient error (a
//! 503 at the edge, a retry in a job), the pool or the connection manager connects again,
//! and the change relay subscribes again. A send during the probing starts the count
//! again, so a peer that dies while its connection idles can take up to twice as long.
//!
//! The same timeout ends a connection whose peer keeps its receive window shut for that
//! long (Linux 5.11 and later): a `COPY` stalled behind a lock for over 30 s fails as a
//! transient error, and its job retries from its checkpoint.
//!
//! Leaf module: it imports nothing of the shell, so the store may use it.

use std::net::SocketAddr;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};

/// Idle time before the first keepalive probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// Time between unanswered probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the connection is closed where there is no user timeout
/// (on Linux [`USER_TIMEOUT`] decides instead).
pub const KEEPALIVE_PROBES: u32 = 3;
/// How long what we sent may stay unanswered before the connection is closed
/// (`TCP_USER_TIMEOUT`); with keepalive on, it also bounds the probing.
pub const USER_TIMEOUT: Duration = Duration::from_secs(30);

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
/// connects; Unix sockets are left alone). With `ca_pem`, a `rediss://` server must show a
/// certificate those PEM certificates issued; without, one of the public roots (the
/// Mozilla set bundled by `webpki-roots`, not the system's store).
pub fn redis_client(url: &str, ca_pem: Option<Vec<u8>>) -> redis::RedisResult<redis::Client> {
    use redis::IntoConnectionInfo as _;
    // The redis crate builds its TLS configuration from rustls's process default; install
    // aws-lc-rs unless one is there. reqwest uses the default when there is one and
    // aws-lc-rs otherwise, so its clients do not change with the order things start in;
    // sqlx names its own (ring).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let settings = redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive())
        .set_user_timeout(USER_TIMEOUT);
    let info = url.into_connection_info()?.set_tcp_settings(settings);
    match ca_pem {
        None => redis::Client::open(info),
        Some(root_cert) => {
            redis::Client::build_with_tls(info, redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) })
        }
    }
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

/// Every TCP socket of this process (Linux: found through `/proc/self/fd`), with its
/// local and peer addresses.
pub fn for_each_tcp_socket(mut f: impl FnMut(SockRef<'_>, SocketAddr, SocketAddr)) {
    use std::os::fd::BorrowedFd;
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return };
    for entry in fds.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if !std::fs::read_link(entry.path()).is_ok_and(|target| target.to_string_lossy().starts_with("socket:")) {
            continue;
        }
        // SAFETY: `fd` was open a moment ago and is a socket; borrowing it closes nothing.
        // If it was closed and reused meanwhile, the calls below only read its addresses
        // and set options on whatever socket it is now (harmless for any of ours).
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = SockRef::from(&fd);
        if !socket.r#type().is_ok_and(|t| t == socket2::Type::STREAM) {
            continue; // a datagram socket can be connected too
        }
        let (Some(local), Some(peer)) =
            (socket.local_addr().ok().and_then(|a| a.as_socket()), socket.peer_addr().ok().and_then(|a| a.as_socket()))
        else {
            continue; // a Unix socket, or not connected
        };
        f(socket, local, peer);
    }
}

/// Every TCP socket of this process connected to a peer's `port`.
pub fn with_sockets_to_peer_port(port: u16, mut f: impl FnMut(SockRef<'_>)) {
    for_each_tcp_socket(|socket, _, peer| {
        if peer.port() == port {
            f(socket);
        }
    });
}
