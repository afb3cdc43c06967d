//! The client half of the socket subcommands: find the command socket,
//! send one request, print the answer.
//!
//! Owns: socket path resolution and the exit status of socket commands.
//! Must never: retry a refused request (the operator decides).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use command::channel::{BlockingChannel, ChannelError, MAX_ANSWER_LEN};
use command::config::load_global_settings_file;
use command::proto;

use super::print::{failure_text, success_json, success_text};
use super::socket_error::{NoSocket, SocketError};
use super::{EXIT_FAILED, EXIT_USAGE, Globals};

/// The config file a command uses: `-c`, `$PREREAD_CONFIG`, or `preread.toml`.
pub(super) fn config_path(globals: &Globals) -> PathBuf {
    globals
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from("preread.toml"))
}

/// The command socket: `--socket`, else the config's `command_socket`.
pub(super) fn socket_path(globals: &Globals) -> Result<PathBuf, NoSocket> {
    if let Some(socket) = &globals.socket {
        return Ok(socket.clone());
    }
    let config = config_path(globals);
    match load_global_settings_file(&config) {
        Ok(global) => Ok(global.command_socket),
        Err(problems) => Err(NoSocket { config, problems }),
    }
}

/// An open channel to the proxy listening on `socket`.
pub(super) fn open(socket: &Path, globals: &Globals) -> Result<BlockingChannel, ChannelError> {
    // The answers of a large proxy (its metrics) go past the request cap.
    BlockingChannel::connect(socket, Duration::from_millis(globals.timeout))
        .map(|channel| channel.with_max_frame_len(MAX_ANSWER_LEN))
}

/// An open channel to the proxy of `globals`: [`socket_path`], then
/// [`open`].
pub(super) fn connect(globals: &Globals) -> Result<BlockingChannel, SocketError> {
    let socket = socket_path(globals)?;
    Ok(open(&socket, globals)?)
}

/// Whether a response is a refusal or failure.
pub(super) fn is_failure(response: &proto::Response) -> bool {
    response.status != proto::ResponseStatus::Ok as i32
        && response.status != proto::ResponseStatus::Processing as i32
}

/// Sends one request and prints its answer; the exit status follows doc/configure.md.
pub(super) fn send_and_print(globals: &Globals, request: &proto::Request) -> ExitCode {
    let socket = match socket_path(globals) {
        Ok(socket) => socket,
        Err(message) => {
            eprintln!("preread: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut channel = match open(&socket, globals) {
        Ok(channel) => channel,
        Err(message) => {
            eprintln!("preread: {message}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let progress = |r: &proto::Response| {
        if !r.message.is_empty() {
            eprintln!("{}", r.message);
        }
    };
    let response = match super::listing::request_all(&mut channel, request, progress) {
        Ok(response) => response,
        Err(error) => {
            eprintln!("preread: {error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    if is_failure(&response) {
        eprintln!("{}", failure_text(&response));
        return ExitCode::from(EXIT_FAILED);
    }
    if globals.json {
        for line in success_json(&response) {
            println!("{line}");
        }
    } else {
        let text = success_text(&response);
        // A change says what it changed: the proxy's answer says only how.
        match super::describe::change(request) {
            Some(change) if response.content.is_none() => print!("{change}: {text}"),
            _ => print!("{text}"),
        }
    }
    ExitCode::SUCCESS
}
