//! The shape of what `preread explain CODE` prints: a title, the rule's
//! meaning, the accepted shapes, the fix and the section of
//! `doc/configure.md`. Must never: hold a rule's text (`explanations`
//! does).

use core::fmt;

/// What `preread explain CODE` prints about a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Explanation {
    /// One line naming the problem.
    pub title: &'static str,
    /// What the rule is and why it exists.
    pub meaning: &'static str,
    /// The shapes that are accepted.
    pub accepted: &'static str,
    /// How to fix a refused config or request.
    pub fix: &'static str,
    /// The section of `doc/configure.md` that documents the rule, such as
    /// `"2.2"`.
    pub section: &'static str,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\n\n{}\n\nAccepted: {}\n\nFix: {}\n\nSee: doc/configure.md §{}",
            self.title, self.meaning, self.accepted, self.fix, self.section
        )
    }
}
