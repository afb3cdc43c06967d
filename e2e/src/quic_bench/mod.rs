//! The pieces of the QUIC relay benchmark (`e2e/src/bin/quic_bench.rs`;
//! results in `doc/performance.md`, "QUIC relay"):
//!
//! - [`relay`]: the echo backend, the client flows, the targets (direct,
//!   preread, nginx) and the two measurements;
//! - [`drops`]: where the kernel dropped datagrams, per socket;
//! - [`syscalls`]: the socket calls' own CPU per datagram.
//!
//! Every loop is bounded in time; only loopback is used.

pub(crate) mod drops;
pub(crate) mod relay;
pub(crate) mod syscalls;

/// What the datagrams go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// Straight to the backend: the generator's and backend's own floor.
    Direct,
    /// preread's QUIC listener.
    Preread,
    /// nginx's `stream` UDP proxy.
    Nginx,
}

impl Target {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Preread => "preread",
            Self::Nginx => "nginx",
        }
    }

    fn parse(text: &str) -> Result<Self, String> {
        match text {
            "direct" => Ok(Self::Direct),
            "preread" => Ok(Self::Preread),
            "nginx" => Ok(Self::Nginx),
            other => Err(format!(
                "unknown target {other:?}: direct, preread or nginx"
            )),
        }
    }
}

/// The command line.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) targets: Vec<Target>,
    pub(crate) flows: usize,
    pub(crate) secs: u64,
    pub(crate) size: usize,
    pub(crate) window: usize,
    pub(crate) workers: usize,
    pub(crate) phase: String,
}

impl Options {
    pub(crate) fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut options = Self {
            targets: vec![Target::Direct, Target::Preread, Target::Nginx],
            flows: 64,
            secs: 5,
            size: 1200,
            window: 256,
            workers: 1,
            phase: "relay".to_owned(),
        };
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let number = || {
                value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{flag}: a positive integer, not {value:?}"))
            };
            match flag.as_str() {
                "--targets" => {
                    options.targets = value
                        .split(',')
                        .map(Target::parse)
                        .collect::<Result<_, _>>()?;
                }
                "--flows" => options.flows = number()?,
                "--secs" => options.secs = number()? as u64,
                "--size" => options.size = number()?.clamp(16, 65_000),
                "--window" => options.window = number()?,
                "--workers" => options.workers = number()?,
                "--phase" => options.phase = value,
                other => return Err(format!("unknown option {other}")),
            }
        }
        Ok(options)
    }
}

/// `uptime`'s line (the load of the shared machine), or why not.
pub(crate) fn uptime() -> String {
    std::process::Command::new("uptime")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("uptime: {e}"))
}
