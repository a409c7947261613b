//! The server's connections, bounded: at most `max_connections` open and
//! `max_connections_per_client` from one address (past either, a connection
//! is answered 503 with `Retry-After` and closed without its request being
//! read), and each request head read within `header_timeout_secs` (a client
//! that opens a connection and never finishes its head is disconnected then,
//! as are idle keep-alive connections). A slow-header client can therefore
//! hold at most its share of connections, for at most the header timeout.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// The bounds of the server's connections (`[api]` of the configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one client address.
    pub max_per_client: usize,
    /// Longest a client may take to send a request's head.
    pub header_timeout: Duration,
}

/// What the connection layer refused, for the metrics.
#[derive(Debug, Default)]
pub struct ConnectionCounts {
    /// Connections accepted and served.
    pub accepted: AtomicU64,
    /// Connections refused because `max_connections` were open.
    pub refused_full: AtomicU64,
    /// Connections refused because their client had `max_per_client` open.
    pub refused_client: AtomicU64,
}

/// The open connections of each client address.
#[derive(Debug, Default)]
struct Clients(Mutex<HashMap<IpAddr, usize>>);

/// One of a client's connections; given back when dropped.
struct ClientSlot {
    clients: Arc<Clients>,
    ip: IpAddr,
}

impl Clients {
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut open = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(ip).or_default();
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self
            .clients
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Serves `app` on `listener` within `limits` until `stop` turns true; then
/// stops accepting, lets each connection finish the request it is on, and
/// returns when every connection has closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    counts: Arc<ConnectionCounts>,
    mut stop: watch::Receiver<bool>,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let clients = Arc::new(Clients::default());
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => {
                    // Out of descriptors or a connection reset before it was
                    // accepted: the next accept may work.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.wait_for(|stopped| *stopped) => break,
            // Finished connections are reaped as they end.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            counts.refused_full.fetch_add(1, Ordering::Relaxed);
            refuse(
                stream,
                &format!(
                    "the server has {} connections open (its max_connections): retry shortly",
                    limits.max_connections
                ),
            );
            continue;
        };
        let Some(slot) = clients.take(peer.ip(), limits.max_per_client.max(1)) else {
            counts.refused_client.fetch_add(1, Ordering::Relaxed);
            refuse(
                stream,
                &format!(
                    "{} has {} connections open (the server's max_connections_per_client): \
                     retry shortly",
                    peer.ip(),
                    limits.max_per_client
                ),
            );
            continue;
        };
        counts.accepted.fetch_add(1, Ordering::Relaxed);
        // No Nagle: a response's last piece would otherwise wait for the
        // client's delayed ACK (40 ms on Linux).
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut stop = stop.clone();
        connections.spawn(async move {
            let _held: (OwnedSemaphorePermit, ClientSlot) = (permit, slot);
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = async { drop(stop.wait_for(|stopped| *stopped).await) } => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    while connections.join_next().await.is_some() {}
}

/// Answers a connection refused before its request is read: 503 with a JSON
/// error, `Retry-After: 1` and `Connection: close`, as far as the socket
/// takes it at once; then closes it.
fn refuse(stream: tokio::net::TcpStream, message: &str) {
    let body = serde_json::json!({"error": message, "status": 503}).to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    // What the client sent so far is read first: closing a socket with
    // unread bytes resets it, and the client may lose the answer.
    let mut sent = [0u8; 4096];
    let _ = stream.try_read(&mut sent);
    let _ = stream.try_write(response.as_bytes());
}
