//! Every connection to PostgreSQL and Redis carries the TCP options that notice a dead
//! peer (`context_ops::tcp`): keepalive probes, a user timeout, and `TCP_NODELAY`. Read back
//! from the very sockets the service uses: the pool's, the queue's and the change relay's
//! subscription, each found by the local port the server reports for it. (A dead peer
//! itself is not staged here: that takes the host's traffic control.)

use std::str::FromStr as _;

use context_ops::changes::Changes;
use context_ops::config::Config;
use context_ops::queue::Queue;
use context_ops::store::Db;
use context_ops::tcp::{Options, for_each_tcp_socket};
use redis::IntoConnectionInfo as _;
use tokio_util::sync::CancellationToken;

use crate::harness::wait::relay_subscribed;
use crate::harness::{Backend, fresh_database, redis_url, unique};

/// The options of our sockets bound to local port `local` and connected to `peer_port`.
fn options_of(local: u16, peer_port: u16) -> Vec<Options> {
    let mut found = Vec::new();
    for_each_tcp_socket(|socket, l, peer| {
        if l.port() == local && peer.port() == peer_port {
            found.push(Options::of(socket).unwrap());
        }
    });
    found
}

fn redis_port() -> u16 {
    match redis_url().into_connection_info().unwrap().addr() {
        redis::ConnectionAddr::Tcp(_, port) => *port,
        other => panic!("a TCP Redis URL, not {other:?}"),
    }
}

/// The local ports of Redis's clients as it lists them (`CLIENT LIST`'s `addr=`: the
/// client's side), with `args` after `CLIENT`.
async fn redis_client_ports(conn: &mut redis::aio::ConnectionManager, args: &[&str]) -> Vec<u16> {
    let listing: String = redis::cmd("CLIENT").arg(args).query_async(conn).await.unwrap();
    listing
        .lines()
        .filter_map(|line| line.split_whitespace().find_map(|f| f.strip_prefix("addr=")))
        .map(|addr| addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()).expect(addr))
        .collect()
}

#[tokio::test]
async fn pooled_postgres_connections_carry_the_dead_peer_options() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database(Backend::Postgres, dir.path()).await;
    let server_port = sqlx::postgres::PgConnectOptions::from_str(&url).unwrap().get_port();
    let Db::Postgres(pool) = Db::connect(&url, 2).await.unwrap() else { unreachable!("a PostgreSQL URL") };
    // Both connections of the pool at once, so they are two different sockets.
    let (mut a, mut b) = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
    let mut ports = Vec::new();
    for conn in [&mut a, &mut b] {
        let local: i32 = sqlx::query_scalar("SELECT inet_client_port()").fetch_one(&mut **conn).await.unwrap();
        let local = u16::try_from(local).unwrap();
        ports.push(local);
        assert_eq!(options_of(local, server_port), vec![Options::expected()], "the connection from port {local}");
    }
    assert_ne!(ports[0], ports[1]);
}

#[tokio::test]
async fn the_queue_and_change_relay_connections_to_redis_carry_the_dead_peer_options() {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_database(Backend::Postgres, dir.path()).await;
    let db = Db::connect(&url, 2).await.unwrap();
    let mut config = Config::defaults();
    config.queue.redis_url = Some(redis_url());
    config.queue.queue_namespace = unique("tcp");
    let queue = Queue::connect(&config, &db).await.unwrap();
    let mut conn = queue.redis().expect("a Redis queue");
    let queue_port = redis_client_ports(&mut conn, &["INFO"]).await;
    assert_eq!(queue_port.len(), 1, "{queue_port:?}");
    assert_eq!(options_of(queue_port[0], redis_port()), vec![Options::expected()], "the queue's connection");

    // The relay's subscription: once Redis counts it on this namespace's channel, every
    // subscriber connection of this process (other tests' relays too) must carry them.
    let shutdown = CancellationToken::new();
    let changes = Changes::new();
    let tasks = changes
        .spawn_relay(queue.redis_client().unwrap(), &config.queue.queue_namespace, true, shutdown.clone())
        .unwrap();
    let plain = redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    relay_subscribed(&plain, &config.queue.queue_namespace).await;
    let mut subscribers = Vec::new();
    for port in redis_client_ports(&mut conn, &["LIST", "TYPE", "pubsub"]).await {
        subscribers.extend(options_of(port, redis_port()));
    }
    assert!(!subscribers.is_empty(), "no subscriber connection of this process");
    assert!(subscribers.iter().all(|o| *o == Options::expected()), "{subscribers:?}");
    shutdown.cancel();
    for task in tasks {
        let _ = task.await;
    }
}
