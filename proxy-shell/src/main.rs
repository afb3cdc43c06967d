//! The `preread` binary.

use std::process::ExitCode;

use clap::Parser;
use proxy_shell::cli::{self, args::Cli};

fn main() -> ExitCode {
    cli::run(Cli::parse())
}
