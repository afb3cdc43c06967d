//! The `preread` binary: argument parsing and dispatch to the subcommands.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use proxy_shell::inspect::{InspectOptions, decode_hex, inspect};

/// preread: routes TLS connections by SNI and ALPN without terminating TLS.
#[derive(Debug, Parser)]
#[command(name = "preread", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Parse captured client bytes offline and print what preread sees, one
    /// JSON object per input.
    Inspect {
        /// Inputs are hex text (pairs of hex digits; white space and ':' ignored).
        #[arg(long)]
        hex: bool,
        /// A PROXY protocol v1/v2 header precedes the ClientHello.
        #[arg(long)]
        expect_proxy: bool,
        /// Capture files; `-` reads standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// Exit status for bad usage or an unreadable input (INTERFACE.md).
const EXIT_USAGE: u8 = 2;

fn read_input(path: &PathBuf, hex: bool) -> Result<Vec<u8>, String> {
    let mut raw = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut raw).map(drop)
    } else {
        std::fs::read(path).map(|bytes| raw = bytes)
    };
    read.map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !hex {
        return Ok(raw);
    }
    let text = String::from_utf8(raw)
        .map_err(|_| format!("{}: --hex input is not text", path.display()))?;
    decode_hex(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn run_inspect(files: &[PathBuf], options: InspectOptions, hex: bool) -> ExitCode {
    let mut status = ExitCode::SUCCESS;
    let mut stdout = std::io::stdout().lock();
    for path in files {
        match read_input(path, hex) {
            Ok(bytes) => {
                let report = inspect(&path.display().to_string(), &bytes, options);
                if writeln!(stdout, "{report}").is_err() {
                    return ExitCode::from(EXIT_USAGE);
                }
            }
            Err(message) => {
                eprintln!("preread inspect: {message}");
                status = ExitCode::from(EXIT_USAGE);
            }
        }
    }
    status
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Inspect {
            hex,
            expect_proxy,
            files,
        } => run_inspect(&files, InspectOptions { expect_proxy }, hex),
    }
}
