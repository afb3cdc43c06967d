//! `preread reload`: apply the difference between the config file and the
//! running state, as one routing generation.
//!
//! Owns: asking the proxy to read the config file itself (`reload_file`,
//! with the size and CRC-32 the CLI read, so one parse instead of three at
//! 100,000 routes), and when it cannot (another mount namespace, another
//! user's file, an older proxy), sending the config's declarations in
//! bounded parts (one `apply_changes` batch marked as declarations, however
//! large the config); then printing the proxy's report. The proxy computes the diff
//! from its own running state, validates each change, skips the refused
//! ones and applies the others together; the skipped ones are reported,
//! never counted as applied, so the next reload tries them again. Must
//! never: send a part over [`PART_BYTES`], or report as applied a change
//! the proxy did not list as applied.

use std::path::Path;
use std::process::ExitCode;

use command::channel::BlockingChannel;
use command::codes::ErrorCode;
use command::config::load_config;
use command::proto::{self, request::RequestType, response_content::ContentType};
use prost::Message;

use super::client::{config_path, connect, is_failure};
use super::describe;
use super::reload_failure::ReloadFailure;
use super::{EXIT_FAILED, EXIT_USAGE, Globals};
use preread_worker::answer_code::AnswerCode;

/// The most bytes of requests one part carries: well under the command
/// channel's frame limit.
pub(super) const PART_BYTES: usize = 512 << 10;

fn wrap(request_type: RequestType) -> proto::Request {
    proto::Request {
        request_type: Some(request_type),
    }
}

/// `requests` cut into parts of at most [`PART_BYTES`] encoded bytes each
/// (a single larger request makes a part alone); at least one part.
fn parts(requests: Vec<proto::Request>) -> Vec<Vec<proto::Request>> {
    let mut parts = vec![Vec::new()];
    let mut bytes = 0;
    for request in requests {
        let len = request.encoded_len();
        if bytes + len > PART_BYTES && parts.last().is_some_and(|p| !p.is_empty()) {
            parts.push(Vec::new());
            bytes = 0;
        }
        bytes += len;
        if let Some(part) = parts.last_mut() {
            part.push(request);
        }
    }
    parts
}

/// Sends the declarations part by part; the report the last part gets.
fn send(
    channel: &mut BlockingChannel,
    requests: Vec<proto::Request>,
) -> Result<proto::BatchReport, ReloadFailure> {
    let parts = parts(requests);
    let count = parts.len();
    for (index, requests) in parts.into_iter().enumerate() {
        let more = index + 1 < count;
        let batch = wrap(RequestType::ApplyChanges(proto::ChangeBatch {
            requests,
            declarations: true,
            more,
        }));
        let response =
            channel
                .request(&batch, |_| {})
                .map_err(|error| ReloadFailure::NoAnswer {
                    part: Some((index + 1, count)),
                    error,
                })?;
        if is_failure(&response) {
            return Err(ReloadFailure::Refused {
                code: response.error_code,
                message: response.message,
            });
        }
        if !more {
            return match response.content.and_then(|c| c.content_type) {
                Some(ContentType::Batch(report)) => Ok(report),
                _ => Err(ReloadFailure::NoReport),
            };
        }
    }
    // `parts` gives at least one part, and the last one returns.
    Err(ReloadFailure::NoReport)
}

