//! Parses one ClientHello file N times with one implementation: the driver
//! for `valgrind --tool=callgrind` and the allocation count in
//! `doc/performance.md`.
//!
//! ```text
//! parse_once <preread|tls-parser|rustls> <file.bin> <iterations>
//! ```
//!
//! Instructions per hello: run under callgrind with N and with 0 iterations
//! and divide the difference by N (the 0 run is process start, file read and
//! exit). Allocations per hello are counted here by a `#[global_allocator]`
//! wrapper and printed to stderr, together with what was found.
//!
//! Each implementation does the same job as in `benches/parser.rs`: frame
//! the record, find SNI and ALPN, and consume both through `black_box`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts every allocation (`alloc`, `alloc_zeroed` and `realloc` calls)
/// and passes it on to the system allocator.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments, so
// `System`'s guarantees carry over; the counter has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What one parse found: the SNI and the ALPN names, by length.
#[derive(Debug, Default)]
struct Found {
    sni: usize,
    alpn: usize,
}

impl Found {
    #[inline(always)]
    fn sni(&mut self, name: &[u8]) {
        self.sni = black_box(name).len();
    }

    #[inline(always)]
    fn alpn(&mut self, protocol: &[u8]) {
        black_box(protocol);
        self.alpn += 1;
    }
}

fn preread(window: &[u8], scratch: &mut Vec<u8>) -> Found {
    use preread_parser::tls::{Parsed, parse_client_hello};
    let mut found = Found::default();
    if let Ok(Parsed::Complete(hello)) = parse_client_hello(window, scratch) {
        if let Some(name) = hello.server_name {
            found.sni(name);
        }
        if let Some(alpn) = hello.alpn {
            for protocol in alpn {
                found.alpn(protocol);
            }
        }
    }
    found
}

fn tls_parser(window: &[u8]) -> Found {
    use tls_parser::{SNIType, TlsExtension, TlsMessage, TlsMessageHandshake};
    let mut found = Found::default();
    let Ok((_, record)) = tls_parser::parse_tls_plaintext(window) else {
        return found;
    };
    for message in &record.msg {
        let TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)) = message else {
            continue;
        };
        let Some(block) = hello.ext else {
            continue;
        };
        let Ok((_, extensions)) = tls_parser::parse_tls_client_hello_extensions(block) else {
            return found;
        };
        for extension in &extensions {
            match extension {
                TlsExtension::SNI(names) => {
                    for (name_type, name) in names {
                        if *name_type == SNIType::HostName {
                            found.sni(name);
                        }
                    }
                }
                TlsExtension::ALPN(protocols) => {
                    for protocol in protocols {
                        found.alpn(protocol);
                    }
                }
                _ => {}
            }
        }
    }
    found
}

fn rustls(window: &[u8]) -> Found {
    let mut found = Found::default();
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rest = window;
    loop {
        if acceptor.read_tls(&mut rest).is_err() {
            return found;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                if let Some(name) = hello.server_name() {
                    found.sni(name.as_bytes());
                }
                if let Some(alpn) = hello.alpn() {
                    for protocol in alpn {
                        found.alpn(protocol);
                    }
                }
                return found;
            }
            Ok(None) if !rest.is_empty() => {}
            Ok(None) | Err(_) => return found,
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (which, path, iterations) = match args.as_slice() {
        [_, which, path, n] => match n.parse::<u64>() {
            Ok(n) => (which.as_str(), path.as_str(), n),
            Err(_) => return usage(),
        },
        _ => return usage(),
    };
    let window = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) => {
            eprintln!("parse_once: {path}: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut scratch = Vec::new();
    let mut last = Found::default();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    match which {
        "preread" => {
            for _ in 0..iterations {
                last = preread(black_box(&window), &mut scratch);
            }
        }
        "tls-parser" => {
            for _ in 0..iterations {
                last = tls_parser(black_box(&window));
            }
        }
        "rustls" => {
            for _ in 0..iterations {
                last = rustls(black_box(&window));
            }
        }
        _ => return usage(),
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    let per_hello = if iterations == 0 {
        0.0
    } else {
        allocations as f64 / iterations as f64
    };
    eprintln!(
        "{which} {path}: {iterations} iterations, {allocations} allocations \
         ({per_hello:.2} per hello); last parse: sni {} bytes, {} ALPN names",
        last.sni, last.alpn
    );
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    eprintln!("usage: parse_once <preread|tls-parser|rustls> <file.bin> <iterations>");
    ExitCode::from(2)
}
