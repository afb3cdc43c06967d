//! The control plane's coordinator: what the command server decides, with
//! no I/O of its own. The server (`proxy-shell/src/server/`) feeds it
//! [`Input`]s with the time, and performs the [`Effect`]s it returns, in
//! their order; the simulation (`sim/`) drives the very same type with
//! simulated workers, clients and time.
//!
//! # Why a crate of its own
//!
//! It sits between `command` (the typed change model, [`plan`], the state)
//! and `proxy-shell` (mio, sockets, files, threads): a crate whose
//! dependencies are `command` and `log` only cannot reach a socket, a file
//! or the clock by accident, and the simulation depends on it without
//! pulling the shell in. The worker vocabulary ([`Order`], [`Answer`]) is
//! defined here, below both the coordinator and the worker that speaks it.
//!
//! # What it owns
//!
//! - **The job queue.** State-changing jobs run one at a time, in arrival
//!   order: a client's change, a `preread reload` batch or declarations, a
//!   `state load`, a `preread reload` of a file, a SIGHUP reload
//!   ([`Input::Hangup`]), a merge of the route sources
//!   ([`Input::SourceReport`]), and the upgrade handover. An upgrade is a
//!   job like the others: no change runs while it hands over, and it waits
//!   for the change that runs.
//! - **Planning.** A job's requests become one [`Generation`] through
//!   [`plan`] on the committed state, which is left as it was.
//! - **The broadcast and the gathering.** A generation is sent to every
//!   live worker ([`Effect::Send`]); each answer is gathered against the
//!   order's deadline ([`Input::WorkerAnswer`], [`Input::Tick`]).
//! - **Commit or rollback.** Every worker applied: the generation is
//!   committed on the state, journaled ([`Effect::AppendJournal`]), and
//!   answered once the journal answered ([`Input::Journaled`]). A worker
//!   refused, timed out or is gone: the inverse is sent to exactly the
//!   workers that may hold the generation (every addressed worker but
//!   those that refused), and the job is answered as refused.
//! - **Worker loss.** A gone worker ([`Input::WorkerGone`]) counts as
//!   refused for every order it owes, and is sent nothing more.
//! - **The order of each client's answers.** A client's answers
//!   ([`Effect::Answer`], [`Effect::Report`], [`Effect::Serve`]) come out in
//!   the order of its requests, whatever order their work ends in.
//! - **Stops.** A soft or hard stop is broadcast with its own deadline;
//!   from then on no job is taken and the queued ones are answered as
//!   refused.
//!
//! # What it must never do
//!
//! Read the clock (`now` is always passed in), touch a socket, a file or a
//! thread, or block. The shell does that: it reads the files it is asked
//! to ([`Effect::ReadConfig`], [`Effect::ReadStateFile`]), runs the
//! handover ([`Effect::StartUpgrade`]), and hands the results back as
//! inputs. The one question the coordinator asks the system while
//! planning, whether an address is free to listen on, goes through the
//! [`AddressCheck`] the shell gave it.
//!
//! # Invariants
//!
//! 1. A generation is committed only after every worker it was sent to
//!    answered `Done`.
//! 2. A rollback reaches every worker that may have applied the generation
//!    (all the addressed workers but those that refused it); a worker that
//!    refused took it back itself.
//! 3. A refused or rolled-back change is in no worker once the rollback is
//!    answered, and never in the committed state.
//! 4. An acknowledged change is journaled exactly once: one
//!    [`Effect::AppendJournal`] per committed generation that changed
//!    something, before its answer.
//! 5. Each client's answers come in its request order, one per request.
//! 6. Nothing waits without a deadline: every open order has one
//!    ([`Coordinator::next_deadline`]), and every file read or handover it
//!    asks for is the shell's to bound.
//!
//! [`plan`]: command::generation::plan
//! [`Generation`]: command::generation::Generation

mod coordinator;
mod effect;
mod input;
pub mod orders;
mod pending;
pub mod responses;
mod sources;
mod turns;

#[cfg(feature = "sabotage")]
pub use coordinator::sabotage;
pub use coordinator::{AddressCheck, Coordinator, MAX_BATCH_REQUESTS, Settings};
pub use effect::{Effect, Notice};
pub use input::{
    ClientId, Input, JobId, Query, Request, SourceReport, StopKind, Unread, UpgradeFailure,
    UpgradeRequest,
};
pub use orders::{Answer, Exported, Listeners, Order, OrderId, QuicExport, Reply, WorkerId};
