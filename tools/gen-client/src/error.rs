//! The tool's error: what went wrong, with enough context to act on.

use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec does not have the shape a pass expects (or the pass found something that needs a
    /// decision). Generation stops rather than produce a subtly different client.
    #[error("{message}")]
    Spec { message: String },

    /// Something went wrong with one version's spec.
    #[error("{}: {source}", crate::spec_path(version))]
    InVersion { version: String, source: Box<Error> },

    #[error("{action} {}: {error}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },

    #[error("{what}: {error}")]
    Json {
        what: String,
        error: serde_json::Error,
    },

    #[error("progenitor could not generate the client: {0}")]
    Progenitor(progenitor::Error),

    #[error("{what} is not valid Rust: {error}")]
    Rust { what: String, error: syn::Error },

    /// `--root` (or the default) is not the repository root.
    #[error("{} is not the slurm-operator repository root (no {})", root.display(), crate::spec_path(crate::REFERENCE_VERSION))]
    NotRoot { root: PathBuf },
}

impl Error {
    /// This error, saying which version's spec it is about.
    pub fn in_version(self, version: &str) -> Self {
        match self {
            Error::InVersion { .. } | Error::NotRoot { .. } => self,
            other => Error::InVersion {
                version: version.to_owned(),
                source: Box::new(other),
            },
        }
    }
}

/// A spec-shape error (`Error::Spec`), for the passes' `return spec_error(...)`.
pub(crate) fn spec_error<T>(message: impl Into<String>) -> Result<T> {
    Err(Error::Spec {
        message: message.into(),
    })
}
