//! The relay measurement: an echo backend, client flows that start with a
//! QUIC Initial, the targets, and the closed-loop (saturation) and
//! open-loop (50%) runs.
//!
//! One generator thread does both the sending and the receiving (`poll`
//! over the flows' sockets), so it takes one core at most, as the backend
//! thread does; the proxy's CPU is read from `/proc`.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::proxy::{ProxyProcess, fill};
use preread_parser::quic::{Version, client_first_flight};

use super::drops::{Drops, Snapshot};
use super::{Options, Target};
use crate::procfs;

/// The name preread routes (curl's capture carries it).
const SNI: &str = "a.example.com";
/// How long a flow waits for the echo of its Initial, per try.
const OPEN_WAIT: Duration = Duration::from_secs(1);
/// How many times a flow sends its Initial before giving up.
const OPEN_TRIES: usize = 20;
/// The receive buffer the bench's own sockets (the echo backend, the
/// client flows) ask for, as a QUIC server sizes its socket: the bench's
/// ends are not to be where datagrams are lost (the kernel caps it at
/// `net.core.rmem_max`; the `drops` column tells if they still were).
const BENCH_RCVBUF: usize = 4 << 20;

/// Asks for [`BENCH_RCVBUF`] on `socket`.
fn widen(socket: &UdpSocket) -> Result<(), String> {
    let value = libc::c_int::try_from(BENCH_RCVBUF).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is `socket`'s, open for the call; the value
    // points to a live `c_int` whose size is passed with it, and the
    // kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("SO_RCVBUF: {}", std::io::Error::last_os_error()))
    }
}

