//! Which requests change the routing state: the one list of them, and the
//! one list of the others.
//!
//! Owns: [`RequestType::is_change`] and the two patterns it is made of,
//! [`change_request!`](crate::change_request) and
//! [`other_request!`](crate::other_request). The state's `dispatch`, the
//! inverse of a change and the command server match on these patterns, so
//! each keeps a total `match`: a new request type placed in neither list
//! does not compile. Must never: list a request type in both, or anywhere
//! else.

use crate::proto::request::RequestType;

/// The pattern of every request that changes the routing state: what
/// `ConfigState::dispatch` applies, a generation carries to the workers
/// and the journal records.
#[macro_export]
macro_rules! change_request {
    () => {
        $crate::proto::request::RequestType::AddTcpListener(_)
            | $crate::proto::request::RequestType::UpdateTcpListener(_)
            | $crate::proto::request::RequestType::RemoveListener(_)
            | $crate::proto::request::RequestType::ActivateListener(_)
            | $crate::proto::request::RequestType::DeactivateListener(_)
            | $crate::proto::request::RequestType::AddCluster(_)
            | $crate::proto::request::RequestType::UpdateCluster(_)
            | $crate::proto::request::RequestType::RemoveCluster(_)
            | $crate::proto::request::RequestType::AddTcpFrontend(_)
            | $crate::proto::request::RequestType::RemoveTcpFrontend(_)
            | $crate::proto::request::RequestType::AddBackend(_)
            | $crate::proto::request::RequestType::UpdateBackend(_)
            | $crate::proto::request::RequestType::RemoveBackend(_)
    };
}

/// The pattern of every other request: queries, saves and loads, stops,
/// upgrades, reloads, and the batch whose parts are changes but which is
/// none itself. The command server answers them; the state never applies
/// one.
#[macro_export]
macro_rules! other_request {
    () => {
        $crate::proto::request::RequestType::Status(_)
            | $crate::proto::request::RequestType::ListListeners(_)
            | $crate::proto::request::RequestType::ListClusters(_)
            | $crate::proto::request::RequestType::ListFrontends(_)
            | $crate::proto::request::RequestType::ListSources(_)
            | $crate::proto::request::RequestType::ListBackends(_)
            | $crate::proto::request::RequestType::QueryMetrics(_)
            | $crate::proto::request::RequestType::QueryRejects(_)
            | $crate::proto::request::RequestType::SaveState(_)
            | $crate::proto::request::RequestType::LoadState(_)
            | $crate::proto::request::RequestType::SoftStop(_)
            | $crate::proto::request::RequestType::HardStop(_)
            | $crate::proto::request::RequestType::ApplyChanges(_)
            | $crate::proto::request::RequestType::Upgrade(_)
            | $crate::proto::request::RequestType::ReloadFile(_)
    };
}

impl RequestType {
    /// Whether the request changes the routing state (see
    /// [`change_request!`](crate::change_request)).
    #[must_use]
    pub const fn is_change(&self) -> bool {
        match self {
            crate::change_request!() => true,
            crate::other_request!() => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::proto::request::RequestType;
    use crate::proto::{ListenerAddress, Status};

    #[test]
    fn a_listener_removal_is_a_change_and_a_status_is_not() {
        let removal = RequestType::RemoveListener(ListenerAddress {
            address: "127.0.0.1:8443".to_owned(),
            protocol: None,
        });
        assert!(removal.is_change());
        assert!(!RequestType::Status(Status {}).is_change());
    }
}
