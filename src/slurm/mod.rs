//! Everything that talks to slurmrestd. The generated clients (`generated`, one per REST API
//! version) and the dialects over them (`dialect`) are private to this module: the rest of the
//! operator sees only [`SlurmClient`], the domain types in [`types`], [`ApiVersion`] and
//! [`SlurmError`]. A new Slurm REST API version touches this module only.

pub mod auth;
mod call;
mod client;
pub mod config;
mod dialect;
mod elements;
pub mod error;
// Reached by fuzz/ and tests/fuzz_corpus.rs only (the dialects and generated types are private).
#[doc(hidden)]
pub mod fuzzing;
mod generated;
mod hooks;
mod identity;
mod job_states;
pub mod node_owner;
pub mod reason;
pub mod tag;
mod transport;
pub mod types;
mod utf8;
mod version;

pub use auth::Credentials;
pub use client::SlurmClient;
pub use config::{
    ClientConfig, DEFAULT_ALLOW_PLAINTEXT, DEFAULT_MAX_RESPONSE_BYTES, RetryPolicy, TlsOptions,
};
pub use error::SlurmError;
pub use transport::{RequestObserver, location_without_secrets};
pub use version::{ApiVersion, UnknownVersion};