/// A UDP echo server on loopback, stopped on drop.
struct Echo {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Echo {
    fn start() -> Result<Self, String> {
        let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("echo: {e}"))?;
        widen(&socket)?;
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(|e| e.to_string())?;
        let address = socket.local_addr().map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut buffer = vec![0; 65_536];
            while !stopping.load(Ordering::Relaxed) {
                if let Ok((len, from)) = socket.recv_from(&mut buffer) {
                    let _ = socket.send_to(&buffer[..len], from);
                }
            }
        });
        Ok(Self {
            address,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A started target: where to send, and what to stop.
enum Running {
    Direct(SocketAddr),
    Preread(Box<ProxyProcess>),
    Nginx {
        child: Child,
        address: SocketAddr,
        dir: PathBuf,
    },
}

const PREREAD: &str = r#"
worker_count = ${workers}

[[listeners]]
protocol = "quic"
address = "${addr:quic}"
quic_idle_timeout = "120s"

[clusters.bench]
protocol = "quic"
frontends = [ { address = "${addr:quic}", sni = "${sni}" } ]
backends = [ { address = "${echo}", backend_id = "echo-0" } ]
"#;

impl Running {
    fn start(target: Target, echo: SocketAddr, workers: usize) -> Result<Self, String> {
        match target {
            Target::Direct => Ok(Self::Direct(echo)),
            Target::Preread => {
                let workers = workers.to_string();
                let config = fill(
                    PREREAD,
                    &[
                        ("echo", &echo.to_string()),
                        ("workers", &workers),
                        ("sni", SNI),
                    ],
                );
                let proxy = ProxyProcess::start(&config)?;
                let address = proxy.addr("quic");
                proxy.wait_stderr(
                    &format!("listening on {address} (QUIC"),
                    Duration::from_secs(10),
                )?;
                Ok(Self::Preread(Box::new(proxy)))
            }
            Target::Nginx => {
                let address = free_udp()?;
                let dir = std::env::temp_dir().join(format!("quic-bench-nginx-{}", address.port()));
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let (master, reuseport) = if workers > 1 {
                    ("on", " reuseport")
                } else {
                    ("off", "")
                };
                let text = format!(
                    "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n\
                     daemon off;\nmaster_process {master};\nworker_processes {workers};\n\
                     worker_rlimit_nofile 20000;\npid {dir}/nginx.pid;\n\
                     error_log {dir}/error.log crit;\nevents {{ worker_connections 8000; }}\n\
                     stream {{\n    server {{ listen {address} udp{reuseport}; \
                     proxy_pass {echo}; proxy_timeout 120s; }}\n}}\n",
                    dir = dir.display()
                );
                let file = dir.join("nginx.conf");
                std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
                let child = Command::new("nginx")
                    .arg("-e")
                    .arg(dir.join("error.log"))
                    .arg("-p")
                    .arg(&dir)
                    .arg("-c")
                    .arg(&file)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("spawn nginx: {e}"))?;
                Ok(Self::Nginx {
                    child,
                    address,
                    dir,
                })
            }
        }
    }

    fn address(&self) -> SocketAddr {
        match self {
            Self::Direct(address) | Self::Nginx { address, .. } => *address,
            Self::Preread(proxy) => proxy.addr("quic"),
        }
    }

    /// The processes doing the relay's work (an nginx master's workers
    /// too).
    fn pids(&self) -> Vec<u32> {
        let pid = match self {
            Self::Direct(_) => return Vec::new(),
            Self::Preread(proxy) => proxy.pid(),
            Self::Nginx { child, .. } => child.id(),
        };
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        std::iter::once(pid)
            .chain(children.split_whitespace().filter_map(|c| c.parse().ok()))
            .collect()
    }

    /// The relay's CPU seconds so far (user + sys).
    fn cpu(&self) -> f64 {
        self.pids()
            .into_iter()
            .filter_map(|pid| procfs::cpu(pid).ok())
            .map(|ticks| {
                let (user, sys) = ticks.secs();
                user + sys
            })
            .sum()
    }

    fn stop(self) {
        match self {
            Self::Direct(_) | Self::Preread(_) => {}
            Self::Nginx { mut child, dir, .. } => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// A free UDP port on loopback (bound, read, closed).
fn free_udp() -> Result<SocketAddr, String> {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(|e| format!("a free UDP port: {e}"))
}

/// The client sockets, one per flow, connected to the target.
struct Flows {
    sockets: Vec<UdpSocket>,
    polled: Vec<libc::pollfd>,
    buffer: Vec<u8>,
}

impl Flows {
    /// Opens `count` flows through `target`: each sends a client Initial
    /// (curl's ClientHello) and waits for its echo, a few tries each.
    fn open(count: usize, target: SocketAddr) -> Result<Self, String> {
        let hello = hello()?;
        let mut sockets = Vec::with_capacity(count);
        for n in 0..count {
            let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("flow {n}: {e}"))?;
            widen(&socket)?;
            socket
                .connect(target)
                .map_err(|e| format!("flow {n}: {e}"))?;
            socket
                .set_read_timeout(Some(OPEN_WAIT))
                .map_err(|e| e.to_string())?;
            let dcid = (n as u64).to_be_bytes();
            let flight = client_first_flight(Version::V1, &dcid, &[1, 2, 3, 4], &hello, 1100);
            let mut buffer = [0; 2048];
            // A peer still starting refuses (ICMP port unreachable): the
            // next try waits a little.
            let echoed = (0..OPEN_TRIES).any(|_| {
                let echo = flight.iter().all(|datagram| socket.send(datagram).is_ok())
                    && socket.recv(&mut buffer).is_ok();
                if !echo {
                    std::thread::sleep(Duration::from_millis(200));
                }
                echo
            });
            if !echoed {
                return Err(format!("flow {n}: no echo of its Initial through {target}"));
            }
            socket.set_nonblocking(true).map_err(|e| e.to_string())?;
            sockets.push(socket);
        }
        let polled = sockets
            .iter()
            .map(|s| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        Ok(Self {
            sockets,
            polled,
            buffer: vec![0; 65_536],
        })
    }

    /// Waits at most `wait` for echoes, then reads every one waiting: how
    /// many.
    fn receive(&mut self, wait: Duration) -> u64 {
        let timeout = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `polled` is a live, initialised array of `len` pollfd
        // structs that poll(2) only writes `revents` of; the descriptors
        // are the open sockets of `sockets`.
        let ready = unsafe {
            libc::poll(
                self.polled.as_mut_ptr(),
                self.polled.len() as libc::nfds_t,
                timeout,
            )
        };
        if ready <= 0 {
            return 0;
        }
        let mut received = 0;
        for (socket, polled) in self.sockets.iter().zip(&self.polled) {
            if polled.revents & libc::POLLIN != 0 {
                while socket.recv(&mut self.buffer).is_ok() {
                    received += 1;
                }
            }
        }
        received
    }
}

/// curl's ClientHello (no record header), from the repo's corpus.
fn hello() -> Result<Vec<u8>, String> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/clienthellos/curl_h2.bin");
    let record = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    record
        .get(5..)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| format!("{}: too short", path.display()))
}

/// What one run measured.
struct Run {
    round_trips: u64,
    lost: u64,
    secs: f64,
    cpu: f64,
    /// What the kernel dropped during the run, by socket.
    drops: Drops,
}

impl Run {
    fn rate(&self) -> f64 {
        self.round_trips as f64 / self.secs
    }

    /// The relay's CPU per datagram it carried (two per round trip, and
    /// one for each lost datagram it may have read).
    fn cpu_per_datagram_us(&self) -> f64 {
        self.cpu * 1e6 / (2 * self.round_trips + self.lost).max(1) as f64
    }
}

/// Sends a short-header datagram of `size` bytes on flow `n`.
fn send(flows: &Flows, n: usize, datagram: &[u8]) -> bool {
    flows.sockets[n % flows.sockets.len()]
        .send(datagram)
        .is_ok()
}

/// A closed loop: `window` datagrams in flight, for `secs`.
fn saturate(flows: &mut Flows, running: &Running, options: &Options) -> Run {
    let datagram = short_header(options.size);
    let window = options.window as u64;
    let (mut sent, mut received, mut lost, mut next) = (0_u64, 0_u64, 0_u64, 0_usize);
    let bound = Duration::from_secs(options.secs);
    let cpu = running.cpu();
    let started = Instant::now();
    while started.elapsed() < bound {
        while sent.saturating_sub(received + lost) < window && send(flows, next, &datagram) {
            sent += 1;
            next += 1;
        }
        let got = flows.receive(Duration::from_millis(20));
        if got == 0 {
            // 20 ms without an echo: what is in flight is lost.
            lost = sent - received;
        }
        received += got;
        // An echo given up for lost that comes after all was only slow.
        lost = lost.min(sent.saturating_sub(received));
    }
    let secs = started.elapsed().as_secs_f64();
    let cpu = running.cpu() - cpu;
    // The echoes still in flight are read here, not counted by the next
    // run as its own.
    while flows.receive(Duration::from_millis(200)) > 0 {}
    Run {
        round_trips: received,
        lost,
        secs,
        cpu,
        drops: Drops::default(),
    }
}

/// An open loop at `rate` round trips per second for `secs`, then a
/// second for the last echoes.
fn at_rate(
    flows: &mut Flows,
    running: &Running,
    options: &Options,
    rate: f64,
    backend: SocketAddr,
) -> Run {
    let datagram = short_header(options.size);
    let (mut sent, mut received) = (0_u64, 0_u64);
    let bound = Duration::from_secs(options.secs);
    let snapshot = Snapshot::now();
    let cpu = running.cpu();
    let started = Instant::now();
    while started.elapsed() < bound {
        let due = (rate * started.elapsed().as_secs_f64()) as u64;
        while sent < due && send(flows, sent as usize, &datagram) {
            sent += 1;
        }
        received += flows.receive(Duration::from_millis(1));
    }
    let secs = started.elapsed().as_secs_f64();
    let drained = Instant::now();
    while received < sent && drained.elapsed() < Duration::from_secs(1) {
        received += flows.receive(Duration::from_millis(50));
    }
    let drops = Snapshot::now().since(&snapshot, running.address().port(), backend.port());
    Run {
        round_trips: received,
        lost: sent.saturating_sub(received),
        secs,
        cpu: running.cpu() - cpu,
        drops,
    }
}

/// A short-header packet (fixed bit set) padded to `size`.
fn short_header(size: usize) -> Vec<u8> {
    let mut datagram = vec![0; size];
    datagram[0] = 0x40;
    datagram
}

/// Both runs through `target`: its table row.
pub(crate) fn measure(target: Target, options: &Options) -> Result<String, String> {
    let echo = Echo::start()?;
    let running = Running::start(target, echo.address, options.workers)?;
    let outcome = (|| {
        let mut flows = Flows::open(options.flows, running.address())?;
        let full = saturate(&mut flows, &running, options);
        let half = at_rate(
            &mut flows,
            &running,
            options,
            full.rate() / 2.0,
            echo.address,
        );
        let cpu = |run: &Run| {
            if matches!(target, Target::Direct) {
                "–".to_owned()
            } else {
                format!("{:.2}", run.cpu_per_datagram_us())
            }
        };
        Ok(format!(
            "| {} | {} | {:.0} | {} | {:.0} | {} | {} of {} | {} |",
            target.name(),
            options.flows,
            full.rate(),
            cpu(&full),
            half.rate(),
            cpu(&half),
            half.lost,
            half.round_trips + half.lost,
            half.drops,
        ))
    })();
    running.stop();
    outcome
}
