//! Deterministic, seeded simulation of the preread core and the shell's
//! accumulate-and-cap logic. Filled by the verification issue.
