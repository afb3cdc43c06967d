//! The proxy's metrics as data: the Prometheus families
//! ([`families`]), the labelled series the workers count ([`series`]),
//! their flat dotted view for `preread metrics get` ([`flat`]), and their
//! exposition for `GET /metrics` ([`exposition`]).
//!
//! Owns: what a metric is called, labelled and documented as, in both
//! views. Must never: count (the workers' registries do, in
//! `worker::metrics`), perform I/O, or hold a lock.

pub mod exposition;
pub mod families;
pub mod flat;
pub mod series;
