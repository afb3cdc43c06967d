//! The inverse of an accepted state change: the one request that takes the
//! state back to what it was before it.
//!
//! Owns: [`ConfigState::dispatch_undoable`]. A worker that cannot finish a
//! routing generation walks back through these inverses, and the command
//! server rolls a refused generation back with them, so neither needs a
//! copy of the state nor a diff of two whole states. Must never: return an
//! inverse that `dispatch` would refuse on the state the change produced,
//! or one that does not give back an equal state (the property tests in
//! `tests/state_props.rs` check both).

use crate::codes::ErrorCode;
use crate::listener_key::ListenerKey;
use crate::proto::request::RequestType;
use crate::proto::{self, BackendRef, ClusterRef, ListenerAddress};
use crate::state::{self, Applied, ConfigState};
use crate::validate::{ValidationError, resolve_backend, resolve_frontend};

/// What an accepted request did, with the way back when it changed the
/// state.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum Undoable {
    /// The state changed; dispatching `undo` on it restores the state as it
    /// was before.
    Changed { undo: Box<proto::Request> },
    /// The state already held this: nothing to undo, nothing to forward.
    Unchanged,
}

impl ConfigState {
    /// [`dispatch`](Self::dispatch), returning the inverse of the change.
    ///
    /// The inverse is read off the state before the change: the object the
    /// request replaces or removes comes back as it was (a removed listener
    /// had no frontend, a removed cluster no user, so one request restores
    /// each).
    pub fn dispatch_undoable(
        &mut self,
        request: &proto::Request,
    ) -> Result<Undoable, ValidationError> {
        let undo = self.inverse_before(request);
        match self.dispatch(request)? {
            Applied::Unchanged => Ok(Undoable::Unchanged),
            Applied::Changed => match undo {
                Some(undo) => Ok(Undoable::Changed {
                    undo: Box::new(undo),
                }),
                None => {
                    debug_assert!(false, "no inverse for an accepted change: {request:?}");
                    Err(ValidationError::new(
                        ErrorCode::UnsupportedRequest,
                        "this change has no inverse, so it cannot join a routing generation",
                    ))
                }
            },
        }
    }

    /// The request that undoes `request` if `dispatch` accepts it as a
    /// change; `None` when it would not (refused or unchanged).
    fn inverse_before(&self, request: &proto::Request) -> Option<proto::Request> {
        if let Some(undo) = undo_of_addition(request) {
            return Some(undo);
        }
        let key_of = |at: &ListenerAddress| ListenerKey::of_request(at).ok();
        let inverse = match request.request_type.as_ref()? {
            RequestType::UpdateTcpListener(config) => {
                let old = self.listeners.get(&ListenerKey::of_config(config).ok()?)?;
                RequestType::UpdateTcpListener(old.config.clone())
            }
            RequestType::RemoveListener(at) => {
                let old = self.listeners.get(&key_of(at)?)?;
                RequestType::AddTcpListener(old.config.clone())
            }
            RequestType::ActivateListener(at) => {
                RequestType::DeactivateListener(key_of(at)?.to_proto())
            }
            RequestType::DeactivateListener(at) => {
                RequestType::ActivateListener(key_of(at)?.to_proto())
            }
            RequestType::UpdateCluster(cluster) => {
                RequestType::UpdateCluster(self.clusters.get(cluster.cluster_id.as_str())?.clone())
            }
            RequestType::RemoveCluster(cluster) => {
                RequestType::AddCluster(self.clusters.get(cluster.cluster_id.as_str())?.clone())
            }
            RequestType::RemoveTcpFrontend(frontend) => {
                let (key, _) = resolve_frontend(frontend).ok()?;
                RequestType::AddTcpFrontend(self.frontends.get(&key)?.to_proto(&key))
            }
            RequestType::UpdateBackend(backend) => {
                RequestType::UpdateBackend(self.backends.get(&backend.backend_id)?.clone())
            }
            RequestType::RemoveBackend(backend) => {
                RequestType::AddBackend(self.backends.get(&backend.backend_id)?.clone())
            }
            RequestType::AddTcpListener(_)
            | RequestType::AddCluster(_)
            | RequestType::AddTcpFrontend(_)
            | RequestType::AddBackend(_)
            | crate::other_request!() => return None,
        };
        Some(state::request(inverse))
    }
}

/// The removal that undoes an addition, whatever the state it was added
/// to: `None` for a request that adds nothing (or names a bad address,
/// pattern or backend, which `dispatch` refuses anyway).
pub(crate) fn undo_of_addition(request: &proto::Request) -> Option<proto::Request> {
    let inverse = match request.request_type.as_ref()? {
        RequestType::AddTcpListener(config) => {
            RequestType::RemoveListener(ListenerKey::of_config(config).ok()?.to_proto())
        }
        RequestType::AddCluster(cluster) => RequestType::RemoveCluster(ClusterRef {
            cluster_id: cluster.cluster_id.clone(),
        }),
        RequestType::AddTcpFrontend(frontend) => {
            let (_, canonical) = resolve_frontend(frontend).ok()?;
            RequestType::RemoveTcpFrontend(canonical)
        }
        RequestType::AddBackend(backend) => {
            let canonical = resolve_backend(backend).ok()?;
            RequestType::RemoveBackend(BackendRef {
                cluster_id: canonical.cluster_id,
                backend_id: canonical.backend_id,
                address: canonical.address,
            })
        }
        _ => return None,
    };
    Some(state::request(inverse))
}
