//! The text of a state journal: a header line, then one record per
//! committed routing generation, each sealed on its own.
//!
//! ```text
//! {"preread_journal":1}
//! {"journal_record":{"seq":8,"requests":1,"bytes":97,"crc32":"1c291ca3"}}
//! {"request_type":{"add_tcp_frontend":{"cluster_id":"alpha",...}}}
//! ```
//!
//! A record is its head line (sequence number, request lines, bytes and
//! CRC-32 of those lines) and then exactly `bytes` bytes of request lines,
//! in the state file's format. Sequence numbers rise by one from record to
//! record and go on across compactions: a snapshot's header says up to
//! which record it holds the journal (`journal_seq`).
//!
//! Owns: rendering a record, scanning a journal's bytes into its records,
//! telling a torn tail (a last record cut short, or damaged with nothing
//! after it: an append a crash interrupted, which was never acknowledged)
//! from damage before the end ([`ErrorCode::StateJournalCorrupt`]), and
//! replaying the records that follow a snapshot.
//!
//! Must never: touch a file, skip a damaged record that other records
//! follow, or replay a record whose predecessor is missing.

use core::fmt;

use serde::{Deserialize, Serialize};

use super::StateFileError;
use super::format::replay_line;
use crate::codes::ErrorCode;
use crate::proto;
use crate::state::ConfigState;

/// The journal format this build writes and reads.
pub const JOURNAL_VERSION: u64 = 1;

/// The header line of a journal of [`JOURNAL_VERSION`], with its newline.
pub(super) const HEADER: &str = "{\"preread_journal\":1}\n";

/// The key of a record's head line.
const RECORD_KEY: &str = "journal_record";

/// What a record's head line holds, under [`RECORD_KEY`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Head {
    /// The record's sequence number.
    seq: u64,
    /// Request lines in the record.
    requests: u64,
    /// Bytes of the request lines, newlines included.
    bytes: u64,
    /// CRC-32 (IEEE) of those bytes, as 8 lowercase hex digits.
    crc32: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeadLine {
    journal_record: Head,
}

/// One record: its head line and the request lines of `steps`.
pub(super) fn render_record(seq: u64, steps: &[proto::Request]) -> Result<String, StateFileError> {
    let mut body = String::new();
    for step in steps {
        let json = serde_json::to_string(step).map_err(|error| {
            StateFileError::invalid(
                0,
                ErrorCode::StateFileCorrupt,
                format!("request does not serialize: {error}"),
            )
        })?;
        debug_assert!(!json.contains('\n'), "serde_json escapes newlines");
        body.push_str(&json);
        body.push('\n');
    }
    let head = HeadLine {
        journal_record: Head {
            seq,
            requests: u64::try_from(steps.len()).unwrap_or(u64::MAX),
            bytes: u64::try_from(body.len()).unwrap_or(u64::MAX),
            crc32: format!("{:08x}", crc32fast::hash(body.as_bytes())),
        },
    };
    // Plain fields of a derived Serialize: nothing can fail.
    let head = serde_json::to_string(&head).unwrap_or_default();
    Ok(format!("{head}\n{body}"))
}

/// One whole record of a scanned journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record<'a> {
    pub(super) seq: u64,
    /// 1-based line of its head line in the journal.
    pub(super) line: usize,
    /// Its request lines.
    pub(super) body: &'a str,
}

/// The torn tail a scan found after the last whole record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// 1-based line where it starts.
    pub line: usize,
    /// Its length in bytes.
    pub bytes: u64,
    /// What is wrong with it.
    pub why: String,
}

/// A journal's bytes, split into records.
#[derive(Debug)]
pub(super) struct Scanned<'a> {
    pub(super) records: Vec<Record<'a>>,
    /// Bytes of the header and the whole records: where the next record
    /// goes once the torn tail is cut off.
    pub(super) whole_len: usize,
    pub(super) torn: Option<TornTail>,
}

