//! A TCP proxy a test can cut: a PostgreSQL outage without stopping the shared server.
//! Cutting closes every open connection and the listener itself, so new connections are
//! refused, as when the server is down; restoring listens on the same port again.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub port: u16,
    upstream: SocketAddr,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Proxy { port, upstream, conns: Arc::default(), accept: Mutex::new(None) };
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let (upstream, conns) = (self.upstream, self.conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().unwrap().push(task);
            }
        });
        *self.accept.lock().unwrap() = Some(accept);
    }

    /// Close every connection and stop listening until [`Self::restore`].
    pub fn cut(&self) {
        if let Some(accept) = self.accept.lock().unwrap().take() {
            accept.abort();
        }
        for task in self.conns.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// Listen on the same port again.
    pub async fn restore(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            // The aborted accept task drops its listener soon, not at once.
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(listener) => break listener,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot listen on {} again: {e}", self.port),
            }
        };
        self.serve(listener);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}
