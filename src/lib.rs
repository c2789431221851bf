//! slurm-operator: drive Slurm from Kubernetes through slurmrestd (`auth/jwt`).
//!
//! - [`slurm`]: the slurmrestd client facade (the only place that sees generated API types).
//! - [`crd`]: the custom resources `Cluster`, `SlurmJob` and `NodeSet` (group `slurm.rs`).
//! - [`cli`]: the `slurm-operator` command line.

pub mod cli;
pub mod context;
pub mod controller;
pub mod crd;
pub mod http;
pub mod index;
pub mod leader;
pub mod metrics;
pub mod poller;
pub mod registry;
pub mod run;
pub mod slurm;
pub mod slurmjob;
pub mod telemetry;
pub mod tls;
