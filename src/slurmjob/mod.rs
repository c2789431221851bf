//! The SlurmJob controller's pure core: from a SlurmJob and what Slurm reports, decide what to
//! submit, which phase the job is in, and whether an edit re-runs it. No I/O here: every
//! function is a table-tested mapping. The thin driver that applies the decisions lives with
//! the controllers.

pub mod actions;
pub mod drive;
pub mod lifecycle;
pub mod notice;
pub mod output;
pub mod phase;
pub mod quantity;
pub mod status;
pub mod submit;
pub mod tag;
