//! slurm-operator: drive Slurm from Kubernetes through slurmrestd.
