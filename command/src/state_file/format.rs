//! The text of a state file: the version header, one JSON request per line,
//! and the trailer that seals them.
//!
//! Owns: rendering a text from requests, the header (with the
//! `journal_seq` of a snapshot that a journal continues) and trailer
//! lines, the integrity check (the trailer's request count and CRC-32 of
//! every byte before it), the all-or-nothing replay of the lines into a
//! fresh [`ConfigState`], and the check of one request line, which the
//! journal's records share.
//!
//! Must never: touch a file, return a partially replayed state, or accept an
//! unsealed text except under [`Check::Unsealed`] (the explicit `preread
//! state seal` path).

use std::io::Write;

use serde::{Deserialize, Serialize};

use super::{
    HEADER_KEY, JOURNAL_SEQ_KEY, LEGACY_STATE_FILE_VERSION, STATE_FILE_VERSION, StateFileError,
    TRAILER_KEY,
};
use crate::codes::ErrorCode;
use crate::proto;
use crate::state::ConfigState;

/// What the trailer line holds, under [`TRAILER_KEY`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Seal {
    /// Request lines between the header and the trailer.
    requests: u64,
    /// CRC-32 (IEEE) of every byte before the trailer line, as 8 lowercase
    /// hex digits.
    crc32: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrailerLine {
    preread_state_end: Seal,
}

/// A state text, checked and replayed.
#[derive(Debug)]
pub(super) struct Replayed {
    pub(super) state: ConfigState,
    pub(super) requests: Vec<proto::Request>,
    /// The header's `journal_seq`: the file is the snapshot of a journal,
    /// holding its records up to this one.
    pub(super) journal_seq: Option<u64>,
}

/// The header line, without its newline.
pub(super) fn header_line(journal_seq: Option<u64>) -> String {
    match journal_seq {
        None => format!("{{\"{HEADER_KEY}\":{STATE_FILE_VERSION}}}"),
        Some(seq) => {
            format!("{{\"{HEADER_KEY}\":{STATE_FILE_VERSION},\"{JOURNAL_SEQ_KEY}\":{seq}}}")
        }
    }
}

/// Why [`write_state`] stopped.
#[derive(Debug)]
pub(super) enum WriteFailure {
    /// A request that does not serialize.
    Request(StateFileError),
    /// The output refused a write.
    Io(std::io::Error),
}

/// Writes the whole text of a state file holding `requests` to `out`,
/// line by line (the header, one JSON request per line, the trailer, each
/// ending with `\n`), sealing it as it goes: no copy of the text is held.
/// Returns its length.
pub(super) fn write_state(
    out: &mut impl Write,
    requests: &[proto::Request],
    journal_seq: Option<u64>,
) -> Result<u64, WriteFailure> {
    let mut sink = Sink {
        out,
        crc: crc32fast::Hasher::new(),
        len: 0,
    };
    let mut line = header_line(journal_seq).into_bytes();
    line.push(b'\n');
    sink.put(&line, true)?;
    for (index, request) in requests.iter().enumerate() {
        line.clear();
        serde_json::to_writer(&mut line, request).map_err(|error| {
            // Line of the request in the file that would have been written.
            WriteFailure::Request(StateFileError::invalid(
                index + 2,
                ErrorCode::StateFileCorrupt,
                format!("request does not serialize: {error}"),
            ))
        })?;
        debug_assert!(!line.contains(&b'\n'), "serde_json escapes newlines");
        line.push(b'\n');
        sink.put(&line, true)?;
    }
    let trailer = trailer_line(Seal {
        requests: u64::try_from(requests.len()).unwrap_or(u64::MAX),
        crc32: format!("{:08x}", sink.crc.clone().finalize()),
    });
    sink.put(trailer.as_bytes(), false)?;
    Ok(sink.len)
}

/// Where [`write_state`] writes, with the checksum and length so far.
struct Sink<'a, W> {
    out: &'a mut W,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> Sink<'_, W> {
    /// Writes `bytes`, covered by the trailer's checksum when `sealed`.
    fn put(&mut self, bytes: &[u8], sealed: bool) -> Result<(), WriteFailure> {
        if sealed {
            self.crc.update(bytes);
        }
        self.len += u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        self.out.write_all(bytes).map_err(WriteFailure::Io)
    }
}

