//! `preread reload`: diff the config file against the running state and
//! apply only the difference, as one routing generation.
//!
//! Owns: rebuilding the running state from the proxy's listings, and
//! sending the diff as one `apply_changes` batch. The proxy validates each
//! change on its own state, skips the refused ones and applies the others
//! together; the skipped ones are reported, never counted as applied, so
//! the next reload tries them again. Must never: report as applied a change
//! the proxy did not list as applied.

use std::process::ExitCode;

use command::channel::BlockingChannel;
use command::config::load_config_file;
use command::diff::diff;
use command::proto::{self, request::RequestType, response_content::ContentType};
use command::state::ConfigState;

use super::client::{config_path, is_failure, open, socket_path};
use super::{EXIT_FAILED, EXIT_USAGE, Globals};
use crate::answer_code::AnswerCode;

fn ask(channel: &mut BlockingChannel, request_type: RequestType) -> Result<ContentType, String> {
    let request = proto::Request {
        request_type: Some(request_type),
    };
    let response = channel
        .request(&request, |_| {})
        .map_err(|e| e.to_string())?;
    if is_failure(&response) {
        return Err(response.message);
    }
    response
        .content
        .and_then(|c| c.content_type)
        .ok_or_else(|| "the proxy answered a listing without content".to_owned())
}

fn wrap(request_type: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(request_type),
    }
}

/// The running state, rebuilt from the proxy's own listings: the same
/// requests a state file would hold, replayed into an empty state.
fn running_state(channel: &mut BlockingChannel) -> Result<ConfigState, String> {
    let ContentType::Clusters(clusters) =
        ask(channel, RequestType::ListClusters(proto::ListClusters {}))?
    else {
        return Err("unexpected answer to list clusters".to_owned());
    };
    let ContentType::Listeners(listeners) =
        ask(channel, RequestType::ListListeners(proto::ListListeners {}))?
    else {
        return Err("unexpected answer to list listeners".to_owned());
    };
    let ContentType::Frontends(frontends) =
        ask(channel, RequestType::ListFrontends(proto::ListFrontends {}))?
    else {
        return Err("unexpected answer to list frontends".to_owned());
    };
    let mut requests = Vec::new();
    for entry in &clusters.clusters {
        requests.extend(
            entry
                .cluster
                .clone()
                .map(|c| wrap(RequestType::AddCluster(c))),
        );
    }
    for entry in &listeners.listeners {
        if let Some(mut config) = entry.config.clone() {
            config.active = Some(entry.active);
            requests.push(wrap(RequestType::AddTcpListener(config)));
        }
    }
    requests.extend(
        frontends
            .frontends
            .iter()
            .cloned()
            .map(|f| wrap(RequestType::AddTcpFrontend(f))),
    );
    for entry in &clusters.clusters {
        requests.extend(
            entry
                .backends
                .iter()
                .cloned()
                .map(|b| wrap(RequestType::AddBackend(b))),
        );
    }
    let mut state = ConfigState::default();
    for request in &requests {
        let _ = state.dispatch(request).map_err(|e| {
            format!("the running state does not replay ({e}); was it changed meanwhile?")
        })?;
    }
    Ok(state)
}

fn describe(request: &proto::Request) -> String {
    serde_json::to_string(request).unwrap_or_else(|_| format!("{request:?}"))
}

pub(super) fn run(globals: &Globals) -> ExitCode {
    let path = config_path(globals);
    let desired = match load_config_file(&path) {
        Ok(loaded) => loaded.state,
        Err(problems) => {
            for problem in problems {
                eprintln!("{}:{problem}", path.display());
            }
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut channel = match socket_path(globals).and_then(|socket| open(&socket, globals)) {
        Ok(channel) => channel,
        Err(message) => {
            eprintln!("preread: {message}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let current = match running_state(&mut channel) {
        Ok(state) => state,
        Err(message) => {
            eprintln!("preread reload: {message}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let requests = diff(&current, &desired);
    let batch = wrap(RequestType::ApplyChanges(proto::ChangeBatch { requests }));
    let report = match channel.request(&batch, |_| {}) {
        Err(e) => {
            eprintln!(
                "preread reload: {}: the proxy did not answer: {e}",
                AnswerCode::NoAnswer
            );
            return ExitCode::from(EXIT_FAILED);
        }
        Ok(response) if is_failure(&response) => {
            eprintln!(
                "preread reload: {}: {}",
                response.error_code, response.message
            );
            return ExitCode::from(EXIT_FAILED);
        }
        Ok(response) => match response.content.and_then(|c| c.content_type) {
            Some(ContentType::Batch(report)) => report,
            _ => {
                eprintln!(
                    "preread reload: the proxy answered without a report: is it older than this \
                     preread? (`preread status` shows its version)"
                );
                return ExitCode::from(EXIT_FAILED);
            }
        },
    };
    for request in &report.applied {
        if globals.json {
            println!("{}", serde_json::json!({ "applied": request }));
        } else {
            println!("applied {}", describe(request));
        }
    }
    for skipped in &report.skipped {
        let request = skipped.request.clone().unwrap_or_default();
        if globals.json {
            println!(
                "{}",
                serde_json::json!({ "skipped": request, "code": skipped.error_code, "message": skipped.message })
            );
        } else {
            eprintln!(
                "skipped {}: {}: {}",
                describe(&request),
                skipped.error_code,
                skipped.message
            );
        }
    }
    if !globals.json {
        println!(
            "{} applied, {} skipped",
            report.applied.len(),
            report.skipped.len()
        );
    }
    if report.skipped.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    }
}
