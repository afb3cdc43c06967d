//! The error of every check that refuses a config entry, a state-file line
//! or a request: a stable code and a message for the operator.
//!
//! Owns: [`ValidationError`]. Must never: know a rule; the checks that
//! build one live in [`crate::validate`], [`crate::backend_address`],
//! [`crate::health_check`] and [`crate::state`], above this module.

use core::fmt;

use crate::codes::ErrorCode;

/// A refused config entry, state-file line or request: a stable code and a
/// message that names the offending object and says what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// The rule that refused it (`preread explain CODE` describes it).
    pub code: ErrorCode,
    /// What is wrong with which object, and what to change.
    pub message: String,
}

impl ValidationError {
    /// An error with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// `E123: message`.
impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl core::error::Error for ValidationError {}