/// The trailer line of `seal`, with its newline.
fn trailer_line(seal: Seal) -> String {
    let trailer = serde_json::to_string(&TrailerLine {
        preread_state_end: seal,
    })
    // Two plain fields of a derived Serialize: nothing can fail.
    .unwrap_or_default();
    format!("{trailer}\n")
}

/// `body` followed by its trailer line.
pub(super) fn seal(body: &str) -> String {
    let trailer = trailer_line(Seal {
        requests: request_lines(body),
        crc32: crc_hex(body),
    });
    format!("{body}{trailer}")
}

fn crc_hex(bytes: &str) -> String {
    format!("{:08x}", crc32fast::hash(bytes.as_bytes()))
}

/// Non-blank lines after the header.
fn request_lines(body: &str) -> u64 {
    let count = body
        .split_inclusive('\n')
        .skip(1)
        .filter(|line| !line.trim().is_empty())
        .count();
    u64::try_from(count).unwrap_or(u64::MAX)
}

/// How much of a text [`replay`] trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// The current version, with a trailer that matches.
    Sealed,
    /// Also a version 1 text, or a current one whose trailer is missing or
    /// does not match (`preread state seal`): every line is still checked.
    Unsealed,
}

/// Checks the header, then (for [`Check::Sealed`]) the trailer, then parses
/// and dispatches every request line in order into a fresh state.
pub(super) fn replay(text: &str, check: Check) -> Result<Replayed, StateFileError> {
    let Some(header) = text.split_inclusive('\n').next() else {
        return Err(StateFileError::invalid(
            1,
            ErrorCode::StateFileCorrupt,
            format!(
                "the file is empty: a state file starts with {}",
                header_line(None)
            ),
        ));
    };
    let (version, journal_seq) = check_header(header, check)?;
    let body_end = match (check, version) {
        (Check::Sealed, _) => verify_trailer(text)?,
        (Check::Unsealed, LEGACY_STATE_FILE_VERSION) => text.len(),
        (Check::Unsealed, _) => trailer_start(text)
            .filter(|&start| parse_trailer(&text[start..]).is_some())
            .unwrap_or(text.len()),
    };
    let mut state = ConfigState::default();
    let mut requests = Vec::new();
    let body = text.get(..body_end).unwrap_or(text);
    for (index, raw) in body.split_inclusive('\n').enumerate().skip(1) {
        if let Some(request) = replay_line(&mut state, raw, index + 1)? {
            requests.push(request);
        }
    }
    Ok(Replayed {
        state,
        requests,
        journal_seq,
    })
}

/// Checks one request line (with its newline), numbered `number` in its
/// file, and dispatches it into `state`; `None` for a blank line.
pub(super) fn replay_line(
    state: &mut ConfigState,
    raw: &str,
    number: usize,
) -> Result<Option<proto::Request>, StateFileError> {
    let Some(line) = raw.strip_suffix('\n') else {
        return Err(StateFileError::invalid(
            number,
            ErrorCode::StateFileCorrupt,
            "the last line does not end with a newline: the file was cut short",
        ));
    };
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.trim().is_empty() {
        return Ok(None);
    }
    let request: proto::Request = serde_json::from_str(line).map_err(|error| {
        StateFileError::invalid(
            number,
            ErrorCode::StateFileCorrupt,
            format!("not a JSON request: {error}"),
        )
    })?;
    if request.request_type.is_none() {
        return Err(StateFileError::invalid(
            number,
            ErrorCode::StateFileCorrupt,
            "the request has no request_type",
        ));
    }
    let _applied = state.dispatch(&request).map_err(|refusal| {
        StateFileError::invalid(
            number,
            refusal.code,
            format!("request refused on replay: {}", refusal.message),
        )
    })?;
    Ok(Some(request))
}

