//! The TLS backend of the Docker source's tests, run inside a container:
//! e2e's [`TlsBackend`] protocol (it answers `backend=NAME alpn=… sni=…`,
//! then echoes) on the given address, with a certificate the test made and
//! mounted in, until SIGTERM or SIGINT (what `docker stop` sends; as the
//! container's first process it must handle them itself).
//!
//! Usage: see [`USAGE`].

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use e2e::backend::{BackendConfig, TlsBackend};
use e2e::certs::Leaf;

const USAGE: &str = "\
usage: container-backend --listen IP:PORT --name NAME --cert FILE --key FILE

Serves e2e's TLS backend (it answers `backend=NAME alpn=... sni=...`, then
echoes) with the PEM certificate and PKCS#8 key given, until SIGTERM or
SIGINT.";

struct Args {
    listen: std::net::SocketAddr,
    name: String,
    cert: String,
    key: String,
}

fn parse_args() -> Result<Args, String> {
    let mut listen = None;
    let mut name = None;
    let mut cert = None;
    let mut key = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => {
                let text = value()?;
                listen = Some(
                    text.parse()
                        .map_err(|_| format!("--listen {text:?}: not IP:PORT"))?,
                );
            }
            "--name" => name = Some(value()?),
            "--cert" => cert = Some(value()?),
            "--key" => key = Some(value()?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    match (listen, name, cert, key) {
        (Some(listen), Some(name), Some(cert), Some(key)) => Ok(Args {
            listen,
            name,
            cert,
            key,
        }),
        _ => Err("--listen, --name, --cert and --key are all needed".to_owned()),
    }
}

fn serve(args: &Args) -> Result<(), String> {
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"));
    let leaf = Leaf::from_pem(&read(&args.cert)?, &read(&args.key)?)?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| format!("cannot handle signal {signal}: {e}"))?;
    }
    let backend =
        TlsBackend::start_with_leaf(args.listen, BackendConfig::new(&args.name, &[]), leaf)
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    println!("{} serving on {}", args.name, backend.addr());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("container-backend: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match serve(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("container-backend: {message}");
            ExitCode::FAILURE
        }
    }
}
