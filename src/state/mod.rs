//! What the operator knows of each Slurm cluster, kept apart from Kubernetes: the per-cluster
//! [`index`] (one writer, many readers), the [`poller`]s that keep it current and emit change
//! events on their [`events`] feeds, and the [`registry`] of slurmrestd clients with their
//! pollers (one per slurmrestd and identity, shared by the SlurmClusters that name it), and each
//! connection's request [`slots`] for reconciles.

pub mod events;
pub mod index;
pub mod poller;
pub mod registry;
pub mod slots;
