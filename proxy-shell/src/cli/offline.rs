//! The subcommands that need no running proxy: `config check`, `explain`,
//! `inspect` and `state seal`.
//!
//! Owns: their output and exit statuses. Must never: open the command
//! socket or any network socket.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use preread_core::step::PrereadListener;

use command::codes::ErrorCode;
use command::config::{check_config_file, load_config_file};
use command::proto::request::RequestType;
use command::state_file::seal_state_file;
use serde_json::json;

use super::client::config_path;
use super::inspect_error::{InspectInputError, ListenerChoiceError};
use super::{EXIT_USAGE, Globals};
use crate::inspect::{InspectOptions, decode_hex, inspect as inspect_one};
use crate::inspect_pcap::{ConfiguredListener, PcapOptions, inspect_pcap};
use crate::inspect_quic::{inspect_quic, split_datagrams};
use crate::pcap::capture_notes;
use command::proto::RejectWith;
use command::validate::is_quic_listener;
use preread_core::quic::{QuicListener, QuicRejectWith};
use preread_worker::worker::runtime::reject_with;

/// Every problem, errors and warnings; exit 2 only for an error.
pub(super) fn config_check(globals: &Globals) -> ExitCode {
    let path = config_path(globals);
    let problems = check_config_file(&path);
    for problem in &problems {
        if globals.json {
            let location = problem
                .location
                .map(|l| json!({ "line": l.line, "column": l.column }));
            let severity = if problem.is_warning() {
                "warning"
            } else {
                "error"
            };
            println!(
                "{}",
                json!({ "file": path.display().to_string(), "location": location,
                        "code": problem.code.as_str(), "severity": severity,
                        "message": problem.message })
            );
        } else {
            println!("{}:{problem}", path.display());
        }
    }
    let warnings = problems.iter().filter(|p| p.is_warning()).count();
    let errors = problems.len() - warnings;
    if !globals.json {
        if errors == 0 {
            println!("{}: ok", path.display());
        }
        if !problems.is_empty() {
            eprintln!(
                "{errors} error(s), {warnings} warning(s); `preread explain CODE` says how to \
                 fix each"
            );
        }
    }
    if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_USAGE)
    }
}

pub(super) fn explain(code: Option<&str>, json_output: bool) -> ExitCode {
    let codes: Vec<ErrorCode> = match code {
        Some(code) => match ErrorCode::from_code(code) {
            Some(found) => vec![found],
            None => {
                eprintln!(
                    "preread explain: unknown code {code:?}; `preread explain` lists them all"
                );
                return ExitCode::from(EXIT_USAGE);
            }
        },
        None => ErrorCode::ALL.to_vec(),
    };
    let listing = codes.len() > 1;
    for code in codes {
        let explanation = code.explain();
        if json_output {
            println!(
                "{}",
                json!({ "code": code.as_str(), "title": explanation.title, "meaning": explanation.meaning,
                        "accepted": explanation.accepted, "fix": explanation.fix,
                        "see": format!("doc/configure.md §{}", explanation.section) })
            );
        } else if listing {
            println!("{}  {}", code.as_str(), explanation.title);
        } else {
            println!("{}: {explanation}", code.as_str());
        }
    }
    ExitCode::SUCCESS
}

