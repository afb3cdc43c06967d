//! A TLS backend that speaks HTTP/2 ([`H2Backend`]), for the clusters that
//! route `h2` clients: `demo-backends` runs it, so a plain `curl` (which
//! offers `h2` first) gets an HTTP/2 answer through the proxy, and the
//! README walkthrough tests check it.
//!
//! Every request is answered `200` with the body
//! `backend=<name> alpn=<negotiated or -> sni=<server name or ->\n`, the
//! line [`crate::backend::TlsBackend`] answers. With `h2` negotiated the
//! connection is served by the `h2` crate, over tokio-rustls; with another
//! protocol (or none) the first request is answered in HTTP/1.1 and the
//! connection closed.
//!
//! Owns: its accept loop on one thread (a current-thread tokio runtime),
//! each connection a task bounded by [`crate::backend::IO_TIMEOUT`]. Must
//! never: strip a PROXY header (a cluster that sends one gets
//! [`crate::backend::TlsBackend`]), or outlive its Drop: the runtime and
//! its tasks end there.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::backend::IO_TIMEOUT;
use crate::certs::{self, Leaf, TestCa};

/// A running HTTP/2 backend; stops on Drop.
#[derive(Debug)]
pub struct H2Backend {
    name: String,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    accept: Option<JoinHandle<()>>,
}

impl H2Backend {
    /// Starts `name` on `addr` (port 0: a free one) with a certificate for
    /// `dns_names` signed by `ca`, offering `alpn` (in order).
    pub fn start_with_ca(
        addr: SocketAddr,
        name: &str,
        dns_names: &[&str],
        alpn: &[&str],
        ca: &TestCa,
    ) -> io::Result<Self> {
        let leaf: Leaf = ca.server_cert(dns_names);
        let acceptor = TlsAcceptor::from(certs::server_config(&leaf, alpn, None));
        let listener = std::net::TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let accept = {
            let stop = Arc::clone(&stop);
            let answered = Arc::clone(&answered);
            let name: Arc<str> = Arc::from(name);
            std::thread::Builder::new()
                .name(format!("h2-backend-{name}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        let Ok(listener) = TcpListener::from_std(listener) else {
                            return;
                        };
                        accept_loop(listener, acceptor, name, &stop, answered).await;
                    });
                })?
        };
        Ok(Self {
            name: name.to_owned(),
            addr,
            stop,
            answered,
            accept: Some(accept),
        })
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The requests answered so far, HTTP/2 and HTTP/1.1.
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }
}

impl Drop for H2Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept, which then sees the flag.
        let _ = std::net::TcpStream::connect_timeout(&self.addr, IO_TIMEOUT);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    name: Arc<str>,
    stop: &AtomicBool,
    answered: Arc<AtomicUsize>,
) {
    while let Ok((tcp, _)) = listener.accept().await {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let acceptor = acceptor.clone();
        let name = Arc::clone(&name);
        let answered = Arc::clone(&answered);
        tokio::spawn(async move {
            // A connection that fails or idles past the bound is dropped:
            // the demo's client sees the close, the backend keeps serving.
            let _ = tokio::time::timeout(IO_TIMEOUT, serve(acceptor, tcp, &name, &answered)).await;
        });
    }
    // Stopped means refusing connections at once.
    let _ = crate::testkit::shut(&listener);
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

async fn serve(
    acceptor: TlsAcceptor,
    tcp: TcpStream,
    name: &str,
    answered: &AtomicUsize,
) -> Result<(), Failure> {
    let mut tls = acceptor.accept(tcp).await?;
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map_or_else(
        || "-".to_owned(),
        |p| String::from_utf8_lossy(p).into_owned(),
    );
    let sni = session.server_name().unwrap_or("-").to_owned();
    let line = Bytes::from(format!("backend={name} alpn={alpn} sni={sni}\n"));
    if alpn != "h2" {
        let mut request = vec![0; 16 * 1024];
        if tls.read(&mut request).await? == 0 {
            return Ok(());
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            line.len()
        );
        tls.write_all(head.as_bytes()).await?;
        tls.write_all(&line).await?;
        answered.fetch_add(1, Ordering::SeqCst);
        tls.shutdown().await?;
        return Ok(());
    }
    let mut connection = h2::server::handshake(tls).await?;
    while let Some(request) = connection.accept().await {
        let (_, mut respond) = request?;
        let response = http::Response::builder()
            .status(200)
            .header("content-type", "text/plain")
            .body(())?;
        let mut body = respond.send_response(response, false)?;
        body.send_data(line.clone(), true)?;
        answered.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}
