//! Backends: their addition, update and removal.
//!
//! Owns: the rules a backend change must pass against the state (its
//! cluster exists, it is never moved to another). Must never: change
//! anything when it refuses.

use super::*;

impl ConfigState {
    pub(super) fn add_backend(
        &mut self,
        backend: &proto::Backend,
    ) -> Result<Applied, ValidationError> {
        let canonical = resolve_backend(backend)?;
        let (id, cluster) = (&canonical.backend_id, &canonical.cluster_id);
        let Some(interned) = self
            .clusters
            .get_key_value(cluster.as_str())
            .map(|(id, _)| id.clone())
        else {
            return Err(ValidationError::new(
                ErrorCode::UnknownCluster,
                format!(
                    "backend `{id}`: cluster `{cluster}` does not exist: add the cluster first"
                ),
            ));
        };
        match self.backends.get(id) {
            Some(existing) if *existing == canonical => Ok(Applied::Unchanged),
            Some(existing) if existing.cluster_id != *cluster => Err(ValidationError::new(
                ErrorCode::DuplicateBackendId,
                format!(
                    "backend id `{id}` is already used by a backend of cluster `{}` ({}): \
                     backend ids are unique across clusters (metrics are named after them), \
                     pick another id such as `{cluster}-{id}`",
                    existing.cluster_id, existing.address
                ),
            )),
            Some(existing) => Err(ValidationError::new(
                ErrorCode::BackendConflict,
                format!(
                    "backend `{id}` of cluster `{cluster}` already exists as {} (weight {}, \
                     backup {}, max_connections {}), not {} (weight {}, backup {}, \
                     max_connections {}): change it in place with `backend update`, or \
                     remove it first, or use another backend_id",
                    existing.address,
                    weight_shown(existing.weight),
                    existing.backup,
                    limit_shown(existing.max_connections),
                    canonical.address,
                    weight_shown(canonical.weight),
                    canonical.backup,
                    limit_shown(canonical.max_connections)
                ),
            )),
            None => {
                self.backends.insert(id.clone(), canonical);
                self.add_user(&interned);
                Ok(Applied::Changed)
            }
        }
    }

    /// Changes an existing backend's weight, backup flag or
    /// `max_connections` in place; its address and cluster are its identity
    /// and stay.
    pub(super) fn update_backend(
        &mut self,
        backend: &proto::Backend,
    ) -> Result<Applied, ValidationError> {
        let canonical = resolve_backend(backend)?;
        let (id, cluster) = (&canonical.backend_id, &canonical.cluster_id);
        let Some(existing) = self.backends.get(id).filter(|b| b.cluster_id == *cluster) else {
            return Err(ValidationError::new(
                ErrorCode::NotFound,
                format!(
                    "there is no backend `{id}` in cluster `{cluster}` to update: add it first \
                     (`backend add`)"
                ),
            ));
        };
        if existing.address != canonical.address {
            return Err(ValidationError::new(
                ErrorCode::BackendConflict,
                format!(
                    "backend `{id}` of cluster `{cluster}` is {}, not {}: an update changes the \
                     weight, the backup flag and max_connections only; remove it and add it at \
                     its new address",
                    existing.address, canonical.address
                ),
            ));
        }
        if *existing == canonical {
            return Ok(Applied::Unchanged);
        }
        self.backends.insert(id.clone(), canonical);
        Ok(Applied::Changed)
    }

    pub(super) fn remove_backend(
        &mut self,
        backend: &proto::BackendRef,
    ) -> Result<Applied, ValidationError> {
        let what = format!(
            "backend `{}` of cluster `{}`",
            backend.backend_id, backend.cluster_id
        );
        let address = BackendAddress::parse(&what, &backend.address)?;
        match self.backends.get(&backend.backend_id) {
            Some(existing)
                if existing.cluster_id == backend.cluster_id
                    && existing.address == address.to_string() =>
            {
                self.backends.remove(&backend.backend_id);
                self.drop_user(&backend.cluster_id);
                Ok(Applied::Changed)
            }
            Some(existing) => Err(ValidationError::new(
                ErrorCode::NotFound,
                format!(
                    "there is no {what} at {address}: that id belongs to cluster `{}` at {}",
                    existing.cluster_id, existing.address
                ),
            )),
            None => Err(ValidationError::new(
                ErrorCode::NotFound,
                format!("there is no {what}: check `preread cluster list`"),
            )),
        }
    }
}