/// `preread state seal -f FILE`: the explicit way to trust a state file
/// without a valid trailer, once it replays line by line.
pub(super) fn state_seal(file: &Path, json_output: bool) -> ExitCode {
    match seal_state_file(file) {
        Ok(requests) => {
            if json_output {
                println!(
                    "{}",
                    json!({ "file": file.display().to_string(), "requests": requests })
                );
            } else {
                println!(
                    "{}: sealed, {requests} request(s); it now loads as it is",
                    file.display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!(
                "preread state seal: {}: {error}; the file was not changed",
                file.display()
            );
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn read_input(path: &Path, hex: bool) -> Result<Vec<u8>, InspectInputError> {
    let mut raw = Vec::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut raw).map(drop)
    } else {
        std::fs::read(path).map(|bytes| raw = bytes)
    };
    read.map_err(|error| InspectInputError::Read {
        path: path.to_owned(),
        error,
    })?;
    if !hex {
        return Ok(raw);
    }
    let text = String::from_utf8(raw).map_err(|_| InspectInputError::NotText {
        path: path.to_owned(),
    })?;
    decode_hex(&text).map_err(|error| InspectInputError::Hex {
        path: path.to_owned(),
        error,
    })
}

/// A listener of the loaded config as a worker builds it, for either
/// protocol: its `sni_preread_max_bytes` cap, its catch-all frontend, its
/// `reject_with`, and for QUIC its `quic_preread_timeout`.
fn configured(
    state: &command::state::ConfigState,
    address: SocketAddr,
) -> Option<ConfiguredListener> {
    let config_listener = state.listener(&address)?;
    let catch_all = state.catch_all(&address).map(Arc::from);
    let preread = state.preread_config(&address)?;
    let mut quic_config = preread.clone();
    if let Some(ms) = config_listener.quic_preread_timeout_ms {
        quic_config.timeout = Duration::from_millis(ms);
    }
    let quic_reject_with = match config_listener.reject_with() {
        RejectWith::Drop => QuicRejectWith::Drop,
        _ => QuicRejectWith::Close,
    };
    let mut tcp = PrereadListener::new(preread, catch_all);
    tcp.reject_with = reject_with(config_listener.reject_with());
    Some(ConfiguredListener {
        address,
        quic: is_quic_listener(config_listener),
        tcp,
        quic_view: QuicListener::new(quic_config, quic_reject_with),
        expect_proxy: config_listener.expect_proxy,
    })
}

/// The listeners `inspect --config` decides for: `--listener` alone, else
/// every one the config declares, in its order (the first decides a
/// capture file; `--pcap` picks one per flow).
fn listener_routes(
    config: &Path,
    wanted: Option<&str>,
) -> Result<Vec<ConfiguredListener>, ListenerChoiceError> {
    let loaded = load_config_file(config).map_err(|problems| ListenerChoiceError::Config {
        config: config.to_owned(),
        problems,
    })?;
    let state = &loaded.state;
    let addresses: Vec<SocketAddr> = match wanted {
        Some(text) => vec![
            text.parse()
                .map_err(|_| ListenerChoiceError::NotAnAddress {
                    text: text.to_owned(),
                })?,
        ],
        None => loaded
            .requests()
            .filter_map(|r| match &r.request_type {
                Some(RequestType::AddTcpListener(l)) => l.address.parse().ok(),
                _ => None,
            })
            .collect(),
    };
    let Some(&first) = addresses.first() else {
        return Err(ListenerChoiceError::NoListener {
            config: config.to_owned(),
        });
    };
    addresses
        .iter()
        .map(|&address| configured(state, address))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| ListenerChoiceError::Unknown {
            config: config.to_owned(),
            address: first,
        })
}

/// What `inspect`'s files hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InputMode {
    /// A client's bytes on one TCP connection.
    Bytes,
    /// One QUIC flow's client datagrams (`--quic`).
    Quic,
    /// A packet capture (`--pcap`).
    Pcap,
}

pub(super) fn inspect(
    globals: &Globals,
    listener: Option<&str>,
    hex: bool,
    expect_proxy: bool,
    reads: &[usize],
    mode: InputMode,
    files: &[PathBuf],
) -> ExitCode {
    let mut options = InspectOptions {
        expect_proxy,
        listener: None,
        reads: reads.to_vec(),
        timeline: None,
    };
    let mut listeners = Vec::new();
    if let Some(config) = &globals.config {
        match listener_routes(config, listener) {
            Ok(configured) => {
                if let Some(first) = configured.first() {
                    options.expect_proxy |= first.expect_proxy;
                    options.listener = Some(first.tcp.clone());
                }
                listeners = configured;
            }
            Err(error) => {
                eprintln!("preread inspect: {error}");
                return ExitCode::from(EXIT_USAGE);
            }
        }
    } else if listener.is_some() {
        eprintln!("preread inspect: --listener needs --config");
        return ExitCode::from(EXIT_USAGE);
    } else if !reads.is_empty() {
        eprintln!("preread inspect: --reads needs --config (it shapes the decision)");
        return ExitCode::from(EXIT_USAGE);
    }
    match mode {
        InputMode::Quic => {
            // Without --listener, the config's first QUIC listener.
            let first_quic = listeners.iter().find(|l| l.quic);
            let listener = first_quic.or(listeners.first()).map(|l| &l.quic_view);
            return inspect_quic_files(listener, hex, files);
        }
        InputMode::Pcap => {
            let options = PcapOptions {
                listeners,
                pinned: listener.is_some(),
                expect_proxy,
            };
            return inspect_pcap_files(&options, files);
        }
        InputMode::Bytes => {}
    }
    let mut status = ExitCode::SUCCESS;
    let mut stdout = std::io::stdout().lock();
    for path in files {
        match read_input(path, hex) {
            Ok(bytes) => {
                let report = inspect_one(&path.display().to_string(), &bytes, &options);
                if writeln!(stdout, "{report}").is_err() {
                    return ExitCode::from(EXIT_USAGE);
                }
            }
            Err(error) => {
                eprintln!("preread inspect: {error}");
                status = ExitCode::from(EXIT_USAGE);
            }
        }
    }
    status
}

/// `inspect --quic`: each file one flow's datagrams, decided by the QUIC
/// step with the listener's routes and cap; a file whose length prefixes
/// do not add up is reported on stderr, the others still printed.
fn inspect_quic_files(listener: Option<&QuicListener>, hex: bool, files: &[PathBuf]) -> ExitCode {
    let mut status = ExitCode::SUCCESS;
    let mut stdout = std::io::stdout().lock();
    for path in files {
        let bytes = match read_input(path, hex) {
            Ok(bytes) => bytes,
            Err(error) => {
                eprintln!("preread inspect: {error}");
                status = ExitCode::from(EXIT_USAGE);
                continue;
            }
        };
        let datagrams = match split_datagrams(&bytes) {
            Ok(datagrams) => datagrams,
            Err(error) => {
                eprintln!("preread inspect: {}: {error}", path.display());
                status = ExitCode::from(EXIT_USAGE);
                continue;
            }
        };
        let name = path.display().to_string();
        let report = inspect_quic(&name, bytes.len(), &datagrams, listener, None);
        if writeln!(stdout, "{report}").is_err() {
            return ExitCode::from(EXIT_USAGE);
        }
    }
    status
}

/// `inspect --pcap`: each file a capture, one JSON object per client first
/// flight; what the file's walk skipped or where it stopped is said on
/// stderr. A file that is no capture is reported on stderr (exit status
/// 2), the others still printed.
fn inspect_pcap_files(options: &PcapOptions, files: &[PathBuf]) -> ExitCode {
    let mut status = ExitCode::SUCCESS;
    let mut stdout = std::io::stdout().lock();
    for path in files {
        let bytes = match read_input(path, false) {
            Ok(bytes) => bytes,
            Err(error) => {
                eprintln!("preread inspect: {error}");
                status = ExitCode::from(EXIT_USAGE);
                continue;
            }
        };
        let name = path.display().to_string();
        let (flows, walked) = match inspect_pcap(&name, &bytes, options) {
            Ok(read) => read,
            Err(error) => {
                eprintln!("preread inspect: {name}: {error}");
                status = ExitCode::from(EXIT_USAGE);
                continue;
            }
        };
        for flow in &flows {
            if writeln!(stdout, "{flow}").is_err() {
                return ExitCode::from(EXIT_USAGE);
            }
        }
        for note in capture_notes(&walked, flows.len()) {
            eprintln!("preread inspect: {name}: {note}");
        }
    }
    status
}
