//! The journal against real files: appends, torn tails cut at every byte,
//! damage before the end, missing records, and every step of a compaction
//! interrupted.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::proto::request::RequestType;

fn cluster(id: &str) -> proto::Request {
    proto::Request {
        request_type: Some(RequestType::AddCluster(proto::Cluster {
            cluster_id: id.to_owned(),
            ..Default::default()
        })),
    }
}

fn remove_cluster(id: &str) -> proto::Request {
    proto::Request {
        request_type: Some(RequestType::RemoveCluster(proto::ClusterRef {
            cluster_id: id.to_owned(),
        })),
    }
}

fn ids(state: &ConfigState) -> Vec<String> {
    state.clusters().map(|c| c.cluster_id.clone()).collect()
}

struct Saved {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Saved {
    /// A snapshot of clusters `base` holding the journal up to `seq`, and
    /// an empty journal after it.
    fn new(base: &[&str], seq: u64) -> (Self, Journal) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let requests: Vec<_> = base.iter().map(|id| cluster(id)).collect();
        save_snapshot(&path, &requests, seq).unwrap();
        let journal = Journal::create(journal_path(&path), seq).unwrap();
        (Self { _dir: dir, path }, journal)
    }

    fn journal(&self) -> PathBuf {
        journal_path(&self.path)
    }

    fn load(&self) -> Result<SavedState, StateFileError> {
        load_saved_state(&self.path)
    }
}

fn replay_of(saved: &SavedState) -> &JournalReplay {
    saved.journal.as_ref().unwrap()
}

#[test]
fn the_journal_sits_beside_its_state_file() {
    assert_eq!(
        journal_path("/var/lib/preread/state.json"),
        Path::new("/var/lib/preread/state.json.journal")
    );
}

#[test]
fn records_replay_over_their_snapshot_in_order() {
    let (saved, mut journal) = Saved::new(&["a"], 7);
    assert_eq!(journal.append(&[cluster("b"), cluster("c")]).unwrap(), 8);
    assert_eq!(journal.append(&[remove_cluster("a")]).unwrap(), 9);
    assert!(!journal.is_empty());
    let loaded = saved.load().unwrap();
    assert_eq!(ids(&loaded.state), ["b", "c"]);
    assert_eq!(loaded.snapshot_requests, 1);
    assert_eq!(loaded.requests.len(), 4);
    let replay = replay_of(&loaded);
    assert_eq!(
        (
            replay.snapshot_seq,
            replay.seq,
            replay.replayed,
            replay.already_held
        ),
        (7, 9, 2, 0)
    );
    assert_eq!(replay.whole_len, Some(journal.len()));
    assert_eq!(replay.torn, None);
    // `load_state` reads the journal too: it is part of the saved state.
    assert_eq!(load_state(&saved.path).unwrap(), loaded.state);
}

#[test]
fn the_record_format_is_its_head_then_its_lines() {
    let (saved, mut journal) = Saved::new(&[], 0);
    journal.append(&[cluster("b")]).unwrap();
    let text = fs::read_to_string(saved.journal()).unwrap();
    let line = serde_json::to_string(&cluster("b")).unwrap();
    let body = format!("{line}\n");
    assert_eq!(
        text,
        format!(
            "{{\"preread_journal\":1}}\n{{\"journal_record\":{{\"seq\":1,\"requests\":1,\
             \"bytes\":{},\"crc32\":\"{:08x}\"}}}}\n{body}",
            body.len(),
            crc32fast::hash(body.as_bytes())
        )
    );
    let snapshot = fs::read_to_string(&saved.path).unwrap();
    assert!(
        snapshot.starts_with("{\"preread_state\":2,\"journal_seq\":0}\n"),
        "{snapshot}"
    );
}

