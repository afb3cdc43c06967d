//! The `preread` command line: parses arguments and runs one subcommand.
//!
//! Owns: dispatch from a subcommand to the code that serves it, and the
//! exit statuses of doc/configure.md (0 success, 1 refused or failed, 2 bad
//! usage or invalid config). Must never: hold routing logic of its own.

mod arg_values;
pub mod args;
mod client;
mod describe;
mod fleet;
mod inspect_error;
mod listing;
mod offline;
pub mod print;
mod rejects;
mod reload;
mod reload_failure;
pub mod requests;
mod screen;
mod socket_error;
mod socket_flags;
mod watch;
mod watch_table;

use std::path::PathBuf;
use std::process::ExitCode;

use args::{Cli, Command, MetricsAction, MetricsGetArgs, StateAction};

use crate::start::StartFailure;

/// Exit status of a refused or failed request.
pub const EXIT_FAILED: u8 = 1;
/// Exit status of bad usage, an unreadable input or an invalid config.
pub const EXIT_USAGE: u8 = 2;

/// How long a socket command waits for its answer without `--timeout`.
pub const DEFAULT_TIMEOUT_MS: u64 = 5000;

/// The global flags every subcommand sees.
#[derive(Debug, Clone)]
pub struct Globals {
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub json: bool,
    pub timeout: u64,
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let globals = Globals {
        config: cli.config,
        socket: cli.socket,
        json: cli.json,
        timeout: cli.timeout.unwrap_or(DEFAULT_TIMEOUT_MS),
    };
    match &cli.command {
        Command::Config { .. } => offline::config_check(&globals),
        Command::Fleet { action } => fleet::run(&globals, action),
        Command::Explain { code } => offline::explain(code.as_deref(), globals.json),
        Command::Inspect {
            listener,
            hex,
            expect_proxy,
            reads,
            quic,
            pcap,
            files,
        } => {
            let mode = match (*quic, *pcap) {
                (true, _) => offline::InputMode::Quic,
                (_, true) => offline::InputMode::Pcap,
                _ => offline::InputMode::Bytes,
            };
            offline::inspect(
                &globals,
                listener.as_deref(),
                *hex,
                *expect_proxy,
                reads,
                mode,
                files,
            )
        }
        Command::State {
            action: StateAction::Seal { file },
        } => offline::state_seal(file, globals.json),
        Command::Reload => reload::run(&globals),
        Command::Metrics {
            action:
                MetricsAction::Get(
                    args @ MetricsGetArgs {
                        watch: Some(interval_ms),
                        ..
                    },
                ),
        } => watch::run(&globals, args, *interval_ms),
        Command::Rejects { dump, .. } => match requests::for_command(&cli.command) {
            Some(request) => rejects::run(&globals, &request, dump.as_deref()),
            None => ExitCode::from(EXIT_USAGE),
        },
        Command::Start => start(&globals),
        Command::Upgrade { within, .. } => {
            // The answer comes once the new process took over (or failed to).
            let wait = (u64::from(*within) + 10) * 1000;
            let globals = Globals {
                timeout: globals.timeout.max(wait),
                ..globals.clone()
            };
            match requests::for_command(&cli.command) {
                Some(request) => client::send_and_print(&globals, &request),
                None => ExitCode::from(EXIT_USAGE),
            }
        }
        other => match requests::for_command(other) {
            Some(request) => client::send_and_print(&globals, &request),
            None => {
                eprintln!("preread: this subcommand sends no request");
                ExitCode::from(EXIT_USAGE)
            }
        },
    }
}

/// `preread start`, with its ending as an exit status.
fn start(globals: &Globals) -> ExitCode {
    match crate::start::run(globals.config.as_deref(), globals.socket.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(StartFailure::InvalidInput) => ExitCode::from(EXIT_USAGE),
        Err(StartFailure::Failed) => ExitCode::from(EXIT_FAILED),
    }
}