fn corrupt(line: usize, message: impl Into<String>) -> StateFileError {
    StateFileError::invalid(line, ErrorCode::StateJournalCorrupt, message)
}

/// Splits a journal into its whole records, checking each record's head,
/// length, line count, CRC-32 and sequence number. A record that fails a
/// check is the torn tail when nothing follows it, and an error when
/// anything does.
pub(super) fn scan(bytes: &[u8]) -> Result<Scanned<'_>, StateFileError> {
    let header = HEADER;
    if !bytes.starts_with(header.as_bytes()) {
        // The journal is created whole, header included (temp and
        // rename): a header that is not there was never written by us.
        return Err(corrupt(
            1,
            format!(
                "not a preread journal of version {JOURNAL_VERSION}: the first line must be {}",
                header.trim_end()
            ),
        ));
    }
    let mut scanned = Scanned {
        records: Vec::new(),
        whole_len: header.len(),
        torn: None,
    };
    let mut pos = header.len();
    let mut line = 2;
    let mut previous: Option<u64> = None;
    while pos < bytes.len() {
        let rest = &bytes[pos..];
        let torn = |why: String| TornTail {
            line,
            bytes: u64::try_from(rest.len()).unwrap_or(u64::MAX),
            why,
        };
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            scanned.torn = Some(torn("the head line of the last record is cut short".into()));
            break;
        };
        let head = std::str::from_utf8(&rest[..newline])
            .ok()
            .and_then(|text| serde_json::from_str::<HeadLine>(text).ok())
            .map(|head| head.journal_record)
            .ok_or_else(|| {
                corrupt(
                    line,
                    format!("not the head line of a journal record ({{\"{RECORD_KEY}\":…}})"),
                )
            })?;
        let body_start = newline + 1;
        let body_end = usize::try_from(head.bytes)
            .ok()
            .and_then(|len| body_start.checked_add(len));
        let Some(body) = body_end.and_then(|end| rest.get(body_start..end)) else {
            let found = rest.len() - body_start;
            scanned.torn = Some(torn(format!(
                "record {} is cut short: {found} of its {} bytes are there",
                head.seq, head.bytes
            )));
            break;
        };
        let last = body_start + body.len() == rest.len();
        let body = match check_body(&head, body) {
            Ok(text) => text,
            Err(why) if last => {
                scanned.torn = Some(torn(format!(
                    "record {}: {why}, and nothing follows it",
                    head.seq
                )));
                break;
            }
            Err(why) => {
                return Err(corrupt(
                    line,
                    format!(
                        "record {}: {why}, and other records follow it: the journal was damaged",
                        head.seq
                    ),
                ));
            }
        };
        if let Some(previous) = previous
            && Some(head.seq) != previous.checked_add(1)
        {
            return Err(corrupt(
                line,
                format!(
                    "record {} follows record {previous}: records are missing or out of order",
                    head.seq
                ),
            ));
        }
        previous = Some(head.seq);
        scanned.records.push(Record {
            seq: head.seq,
            line,
            body,
        });
        pos += body_start + body.len();
        line += 1 + body.matches('\n').count();
        scanned.whole_len = pos;
    }
    Ok(scanned)
}

/// Why a record's request lines do not match its head; the message is
/// the middle of a sentence that names the record and says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BodyMismatch {
    Checksum { found: String, head: String },
    NotUtf8,
    NoFinalNewline,
    Lines { found: u64, head: u64 },
}

impl fmt::Display for BodyMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Checksum { found, head } => {
                write!(f, "its checksum is {found} where its head says {head}")
            }
            Self::NotUtf8 => f.write_str("it is not UTF-8 text"),
            Self::NoFinalNewline => f.write_str("its last line does not end with a newline"),
            Self::Lines { found, head } => {
                write!(f, "it holds {found} line(s) where its head says {head}")
            }
        }
    }
}

