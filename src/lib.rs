//! slurm-operator: drive Slurm from Kubernetes through slurmrestd (`auth/jwt`).
//!
//! - [`slurm`]: the slurmrestd client facade (the only place that sees generated API types).
//! - [`cli`]: the `slurm-operator` command line.

pub mod cli;
pub mod metrics;
pub mod slurm;
pub mod telemetry;
pub mod tls;
