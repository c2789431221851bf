//! slurm-operator: drive Slurm from Kubernetes through slurmrestd (`auth/jwt`).
//!
//! - [`slurm`]: the slurmrestd client facade (the only place that sees generated API types).
//! - [`crd`]: the custom resources `SlurmCluster`, `SlurmJob` and `SlurmNodeSet` (group `slurm.rs`).
//! - [`cli`]: the `slurm-operator` command line.

pub mod cli;
pub mod controller;
pub mod crd;
pub mod error_chain;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod run;
pub mod slurm;
pub mod state;
pub mod telemetry;
pub mod tls;