/// A record's request lines as text, or why they do not match its head.
fn check_body<'a>(head: &Head, body: &'a [u8]) -> Result<&'a str, BodyMismatch> {
    let crc = format!("{:08x}", crc32fast::hash(body));
    if crc != head.crc32 {
        return Err(BodyMismatch::Checksum {
            found: crc,
            head: head.crc32.clone(),
        });
    }
    let text = std::str::from_utf8(body).map_err(|_| BodyMismatch::NotUtf8)?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(BodyMismatch::NoFinalNewline);
    }
    let lines = u64::try_from(text.matches('\n').count()).unwrap_or(u64::MAX);
    if lines != head.requests {
        return Err(BodyMismatch::Lines {
            found: lines,
            head: head.requests,
        });
    }
    Ok(text)
}

/// What replaying a journal onto its snapshot did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Replay {
    /// Records applied.
    pub(super) applied: usize,
    /// Records the snapshot already held.
    pub(super) skipped: usize,
    /// The sequence number of the last change the state now holds.
    pub(super) seq: u64,
}

/// Applies to `state` (the snapshot's, which holds the journal up to
/// `snapshot_seq`) the records that follow it, in order, each request
/// checked as a state file's line; appends them to `requests`.
pub(super) fn replay(
    records: &[Record<'_>],
    snapshot_seq: u64,
    state: &mut ConfigState,
    requests: &mut Vec<proto::Request>,
) -> Result<Replay, StateFileError> {
    let mut replay = Replay {
        applied: 0,
        skipped: 0,
        seq: snapshot_seq,
    };
    for record in records {
        if record.seq <= snapshot_seq {
            replay.skipped += 1;
            continue;
        }
        if Some(record.seq) != replay.seq.checked_add(1) {
            return Err(corrupt(
                record.line,
                format!(
                    "record {} follows the snapshot, which holds the journal up to record \
                     {snapshot_seq}: the records in between are missing (is the state file an \
                     older copy?)",
                    record.seq
                ),
            ));
        }
        for (offset, raw) in record.body.split_inclusive('\n').enumerate() {
            if let Some(request) = replay_line(state, raw, record.line + 1 + offset)? {
                requests.push(request);
            }
        }
        replay.seq = record.seq;
        replay.applied += 1;
    }
    Ok(replay)
}

/// The highest sequence number of any record head in `bytes`, whole or
/// not, damaged or not: what a new snapshot must hold for none of them to
/// be replayed over it.
pub(super) fn highest_seq(bytes: &[u8]) -> Option<u64> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let text = std::str::from_utf8(line).ok()?;
            serde_json::from_str::<HeadLine>(text).ok()
        })
        .map(|head| head.journal_record.seq)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(body: &[u8], requests: u64) -> Head {
        Head {
            seq: 1,
            requests,
            bytes: u64::try_from(body.len()).unwrap_or(u64::MAX),
            crc32: format!("{:08x}", crc32fast::hash(body)),
        }
    }

    #[test]
    fn a_body_that_does_not_match_its_head_says_which_field_differs() {
        let body = b"{}\n{}\n";
        assert_eq!(check_body(&head_of(body, 2), body), Ok("{}\n{}\n"));
        let mut wrong_crc = head_of(body, 2);
        wrong_crc.crc32 = "00000000".into();
        let found = format!("{:08x}", crc32fast::hash(body));
        assert_eq!(
            check_body(&wrong_crc, body).map_err(|e| e.to_string()),
            Err(format!(
                "its checksum is {found} where its head says 00000000"
            ))
        );
        assert_eq!(
            check_body(&head_of(body, 3), body).map_err(|e| e.to_string()),
            Err("it holds 2 line(s) where its head says 3".into())
        );
        let cut = b"{}\n{}";
        assert_eq!(
            check_body(&head_of(cut, 1), cut),
            Err(BodyMismatch::NoFinalNewline)
        );
        let binary = b"\xff\n";
        assert_eq!(
            check_body(&head_of(binary, 1), binary).map_err(|e| e.to_string()),
            Err("it is not UTF-8 text".into())
        );
    }
}