#[test]
fn a_last_record_cut_at_any_byte_is_dropped_and_the_journal_goes_on() {
    let (saved, mut journal) = Saved::new(&["a"], 0);
    journal.append(&[cluster("b")]).unwrap();
    let before = journal.len();
    journal.append(&[cluster("c"), cluster("d")]).unwrap();
    let whole = fs::read(saved.journal()).unwrap();
    for cut in before + 1..journal.len() {
        fs::write(saved.journal(), &whole[..usize::try_from(cut).unwrap()]).unwrap();
        let loaded = saved.load().unwrap();
        assert_eq!(ids(&loaded.state), ["a", "b"], "cut at {cut}");
        let replay = replay_of(&loaded);
        assert_eq!(replay.seq, 1, "cut at {cut}");
        assert_eq!(replay.whole_len, Some(before));
        let torn = replay.torn.as_ref().unwrap();
        assert_eq!((torn.line, torn.bytes), (4, cut - before), "{}", torn.why);
    }
    // Taken over, the journal loses its torn tail and the next record
    // follows the last whole one.
    let loaded = saved.load().unwrap();
    let mut resumed = Journal::resume(replay_of(&loaded)).unwrap();
    assert_eq!(fs::metadata(saved.journal()).unwrap().len(), before);
    assert_eq!(resumed.append(&[cluster("e")]).unwrap(), 2);
    let loaded = saved.load().unwrap();
    assert_eq!(ids(&loaded.state), ["a", "b", "e"]);
    assert_eq!(replay_of(&loaded).torn, None);
}

#[test]
fn a_damaged_last_record_is_dropped_but_a_damaged_earlier_one_is_refused() {
    let (saved, mut journal) = Saved::new(&[], 0);
    for id in ["a", "b", "c"] {
        journal.append(&[cluster(id)]).unwrap();
    }
    let whole = fs::read_to_string(saved.journal()).unwrap();
    let last = whole.replacen("\"cluster_id\":\"c\"", "\"cluster_id\":\"x\"", 1);
    fs::write(saved.journal(), &last).unwrap();
    let loaded = saved.load().unwrap();
    assert_eq!(ids(&loaded.state), ["a", "b"]);
    assert!(
        replay_of(&loaded)
            .torn
            .as_ref()
            .unwrap()
            .why
            .contains("checksum"),
        "{:?}",
        replay_of(&loaded).torn
    );

    let first = whole.replacen("\"cluster_id\":\"a\"", "\"cluster_id\":\"x\"", 1);
    fs::write(saved.journal(), &first).unwrap();
    let error = saved.load().unwrap_err();
    assert_eq!(
        (error.code(), error.line()),
        (ErrorCode::StateJournalCorrupt, Some(2))
    );
    let shown = error.to_string();
    assert!(
        shown.starts_with(&format!(
            "journal {}: line 2: E015: ",
            saved.journal().display()
        )),
        "{shown}"
    );
    assert!(shown.contains("other records follow it"), "{shown}");

    // A head line that is not one, with records after it.
    let garbled = whole.replacen("{\"journal_record\"", "{\"journal_recorb\"", 1);
    fs::write(saved.journal(), &garbled).unwrap();
    assert_eq!(
        saved.load().unwrap_err().code(),
        ErrorCode::StateJournalCorrupt
    );
    // A journal without its header.
    fs::write(saved.journal(), &whole["{\"preread_journal\":1}\n".len()..]).unwrap();
    let error = saved.load().unwrap_err();
    assert_eq!(
        (error.code(), error.line()),
        (ErrorCode::StateJournalCorrupt, Some(1))
    );
}

