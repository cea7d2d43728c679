//! Redis over TLS (`rediss://`): a real `redis-server` with a TLS port, its certificate
//! issued by a CA made here with `openssl`. The service trusts that CA through
//! `CONTEXT_OPS_REDIS_CA_FILE` and runs operations through it (queue and change relay);
//! without the CA file the certificate is checked against the public roots and refused at
//! start; the CA file without a `rediss://` URL is a configuration error.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use context_ops::config::Config;
use context_ops::queue::Queue;
use context_ops::store::Db;

use context_ops::tcp::for_each_tcp_socket;

use crate::harness::child::{Proc, free_port, start_redis_with};
use crate::harness::wait::relay_subscribed;
use crate::harness::{Backend, TestApp, fresh_database, unique};

struct TlsRedis {
    _server: Proc,
    plain_port: u16,
    tls_port: u16,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsRedis {
    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA, a server certificate it issued for `san` (e.g. `IP:127.0.0.1`), and
/// `redis-server` with it on a TLS port beside a plain one.
fn start_tls_redis(san: &str) -> TlsRedis {
    let dir = tempfile::tempdir().unwrap();
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    let run = |line: String| openssl(dir.path(), &line.split_whitespace().collect::<Vec<_>>());
    run(format!("req -x509 {key} -keyout ca.key -out ca.pem -days 2 -subj /CN=context-ops-test-ca"));
    run(format!("req {key} -keyout server.key -out server.csr -subj /CN=redis"));
    std::fs::write(dir.path().join("ext.cnf"), format!("subjectAltName={san}\nbasicConstraints=CA:FALSE\n")).unwrap();
    run("x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext.cnf"
        .to_string());
    let plain_port = free_port();
    let tls_port = std::iter::repeat_with(free_port).find(|p| *p != plain_port).unwrap();
    // The CA file too: Redis 6.0 refuses a TLS port without one (clients are not asked for
    // certificates either way).
    let tls = format!(
        "--tls-port {tls_port} --tls-cert-file server.pem --tls-key-file server.key --tls-ca-cert-file ca.pem \
         --tls-auth-clients no"
    );
    let server = start_redis_with(dir.path(), "redis-tls", plain_port, &tls.split_whitespace().collect::<Vec<_>>());
    TlsRedis { _server: server, plain_port, tls_port, ca: dir.path().join("ca.pem"), _dir: dir }
}

/// A queue's configuration on `redis` (no CA file), and a fresh PostgreSQL database.
async fn queue_config(redis: &TlsRedis) -> (Config, Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&fresh_database(Backend::Postgres, dir.path()).await, 2).await.unwrap();
    let mut config = Config::defaults();
    config.queue.queue_namespace = unique("tls");
    config.queue.redis_url = Some(redis.url());
    (config, db, dir)
}

/// How many TCP connections this process has to `port` on the loopback.
fn connections_to(port: u16) -> usize {
    let mut n = 0;
    for_each_tcp_socket(|_, _, peer| n += usize::from(peer.port() == port && peer.ip().is_loopback()));
    n
}

#[tokio::test]
async fn operations_run_through_a_tls_redis_whose_ca_is_configured() {
    let redis = start_tls_redis("IP:127.0.0.1");
    let app = TestApp::start_with(Backend::Postgres, |c| {
        c.queue.redis_url = Some(redis.url());
        c.queue.redis_ca_file = Some(redis.ca.clone());
    })
    .await;
    let op = app.submit_delete(&unique("conv")).await;
    let done = app.wait_terminal(&op.id).await;
    assert_eq!(done.state.as_str(), "succeeded", "{done:?}");
    // The relay's subscription is on the TLS port too: Redis counts it on the channel, and
    // this process (the app runs in it) has no connection to the plain port but the test's.
    let mut plain = redis::Client::open(format!("redis://127.0.0.1:{}", redis.plain_port))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    relay_subscribed(&plain, &app.running().state.config.queue.queue_namespace).await;
    assert!(connections_to(redis.tls_port) >= 2, "the queue's and the relay's connections");
    assert_eq!(connections_to(redis.plain_port), 1, "only the test's own connection on the plain port");
    let _: String = redis::cmd("PING").query_async(&mut plain).await.unwrap();
    app.stop().await;
}

#[tokio::test]
async fn a_certificate_no_trusted_root_issued_is_refused_at_start() {
    let redis = start_tls_redis("IP:127.0.0.1");
    let (mut config, db, _dir) = queue_config(&redis).await;
    let started = Instant::now();
    let error = format!("{:#}", Queue::connect(&config, &db).await.err().expect("refused"));
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(error.starts_with(&format!("cannot connect to Redis at {}", redis.url())), "{error}");
    assert!(error.to_lowercase().contains("certificate"), "{error}");
    // With the CA it connects: the refusal was the certificate's, not the server's.
    config.queue.redis_ca_file = Some(redis.ca.clone());
    Queue::connect(&config, &db).await.unwrap();
}

#[tokio::test]
async fn a_certificate_for_another_host_is_refused_even_from_the_configured_ca() {
    let redis = start_tls_redis("DNS:redis.example.internal");
    let (mut config, db, _dir) = queue_config(&redis).await;
    config.queue.redis_ca_file = Some(redis.ca.clone());
    let error = format!("{:#}", Queue::connect(&config, &db).await.err().expect("refused"));
    assert!(error.starts_with(&format!("cannot connect to Redis at {}", redis.url())), "{error}");
    assert!(error.contains("certificate not valid for name \"127.0.0.1\""), "{error}");
}

#[tokio::test]
async fn a_ca_file_without_certificates_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::connect(&format!("sqlite:{}/q.sqlite", dir.path().display()), 2).await.unwrap();
    let mut config = Config::defaults();
    config.queue.redis_url = Some("rediss://127.0.0.1:1".into());
    let (empty, der) = (dir.path().join("empty.pem"), dir.path().join("ca.der"));
    std::fs::write(&empty, "").unwrap();
    std::fs::write(&der, [0x30, 0x82, 0x01, 0x0a]).unwrap();
    for file in [empty, der] {
        config.queue.redis_ca_file = Some(file.clone());
        let error = format!("{:#}", Queue::connect(&config, &db).await.err().expect("refused"));
        assert_eq!(error, format!("CONTEXT_OPS_REDIS_CA_FILE {} holds no PEM certificate", file.display()));
    }
    config.queue.redis_ca_file = Some(dir.path().join("missing.pem"));
    let error = format!("{:#}", Queue::connect(&config, &db).await.err().expect("refused"));
    assert!(error.starts_with("cannot read CONTEXT_OPS_REDIS_CA_FILE "), "{error}");
}

#[test]
fn a_ca_file_without_a_tls_redis_url_is_a_configuration_error() {
    let mut config = Config::defaults();
    config.queue.redis_ca_file = Some("/etc/ssl/ca.pem".into());
    for url in [None, Some("redis://127.0.0.1:6379".to_string())] {
        config.queue.redis_url = url;
        let error = config.validate().expect_err("refused").to_string();
        assert_eq!(error, "CONTEXT_OPS_REDIS_CA_FILE is set but REDIS_URL is not a rediss:// (TLS) URL");
    }
    config.queue.redis_url = Some("rediss://127.0.0.1:6380".into());
    config.validate().unwrap();
}
