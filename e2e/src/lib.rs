//! End-to-end tests and load tools: real sockets on loopback, real TLS.
//! Filled by the worker issue.
