//! The stable codes of a refused or failed command-socket answer, as the
//! shell names them: [`command::answer_code`] holds them, below the
//! coordinator that refuses with them and the CLI that prints them.
//!
//! Owns: nothing of its own. Must never: spell a code (the one list is
//! `command`'s).

pub use command::answer_code::AnswerCode;
