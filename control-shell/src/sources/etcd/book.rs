//! What the etcd source knows of the store's route keys: each name with
//! the revision of its last change, and what turns a watch response or a
//! new read of the whole prefix into the difference to report.
//!
//! Owns: [`Book`] (the names and their mod revisions, the revision
//! served, the revision the watch resumes after) and the two ways it
//! moves: [`Book::fold`] (one watch response: the last event of each key
//! wins) and [`Book::resync`] (a whole read, at start or after a canceled
//! watch: only keys whose mod revision differs, and the names gone, are
//! reported). The revision served after a read is the newest change of a
//! route key it holds, not the read's own revision (which the other
//! replicas' status keys move): a replica that read the prefix serves the
//! revision the replicas that followed the watch serve. Must never: move
//! the watch past a revision whose changes it did not report (a revision
//! skipped is a change lost for good), or parse a value that did not
//! change.

use std::collections::BTreeMap;

use command::sources::Fragment;
use command::sources::etcd::{fragment, route_name};

/// One key as read: its name, value and mod revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub mod_revision: i64,
}

/// One event of a watch response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event<'a> {
    Put(Read<'a>),
    Delete { key: &'a [u8] },
}

/// The difference to report, as of `revision`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Delta {
    pub revision: i64,
    pub put: Vec<Fragment>,
    pub deleted: Vec<String>,
}

/// The route keys as reported. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Book {
    /// Name to mod revision.
    keys: BTreeMap<String, i64>,
    /// The revision served: the newest change reported. `None` before
    /// the first read.
    revision: Option<i64>,
    /// The revision the watch resumes after: the last read's, or the last
    /// response's.
    seen: i64,
    routes_prefix: String,
}

impl Book {
    /// An empty book of the keys under `routes_prefix`.
    pub(crate) fn new(routes_prefix: String) -> Self {
        Self {
            keys: BTreeMap::new(),
            revision: None,
            seen: 0,
            routes_prefix,
        }
    }

    /// The revision served (the newest change reported).
    pub(crate) fn revision(&self) -> Option<i64> {
        self.revision
    }

    /// The revision the watch starts from: the one after all it read.
    pub(crate) fn watch_from(&self) -> i64 {
        self.seen + 1
    }

    /// How many route keys it holds.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// One watch response's `events`, at the response's `revision`: the
    /// last event of each key counts. A key outside the route names is
    /// ignored.
    pub(crate) fn fold(&mut self, revision: i64, events: &[Event<'_>]) -> Delta {
        let mut last: BTreeMap<&str, &Event<'_>> = BTreeMap::new();
        for event in events {
            let key = match event {
                Event::Put(read) => read.key,
                Event::Delete { key } => key,
            };
            if let Some(name) = route_name(key, &self.routes_prefix) {
                last.insert(name, event);
            }
        }
        let mut delta = Delta {
            revision,
            ..Delta::default()
        };
        for (name, event) in last {
            match event {
                Event::Put(read) => {
                    self.keys.insert(name.to_owned(), read.mod_revision);
                    delta.put.push(fragment(name, read.value));
                }
                Event::Delete { .. } => {
                    if self.keys.remove(name).is_some() {
                        delta.deleted.push(name.to_owned());
                    }
                }
            }
        }
        self.revision = Some(self.revision.map_or(revision, |r| r.max(revision)));
        self.seen = self.seen.max(revision);
        delta
    }

    /// A whole read of the prefix at `revision` (`reads`, every key of it):
    /// the keys new or changed since the book's, and the names gone, at
    /// the newest change among them (or the revision served before, when
    /// newer: a deletion).
    pub(crate) fn resync(&mut self, revision: i64, reads: &[Read<'_>]) -> Delta {
        let newest = reads.iter().map(|r| r.mod_revision).max().unwrap_or(0);
        let served = newest.max(self.revision.unwrap_or(0));
        let mut delta = Delta {
            revision: served,
            ..Delta::default()
        };
        let mut seen: BTreeMap<String, i64> = BTreeMap::new();
        for read in reads {
            let Some(name) = route_name(read.key, &self.routes_prefix) else {
                continue;
            };
            if self.keys.get(name) != Some(&read.mod_revision) {
                delta.put.push(fragment(name, read.value));
            }
            seen.insert(name.to_owned(), read.mod_revision);
        }
        delta.deleted = self
            .keys
            .keys()
            .filter(|name| !seen.contains_key(*name))
            .cloned()
            .collect();
        self.keys = seen;
        self.revision = Some(served);
        self.seen = self.seen.max(revision);
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/p/routes/";

    fn put<'a>(key: &'a [u8], value: &'a [u8], mod_revision: i64) -> Event<'a> {
        Event::Put(Read {
            key,
            value,
            mod_revision,
        })
    }

    fn names(delta: &Delta) -> (Vec<&str>, Vec<&str>) {
        (
            delta.put.iter().map(|f| f.id.name.as_str()).collect(),
            delta.deleted.iter().map(String::as_str).collect(),
        )
    }

    #[test]
    fn a_response_reports_the_last_event_of_each_route_key() {
        let mut book = Book::new(P.into());
        let events = [
            put(b"/p/routes/a", b"", 5),
            put(b"/p/routes/b", b"", 5),
            Event::Delete {
                key: b"/p/routes/a",
            },
            put(b"/p/status/x", b"", 5),
        ];
        let delta = book.fold(5, &events);
        assert_eq!(names(&delta), (vec!["b"], vec![]), "a never existed here");
        assert_eq!(book.revision(), Some(5));
        assert_eq!(book.watch_from(), 6);
        let delta = book.fold(
            6,
            &[Event::Delete {
                key: b"/p/routes/b",
            }],
        );
        assert_eq!(names(&delta), (vec![], vec!["b"]));
        assert_eq!(book.len(), 0);
    }

    #[test]
    fn a_resync_reports_only_what_differs() {
        let mut book = Book::new(P.into());
        let first = [
            Read {
                key: b"/p/routes/a",
                value: b"",
                mod_revision: 2,
            },
            Read {
                key: b"/p/routes/b",
                value: b"",
                mod_revision: 3,
            },
            Read {
                key: b"/p/routes/c",
                value: b"",
                mod_revision: 4,
            },
        ];
        let delta = book.resync(4, &first);
        assert_eq!(names(&delta), (vec!["a", "b", "c"], vec![]));
        let later = [
            Read {
                key: b"/p/routes/a",
                value: b"",
                mod_revision: 2,
            },
            Read {
                key: b"/p/routes/c",
                value: b"",
                mod_revision: 9,
            },
            Read {
                key: b"/p/routes/d",
                value: b"",
                mod_revision: 8,
            },
        ];
        let delta = book.resync(10, &later);
        assert_eq!(names(&delta), (vec!["c", "d"], vec!["b"]));
        assert_eq!(
            book.revision(),
            Some(9),
            "the newest change, not the read's"
        );
        assert_eq!(book.watch_from(), 11, "the watch resumes after the read");
        assert_eq!(
            book.resync(11, &later),
            Delta {
                revision: 9,
                ..Delta::default()
            }
        );
        assert_eq!(book.watch_from(), 12);
    }
}
