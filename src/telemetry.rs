//! Logging setup: `RUST_LOG` filters, text or JSON lines on stderr.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Install the global subscriber. `default_filter` applies when `RUST_LOG` is unset, and when
/// it does not parse: then the first line logged says so (one mistyped directive made the whole
/// filter fall back without a word, and an admin debugging an outage read default logs as the
/// ones asked for).
pub fn init(format: LogFormat, default_filter: &str) {
    let (filter, refused) = filter(std::env::var("RUST_LOG").ok().as_deref(), default_filter);
    let registry = tracing_subscriber::registry().with(filter);
    // try_init: a second call (tests) keeps the first subscriber instead of panicking.
    let _ = match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init(),
    };
    if let Some(error) = refused {
        tracing::warn!(
            %error,
            default = default_filter,
            "RUST_LOG is not a valid filter: logging with the default filter instead"
        );
    }
}

/// The filter `rust_log` asks for, or `default_filter` (and why `rust_log` was not taken, when
/// it was given and did not parse).
fn filter(rust_log: Option<&str>, default_filter: &str) -> (EnvFilter, Option<String>) {
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        None => (EnvFilter::new(default_filter), None),
        Some(spec) => match EnvFilter::builder().parse(spec) {
            Ok(filter) => (filter, None),
            Err(error) => (EnvFilter::new(default_filter), Some(error.to_string())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::filter;

    #[test]
    fn a_filter_that_does_not_parse_is_said_not_dropped_silently() {
        let default = "warn,slurm_operator=info";
        let shown = |spec: &str| tracing_subscriber::EnvFilter::new(spec).to_string();
        let (taken, refused) = filter(None, default);
        assert_eq!((taken.to_string(), refused), (shown(default), None));
        assert_eq!(filter(Some("  "), default).1, None);
        let (taken, refused) = filter(Some("info,kube=debug"), default);
        assert_eq!(
            (taken.to_string(), refused),
            (shown("info,kube=debug"), None)
        );
        let (taken, refused) = filter(Some("info,slurm_operator=tarce"), default);
        assert!(refused.is_some_and(|e| !e.is_empty()));
        assert_eq!(taken.to_string(), shown(default));
    }
}
