//! Route sources: desired-state fragments declared where the services run
//! (Docker labels, the files of a watched directory, the keys of an etcd
//! prefix), and their merge with
//! the config file's declarations into the one state a reload applies.
//!
//! Owns: [`Fragment`] and its id, [`merge`] (the clash rule: a fragment
//! that clashes is left out whole, the rest applies), the translation of
//! Docker labels into fragments ([`labels`]) and of a directory file into
//! one ([`directory`]). Must never: read a file or a socket (the shell
//! reads the sources and hands their text or container lists in), keep any
//! part of a clashing fragment in the merged state, or remember an
//! exclusion: every merge starts again from the file and every fragment, so
//! a fragment left out once is tried again on the next change of any
//! source.

use core::fmt;

use crate::codes::ErrorCode;
use crate::proto;

pub mod directory;
pub mod etcd;
mod incremental;
pub mod labels;
mod merge;
mod net;
mod packed;

pub use incremental::{Candidate, Changes, merge_changes};
pub use merge::{AppliedFragment, Exclusion, Merged, merge};
pub use packed::Declarations;

preread_core::stable_names! {
    /// Where a fragment comes from; its name is what `preread sources`
    /// prints.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    #[non_exhaustive]
    pub enum SourceKind {
        /// `[sources.directory]`: one fragment per `*.toml` file.
        Directory => "directory",
        /// `[sources.docker]`: one fragment per label name.
        Docker => "docker",
        /// `[sources.etcd]`: one fragment per `<prefix>routes/<name>` key.
        Etcd => "etcd",
    }
}

/// A fragment's identity: its source and its name there (a file name, a
/// Docker label name).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FragmentId {
    /// The source.
    pub kind: SourceKind,
    /// The file name, the `<name>` of `preread.tcp.<name>.*`, or the
    /// `<name>` of an etcd key `<prefix>routes/<name>`.
    pub name: String,
}

impl FragmentId {
    /// The id of fragment `name` of `kind`.
    #[must_use]
    pub fn new(kind: SourceKind, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
        }
    }
}

impl fmt::Display for FragmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// A request of a fragment, with where it was declared, for the message of
/// a refusal (`web.toml:4:3`, `label preread.tcp.web.sni of container
/// /web-1`).
#[derive(Clone, Debug, PartialEq)]
pub struct Declared {
    /// An add of a cluster, a frontend or a backend.
    pub request: proto::Request,
    /// Where it was declared, as an operator finds it.
    pub origin: String,
}

/// Why a fragment cannot even be tried: what its source said is not a
/// declaration (a file that does not parse, labels that do not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The stable code (`preread explain CODE`).
    pub code: ErrorCode,
    /// What is wrong and where, and how to fix it.
    pub message: String,
}

/// What a fragment holds.
#[derive(Clone, Debug, PartialEq)]
pub enum FragmentBody {
    /// Clusters with their frontends and backends, in dispatch order
    /// (kept encoded: a source's fragments live as long as the proxy).
    Declared(Declarations),
    /// It did not parse: it is left out, with these problems.
    Broken(Vec<Problem>),
}

/// One unit of a route source, applied whole or not at all.
#[derive(Clone, Debug, PartialEq)]
pub struct Fragment {
    /// Its identity.
    pub id: FragmentId,
    /// Its declarations, or why it has none.
    pub body: FragmentBody,
}

impl Fragment {
    /// How many frontends (routes) it declares.
    #[must_use]
    pub fn routes(&self) -> usize {
        match &self.body {
            FragmentBody::Declared(declared) => declared.routes(),
            FragmentBody::Broken(_) => 0,
        }
    }
}
