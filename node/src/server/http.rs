//! A minimal plain-HTTP endpoint for scrapers and orchestrators:
//! `GET /metrics` (Prometheus text), `/healthz` (200 while the process
//! runs), `/livez` (200 unless the batch loop is stuck) and `/readyz` (200 when loaded and
//! both peers answer); a 503 names the reason (see [`crate::node::health`]).

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::node::NodeState;
use crate::tls::{Admission, BufferedTcp};

/// Serves until `shutdown` turns true. Nobody authenticates here: every connection holds a slot
/// of `admission` and is closed at its deadline.
pub async fn serve(
    listener: TcpListener,
    state: Arc<NodeState>,
    admission: Arc<Admission>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        let Ok((stream, addr)) = conn else {
            continue;
        };
        let stream = BufferedTcp::admitted(stream, admission.admit(addr.ip()));
        let st = state.clone();
        tokio::spawn(async move {
            let _ = handle(stream, &st).await;
        });
    }
}

async fn handle(mut stream: BufferedTcp, state: &NodeState) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    while n < buf.len() {
        let r = stream.read(&mut buf[n..]).await?;
        if r == 0 {
            break;
        }
        n += r;
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let method = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("");
    const UNAVAILABLE: &str = "503 Service Unavailable";
    let (code, ctype, body) = match (method, path) {
        ("GET", "/metrics") => {
            crate::node::health::refresh_metrics(state);
            (
                "200 OK",
                "text/plain; version=0.0.4",
                state.metrics.render(),
            )
        }
        ("GET", "/healthz") => ("200 OK", "text/plain", "live\n".to_owned()),
        ("GET", "/livez") => match crate::node::health::liveness(state) {
            Ok(()) => ("200 OK", "text/plain", "live\n".to_owned()),
            Err(e) => (UNAVAILABLE, "text/plain", format!("{e}\n")),
        },
        ("GET", "/readyz") => match crate::node::health::readiness(state) {
            Ok(()) => ("200 OK", "text/plain", "ready\n".to_owned()),
            Err(e) => (UNAVAILABLE, "text/plain", format!("{e}\n")),
        },
        _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
    };
    let resp = format!(
        "HTTP/1.1 {code}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(resp.as_bytes()).await?;
    stream.shutdown().await
}