#[test]
fn records_must_follow_each_other_and_the_snapshot() {
    // A snapshot that holds up to 3, a journal that starts at 6: an older
    // copy of the state file put back beside a newer journal.
    let (saved, mut journal) = Saved::new(&["a"], 5);
    journal.append(&[cluster("b")]).unwrap();
    save_snapshot(&saved.path, &[cluster("a")], 3).unwrap();
    let error = saved.load().unwrap_err();
    assert_eq!(error.code(), ErrorCode::StateJournalCorrupt);
    assert!(error.to_string().contains("missing"), "{error}");

    // A record taken out between two others.
    let (saved, mut journal) = Saved::new(&[], 0);
    for id in ["a", "b", "c"] {
        journal.append(&[cluster(id)]).unwrap();
    }
    let text = fs::read_to_string(saved.journal()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let without_b: String = lines
        .iter()
        .enumerate()
        .filter(|(at, _)| !matches!(at, 3 | 4))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    fs::write(saved.journal(), without_b).unwrap();
    let error = saved.load().unwrap_err();
    assert_eq!(
        (error.code(), error.line()),
        (ErrorCode::StateJournalCorrupt, Some(4))
    );
    assert!(
        error.to_string().contains("record 3 follows record 1"),
        "{error}"
    );
}

#[test]
fn a_record_is_checked_as_state_file_lines_are() {
    let (saved, mut journal) = Saved::new(&["a"], 0);
    journal.append(&[cluster("b")]).unwrap();
    // Sealed by its own head, but refused by the state: no such cluster.
    journal
        .append(&[cluster("c"), remove_cluster("nope")])
        .unwrap();
    let error = saved.load().unwrap_err();
    assert_eq!((error.code(), error.line()), (ErrorCode::NotFound, Some(6)));
    assert!(error.to_string().contains("refused on replay"), "{error}");
}

#[test]
fn every_step_of_a_compaction_can_be_interrupted() {
    let (saved, mut journal) = Saved::new(&["a"], 0);
    journal.append(&[cluster("b")]).unwrap();
    journal.append(&[cluster("c")]).unwrap();
    // The compaction takes the state of record 2 and the journal's length.
    let mark = journal.len();
    let snapshot: Vec<_> = ["a", "b", "c"].iter().map(|id| cluster(id)).collect();
    // Records go on while the snapshot is written.
    journal.append(&[cluster("d")]).unwrap();
    let expected = ["a", "b", "c", "d"];
    // Killed before the rename: the old snapshot, the whole journal.
    assert_eq!(ids(&saved.load().unwrap().state), expected);
    // Killed after the rename, before the journal dropped records 1 and 2:
    // the snapshot holds them, so they are skipped.
    save_snapshot(&saved.path, &snapshot, 2).unwrap();
    let loaded = saved.load().unwrap();
    assert_eq!(ids(&loaded.state), expected);
    assert_eq!(
        (replay_of(&loaded).already_held, replay_of(&loaded).replayed),
        (2, 1)
    );
    // Done: the journal holds record 3 alone, and goes on from it.
    journal.keep_from(mark).unwrap();
    let loaded = saved.load().unwrap();
    assert_eq!(ids(&loaded.state), expected);
    assert_eq!(
        (replay_of(&loaded).already_held, replay_of(&loaded).replayed),
        (0, 1)
    );
    assert_eq!(journal.append(&[cluster("e")]).unwrap(), 4);
    assert_eq!(ids(&saved.load().unwrap().state), ["a", "b", "c", "d", "e"]);
}

#[test]
fn a_snapshot_without_journal_seq_ignores_a_journal_beside_it() {
    let (saved, mut journal) = Saved::new(&["a"], 0);
    journal.append(&[cluster("b")]).unwrap();
    save_state(&saved.path, &[cluster("a")]).unwrap();
    let loaded = saved.load().unwrap();
    assert_eq!(ids(&loaded.state), ["a"]);
    assert!(loaded.journal.is_none());
}

#[test]
fn the_highest_seq_covers_every_record_even_a_damaged_journal() {
    let (saved, mut journal) = Saved::new(&["a"], 4);
    assert_eq!(highest_journal_seq(&saved.path).unwrap(), 4);
    journal.append(&[cluster("b")]).unwrap();
    journal.append(&[cluster("c")]).unwrap();
    assert_eq!(highest_journal_seq(&saved.path).unwrap(), 6);
    let text = fs::read_to_string(saved.journal()).unwrap();
    fs::write(
        saved.journal(),
        text.replacen("\"cluster_id\":\"b\"", "\"cluster_id\":\"x\"", 1),
    )
    .unwrap();
    assert!(saved.load().is_err());
    assert_eq!(highest_journal_seq(&saved.path).unwrap(), 6);
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        highest_journal_seq(dir.path().join("none.json")).unwrap(),
        0
    );
}

#[test]
fn seal_keeps_the_journal_seq() {
    let (saved, mut journal) = Saved::new(&["a"], 3);
    journal.append(&[cluster("b")]).unwrap();
    let text = fs::read_to_string(&saved.path).unwrap();
    let edited = text.replacen("\"cluster_id\":\"a\"", "\"cluster_id\":\"z\"", 1);
    fs::write(&saved.path, edited).unwrap();
    assert_eq!(seal_state_file(&saved.path).unwrap(), 1);
    assert_eq!(ids(&saved.load().unwrap().state), ["b", "z"]);
}

#[test]
fn a_journal_seq_must_be_a_number_alone_with_the_version() {
    for header in [
        "{\"preread_state\":2,\"journal_seq\":\"1\"}\n",
        "{\"preread_state\":2,\"journal_seq\":-1}\n",
        "{\"preread_state\":2,\"journal_seq\":1,\"x\":1}\n",
        "{\"journal_seq\":1}\n",
    ] {
        let error = parse_state(&seal(header)).unwrap_err();
        assert_eq!(
            (error.line(), error.code()),
            (Some(1), ErrorCode::StateFileCorrupt),
            "{header}: {error}"
        );
    }
    assert!(parse_state(&seal("{\"preread_state\":2,\"journal_seq\":12}\n")).is_ok());
}
