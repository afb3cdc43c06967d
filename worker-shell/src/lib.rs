//! The data-plane shell: the worker and what the workers share.
//!
//! Owns: the worker (I/O glue over the preread step of
//! `preread_core::step`, the pipe, backends), what every worker shares
//! (admission, the health checker, the registry), the metrics and the
//! access-log writer, and the words they count and log in
//! ([`vocabulary`], [`answer_code`]). Must never: decide a connection's
//! preread anywhere but in that step, block a worker thread, or know the
//! command server: the control plane sits above this crate and drives it
//! through [`worker::orders`].

pub mod access_log;
pub mod answer_code;
pub mod fd_budget;
pub mod metrics;
pub mod pipe_budget;
pub mod shared;
pub mod vocabulary;
pub mod worker;
