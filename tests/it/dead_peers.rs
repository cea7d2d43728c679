//! Every connection to PostgreSQL and Redis carries the TCP options that notice a dead
//! peer (`context_ops::tcp`): keepalive probes, a user timeout, and `TCP_NODELAY`. Read back
//! from the very sockets the service uses, found by the local port the server reports.
//! (A dead peer itself cannot be staged without a firewall: any in-process proxy's kernel
//! answers the probes.)

use context_ops::config::Config;
use context_ops::queue::Queue;
use context_ops::store::Db;
use context_ops::tcp::{Options, with_sockets_on_local_port};

use crate::harness::{Backend, fresh_database, redis_url, unique};

/// The options of our sockets bound to `local` and connected to `peer_port`.
fn options_of(local: u16, peer_port: u16) -> Vec<Options> {
    let mut found = Vec::new();
    with_sockets_on_local_port(local, |socket| {
        if socket.peer_addr().ok().and_then(|a| a.as_socket()).is_some_and(|a| a.port() == peer_port) {
            found.push(Options::of(socket).unwrap());
        }
    });
    found
}

#[tokio::test]
async fn pooled_postgres_connections_notice_a_dead_server() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database(Backend::Postgres, dir.path()).await;
    let Db::Postgres(pool) = Db::connect(&url, 2).await.unwrap() else { unreachable!("a PostgreSQL URL") };
    // Both connections of the pool at once, so they are two different sockets.
    let (mut a, mut b) = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
    let mut ports = Vec::new();
    for conn in [&mut a, &mut b] {
        let (local, server): (i32, i32) =
            sqlx::query_as("SELECT inet_client_port(), inet_server_port()").fetch_one(&mut **conn).await.unwrap();
        let (local, server) = (u16::try_from(local).unwrap(), u16::try_from(server).unwrap());
        ports.push(local);
        assert_eq!(options_of(local, server), vec![Options::expected()], "the connection from port {local}");
    }
    assert_ne!(ports[0], ports[1]);
}

#[tokio::test]
async fn the_queue_connection_to_redis_notices_a_dead_server() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database(Backend::Postgres, dir.path()).await;
    let db = Db::connect(&url, 2).await.unwrap();
    let mut config = Config::defaults();
    config.queue.redis_url = Some(redis_url());
    config.queue.queue_namespace = unique("tcp");
    let queue = Queue::connect(&config, &db).await.unwrap();
    let mut conn = queue.redis().expect("a Redis queue");
    // `addr=` is the client's address as Redis sees it: our socket's local address.
    let info: String = redis::cmd("CLIENT").arg("INFO").query_async(&mut conn).await.unwrap();
    let field = |name: &str| {
        info.split_whitespace().find_map(|f| f.strip_prefix(name)).unwrap_or_else(|| panic!("{name} in {info}"))
    };
    let port = |addr: &str| addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).unwrap();
    let (local, server) = (port(field("addr=")), port(field("laddr=")));
    assert_eq!(options_of(local, server), vec![Options::expected()], "the queue's connection ({info})");
}