/// The version of a valid header line (with its newline), and its
/// `journal_seq`.
fn check_header(raw: &str, check: Check) -> Result<(u64, Option<u64>), StateFileError> {
    let not_state = || {
        StateFileError::invalid(
            1,
            ErrorCode::StateFileCorrupt,
            format!(
                "not a preread state file: the first line must be {}",
                header_line(None)
            ),
        )
    };
    let Some(line) = raw.strip_suffix('\n') else {
        return Err(StateFileError::invalid(
            1,
            ErrorCode::StateFileIntegrity,
            "the header line does not end with a newline: the file was cut short",
        ));
    };
    let line = line.strip_suffix('\r').unwrap_or(line);
    let header: serde_json::Value = serde_json::from_str(line).map_err(|_| not_state())?;
    let object = header.as_object().ok_or_else(not_state)?;
    let version = object.get(HEADER_KEY).ok_or_else(not_state)?;
    let journal_seq = match object.get(JOURNAL_SEQ_KEY) {
        None if object.len() == 1 => None,
        Some(seq) if object.len() == 2 => Some(seq.as_u64().ok_or_else(not_state)?),
        _ => return Err(not_state()),
    };
    match (version.as_u64(), check) {
        (Some(STATE_FILE_VERSION), _) => Ok((STATE_FILE_VERSION, journal_seq)),
        (Some(LEGACY_STATE_FILE_VERSION), Check::Unsealed) if journal_seq.is_none() => {
            Ok((LEGACY_STATE_FILE_VERSION, None))
        }
        (Some(LEGACY_STATE_FILE_VERSION), Check::Sealed) => Err(StateFileError::invalid(
            1,
            ErrorCode::StateFileVersion,
            format!(
                "state file format version {LEGACY_STATE_FILE_VERSION} has no integrity \
                 trailer, so a file cut short cannot be told from a whole one: nothing \
                 applied; check that it holds every route, then convert it with `preread \
                 state seal -f FILE` (this preread reads version {STATE_FILE_VERSION})"
            ),
        )),
        _ => Err(StateFileError::invalid(
            1,
            ErrorCode::StateFileVersion,
            format!(
                "state file format version {version} is not supported: this preread reads \
                 version {STATE_FILE_VERSION}"
            ),
        )),
    }
}

/// Where the last line starts, when the text ends with a newline and has
/// more than the header.
fn trailer_start(text: &str) -> Option<usize> {
    let without_newline = text.strip_suffix('\n')?;
    let start = without_newline.rfind('\n')? + 1;
    Some(start)
}

fn parse_trailer(line: &str) -> Option<Seal> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    serde_json::from_str::<TrailerLine>(line)
        .ok()
        .map(|trailer| trailer.preread_state_end)
}

/// Checks the trailer against the text before it; returns where it starts.
fn verify_trailer(text: &str) -> Result<usize, StateFileError> {
    let lines = text.split_inclusive('\n').count();
    let incomplete = |line: usize, message: String| {
        StateFileError::invalid(line, ErrorCode::StateFileIntegrity, message)
    };
    if !text.ends_with('\n') {
        return Err(incomplete(
            lines,
            "the last line does not end with a newline: the file was cut short; nothing \
             applied"
                .to_owned(),
        ));
    }
    let Some(seal) = trailer_start(text).and_then(|start| {
        let seal = parse_trailer(&text[start..])?;
        Some((start, seal))
    }) else {
        return Err(incomplete(
            lines + 1,
            format!(
                "the file ends at line {lines} without the trailer a save writes last \
                 ({{\"{TRAILER_KEY}\":…}}): it was cut short, or not written by preread; \
                 nothing applied"
            ),
        ));
    };
    let (start, seal) = seal;
    let body = &text[..start];
    let found = request_lines(body);
    if found != seal.requests {
        return Err(incomplete(
            lines,
            format!(
                "the file holds {found} request line(s) where its trailer says {}: lines \
                 were lost or added; nothing applied",
                seal.requests
            ),
        ));
    }
    let crc = crc_hex(body);
    if crc != seal.crc32 {
        return Err(incomplete(
            lines,
            format!(
                "the checksum of the file is {crc} where its trailer says {}: the file was \
                 altered or damaged; nothing applied",
                seal.crc32
            ),
        ));
    }
    Ok(start)
}