pub(super) fn run(globals: &Globals) -> ExitCode {
    let path = config_path(globals);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) => {
            eprintln!(
                "preread reload: cannot read config file {}: {error}",
                path.display()
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut channel = match connect(globals) {
        Ok(channel) => channel,
        Err(error) => {
            eprintln!("preread: {error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let outcome = match ask_to_read(&mut channel, &path, &bytes) {
        Asked::Report(report) => Ok(report),
        Asked::Refused(message) => {
            eprintln!("{message}");
            return ExitCode::from(EXIT_USAGE);
        }
        Asked::Failed(failure) => Err(Unsent::Failed(failure)),
        Asked::Unseen(why) => {
            eprintln!("preread reload: {why}; sending the config's declarations instead");
            send_declarations(&mut channel, &path, &bytes)
        }
    };
    let report = match outcome {
        Ok(report) => report,
        Err(Unsent::Config(code)) => return code,
        Err(Unsent::Failed(failure)) => {
            eprintln!("preread reload: {failure}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    print(globals, &report);
    if report.skipped_total == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    }
}

/// What the proxy made of `reload_file`.
enum Asked {
    Report(proto::BatchReport),
    /// The config has problems (the message lists them).
    Refused(String),
    /// The proxy cannot read the file, reads another one, or does not know
    /// the request (it predates it).
    Unseen(String),
    Failed(ReloadFailure),
}

/// Why no report came back.
enum Unsent {
    /// The config has problems, printed already: the exit status.
    Config(ExitCode),
    Failed(ReloadFailure),
}

/// Asks the proxy to read the file itself, telling it what the CLI read so
/// that it reloads no other file of that name.
fn ask_to_read(channel: &mut BlockingChannel, path: &Path, bytes: &[u8]) -> Asked {
    let absolute = match std::fs::canonicalize(path) {
        Ok(absolute) => absolute,
        Err(error) => return Asked::Unseen(format!("cannot resolve {}: {error}", path.display())),
    };
    let request = wrap(RequestType::ReloadFile(proto::ReloadFile {
        path: absolute.display().to_string(),
        size: bytes.len() as u64,
        crc32: crc32fast::hash(bytes),
    }));
    let response = match channel.request(&request, |_| {}) {
        Ok(response) => response,
        Err(error) => return Asked::Failed(ReloadFailure::NoAnswer { part: None, error }),
    };
    if !is_failure(&response) {
        return match response.content.and_then(|c| c.content_type) {
            Some(ContentType::Batch(report)) => Asked::Report(report),
            _ => Asked::Failed(ReloadFailure::NoReport),
        };
    }
    let code = response.error_code.as_str();
    if code == AnswerCode::ConfigRefused.as_str() {
        Asked::Refused(response.message)
    } else if code == AnswerCode::ConfigUnseen.as_str()
        || code == AnswerCode::Validation(ErrorCode::UnsupportedRequest).as_str()
    {
        Asked::Unseen(response.message)
    } else {
        Asked::Failed(ReloadFailure::Refused {
            code: response.error_code,
            message: response.message,
        })
    }
}

/// The fallback: the CLI checks the config it read and sends its
/// declarations; the proxy diffs them against its running state.
fn send_declarations(
    channel: &mut BlockingChannel,
    path: &Path,
    bytes: &[u8],
) -> Result<proto::BatchReport, Unsent> {
    let checked = std::str::from_utf8(bytes)
        .map_err(|e| vec![format!(": config file is not UTF-8: {e}")])
        .and_then(|text| {
            load_config(text).map_err(|problems| problems.iter().map(|p| format!(":{p}")).collect())
        });
    let loaded = match checked {
        Ok(loaded) => {
            // The proxy gets declarations, not the file: its warnings are
            // only seen here.
            for warning in &loaded.warnings {
                eprintln!("{}:{warning}", path.display());
            }
            loaded
        }
        Err(problems) => {
            for problem in problems {
                eprintln!("{}{problem}", path.display());
            }
            return Err(Unsent::Config(ExitCode::from(EXIT_USAGE)));
        }
    };
    send(channel, loaded.requests().cloned().collect()).map_err(Unsent::Failed)
}

/// A reloaded request is always a change; anything else is shown as sent.
fn described(request: &proto::Request) -> String {
    describe::change(request).unwrap_or_else(|| format!("{request:?}"))
}

fn print(globals: &Globals, report: &proto::BatchReport) {
    for warning in &report.warnings {
        eprintln!("{warning}");
    }
    for request in &report.applied {
        if globals.json {
            println!("{}", serde_json::json!({ "applied": request }));
        } else {
            println!("applied {}", described(request));
        }
    }
    let unlisted = (report.applied_total as usize).saturating_sub(report.applied.len());
    if unlisted > 0 && !globals.json {
        println!("… and {unlisted} more applied");
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
                described(&request),
                skipped.error_code,
                skipped.message
            );
        }
    }
    let unlisted = (report.skipped_total as usize).saturating_sub(report.skipped.len());
    if unlisted > 0 && !globals.json {
        eprintln!("… and {unlisted} more skipped");
    }
    if !globals.json {
        println!(
            "{} applied, {} skipped",
            report.applied_total, report.skipped_total
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(id: String) -> proto::Request {
        wrap(RequestType::AddCluster(proto::Cluster {
            cluster_id: id,
            ..Default::default()
        }))
    }

    #[test]
    fn parts_are_bounded_ordered_and_complete() {
        assert_eq!(parts(Vec::new()).len(), 1, "an empty config is one part");
        let requests: Vec<proto::Request> = (0..60_000).map(|i| cluster(format!("c{i}"))).collect();
        let split = parts(requests.clone());
        assert!(split.len() > 1);
        for part in &split {
            let bytes: usize = part.iter().map(Message::encoded_len).sum();
            assert!(bytes <= PART_BYTES, "{bytes}");
        }
        assert_eq!(split.concat(), requests);
        // A request larger than a part travels alone.
        let huge = cluster("x".repeat(PART_BYTES + 1));
        let split = parts(vec![cluster("a".into()), huge.clone(), cluster("b".into())]);
        assert_eq!(split.len(), 3);
        assert_eq!(split[1], vec![huge]);
    }
}
