//! The control plane of preread: the command protocol, the TOML config and
//! its validation, the desired state, state files and the reload diff.
//! Filled by the command-crate issue; nothing here yet.
