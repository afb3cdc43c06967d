//! The stable codes of a refused or failed command-socket answer (its
//! `error_code`), typed.
//!
//! Owns: [`AnswerCode`]: the validation codes of doc/configure.md, and the
//! codes of the proxy itself (a worker refused or did not answer, the
//! caller may not command the proxy, the proxy is stopping, the CLI got no
//! answer, the command socket serves its most clients), with their stable
//! spellings. Must never: spell a code anywhere else, or give two codes one
//! spelling.

use command::codes::ErrorCode;

preread_core::stable_names! {
    /// Why an answer refused or failed, as its `error_code`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum AnswerCode {
        /// A worker could not apply an accepted change (a bind failed), or is
        /// gone.
        WorkerRefused => "E_WORKER_REFUSED",
        /// A worker did not answer in time.
        WorkerTimeout => "E_WORKER_TIMEOUT",
        /// The caller's user may not command the proxy (only root and the
        /// proxy's own user may).
        Permission => "E_PERMISSION",
        /// A state change refused because the proxy is stopping.
        Stopping => "E_STOPPING",
        /// The CLI got no answer: the socket failed or closed mid-request.
        NoAnswer => "E_NO_ANSWER",
        /// An upgrade's new process did not take over (it exited, refused the
        /// handover or timed out); the running process keeps serving.
        UpgradeFailed => "E_UPGRADE_FAILED",
        /// A batch (`apply_changes`) over the proxy's cap on requests, or whose
        /// parts disagree on what they are.
        BadBatch => "E_BAD_BATCH",
        /// The command socket already serves the most clients it serves at
        /// once.
        Busy => "E_BUSY",
        /// `reload_file`: the proxy cannot read the file, or reads another one
        /// at its path than the CLI did.
        ConfigUnseen => "E_CONFIG_UNSEEN",
        /// `reload_file`: the config has problems; nothing changed.
        ConfigRefused => "E_CONFIG_REFUSED";
        /// A validation code of the config or of a request (`E…`).
        Validation(code: ErrorCode) => code.as_str(),
    }
    /// The proxy's own codes, for tests and listings.
    pub const OWN;
}

impl From<ErrorCode> for AnswerCode {
    fn from(code: ErrorCode) -> Self {
        Self::Validation(code)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use command::codes::ErrorCode;

    use super::AnswerCode;

    #[test]
    fn every_code_has_its_own_spelling() {
        let own: HashSet<_> = AnswerCode::OWN.map(AnswerCode::as_str).into();
        assert_eq!(own.len(), AnswerCode::OWN.len());
        for code in ErrorCode::ALL {
            let spelled = AnswerCode::from(code).as_str();
            assert_eq!(spelled, code.as_str());
            assert!(!own.contains(spelled), "{spelled} is taken twice");
        }
        assert_eq!(AnswerCode::Stopping.to_string(), "E_STOPPING");
    }
}
