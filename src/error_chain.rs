//! How an error reads in logs and in status messages: with every cause.

use std::fmt;

/// Formats an error with its `source()` chain: `outer: inner: innermost`. For logs and
/// human-readable status messages; metric labels and reasons use the errors' categories.
/// A source whose text its parent already shows (some libraries print their sources
/// themselves) is not repeated.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parent = self.0.to_string();
        f.write_str(&parent)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            let text = error.to_string();
            if !parent.contains(&text) {
                write!(f, ": {text}")?;
            }
            parent = text;
            source = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_shows_every_source() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(Chain(&error).to_string(), "outer: inner");

        #[derive(Debug, thiserror::Error)]
        #[error("talkative: {0}")]
        struct Talkative(#[source] std::io::Error);
        let error = Outer(std::io::Error::other(Talkative(std::io::Error::other(
            "root",
        ))));
        assert_eq!(Chain(&error).to_string(), "outer: talkative: root");
    }
}
