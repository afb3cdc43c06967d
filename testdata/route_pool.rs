//! The route fixtures of every test harness of preread, written once:
//! `(pattern, ALPN list, cluster)` rows, an empty list meaning "any
//! protocol, or none".
//!
//! Owns: `POOL`, the frontends the simulation (`sim/src/listener.rs`) and
//! the core fuzz target (`fuzz/src/checks_core.rs`) draw their route tables
//! from; `CORPUS`, the frontends that route every name of the captured
//! corpus (`testdata/clienthellos`), which the core's tests, its decision
//! bench and that bench's callgrind example use; and `SHAPES`, the fixed
//! part of that bench's generated tables (its fillers are generated in
//! `preread-core/benches/tables/mod.rs`).
//! `testdata/corpus-routes.toml` routes the same names through the same
//! patterns; `proxy-shell/tests/route_fixtures.rs` keeps the two from
//! drifting apart.
//!
//! Must never: depend on any crate, read a file, or hold anything but
//! `const` tables. It is included by `#[path]` into crates of two
//! workspaces with different dependencies (the fuzz crate is its own), and
//! the simulation must not read files at run time.

/// One frontend: `(pattern, ALPN list, cluster)`.
pub type RouteSpec = (&'static str, &'static [&'static str], &'static str);

/// Conflict-free in every subset, so a harness may draw any of them. Its
/// names cover the captured corpus. Indices are part of the contract: the
/// simulation names rows by position.
pub const POOL: &[RouteSpec] = &[
    ("a.example.com", &[], "a"),
    ("*.b.example.com", &[], "star-b"),
    ("**.example.com", &[], "any-example"),
    ("c.example.com", &["h2"], "c-h2"),
    ("c.example.com", &["http/1.1", "acme-tls/1"], "c-http"),
    ("d.example.com", &[], "d"),
    ("psk.example.com", &[], "psk"),
    ("public.example.net", &[], "public"),
    ("**.b.example.com", &["h2"], "any-b-h2"),
    ("localhost", &[], "localhost"),
    ("*.example.org", &["h2", "http/1.1"], "star-org"),
    ("example.org", &[], "org"),
];

/// Routes every name the corpus routes on, whatever it offers, each to a
/// cluster named after its pattern, so a verdict shows which pattern won.
pub const CORPUS: &[RouteSpec] = &[
    ("a.example.com", &[], "a.example.com"),
    ("*.b.example.com", &[], "*.b.example.com"),
    ("c.example.com", &[], "c.example.com"),
    ("d.example.com", &[], "d.example.com"),
    ("psk.example.com", &[], "psk.example.com"),
    ("**.example.com", &[], "**.example.com"),
    ("public.example.net", &[], "public.example.net"),
];

/// The frontends the decision bench's shapes hit, one per kind of match;
/// every generated table of the bench holds them beside its fillers.
pub const SHAPES: &[RouteSpec] = &[
    ("a.example.com", &["h2", "http/1.1"], "exact"),
    ("*.wild.example.com", &["h2", "http/1.1"], "one-label"),
    ("**.deep.example.com", &["h2", "http/1.1"], "any-depth"),
];
