//! Controllers: one folder per custom resource, each in one shape — a thin async driver
//! (`mod.rs`: triggers, reconcile, error policy) that observes, asks a pure plan what to do,
//! performs the returned actions in one place, and writes a status computed by a pure function.
//!
//! - [`cluster`]: registers a slurmrestd client (and its poller) per `SlurmCluster`, reports whether
//!   it works in the SlurmCluster's status.
//! - [`slurmjob`]: submits, mirrors, cancels and re-runs a Slurm batch job per `SlurmJob`.
//! - [`nodeset`]: slurmd pods as dynamic Slurm nodes; scale-in drains in Slurm before deleting.
//!
//! Shared by all three: [`Context`] (what every reconcile gets), [`kit`] (backoff, the
//! finalizer wrapper, status apply, Events, Slurm-event triggers, the controller loop's log) and
//! [`cached_writes`] (writes the caches may not show yet).
//! A controller never imports another one; what two of them need lives in `kit`.

pub mod cached_writes;
pub mod cluster;
pub mod context;
pub mod kit;
pub mod nodeset;
pub mod slurmjob;

#[cfg(test)]
pub(crate) mod test_support;

pub use context::{Context, DeletedCluster, SLURMJOBS, SLURMNODESETS};
