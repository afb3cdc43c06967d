//! The `preread` binary.

use std::process::ExitCode;

use proxy_shell::cli::{self, args::Cli};

fn main() -> ExitCode {
    let cli = Cli::parse_args();
    if !cli.command.is_long_running() {
        restore_default_sigpipe();
    }
    cli::run(cli)
}

/// A command-line tool piped into `head` should end quietly when the pipe
/// closes, as other Unix tools do, instead of failing on every write. The
/// proxy itself keeps Rust's default (SIGPIPE ignored): a client that goes
/// away must be an `EPIPE` on one socket, never the end of the process.
fn restore_default_sigpipe() {
    // SAFETY: called once at start-up, before any thread exists; SIG_DFL
    // is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
