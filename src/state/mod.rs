//! What the operator knows of each Slurm cluster, kept apart from Kubernetes: the per-cluster
//! [`index`] (one writer, many readers), the [`poller`]s that keep it current and emit change
//! events, and the [`registry`] of slurmrestd clients with their pollers.

pub mod index;
pub mod poller;
pub mod registry;
