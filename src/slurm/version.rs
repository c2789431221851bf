//! The slurmrestd REST API versions the facade speaks: one generated client each
//! (`tools/gen-client`, `openapi/README.md`) behind one facade (`dialect`).

use std::fmt;
use std::str::FromStr;

/// A slurmrestd REST API version (a `data_parser` plugin), e.g. `v0.0.42`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiVersion {
    V0_0_40,
    V0_0_41,
    V0_0_42,
    V0_0_43,
    V0_0_44,
    V0_0_45,
}

impl ApiVersion {
    /// Every version the facade speaks, oldest first.
    pub const ALL: [Self; 6] = [
        Self::V0_0_40,
        Self::V0_0_41,
        Self::V0_0_42,
        Self::V0_0_43,
        Self::V0_0_44,
        Self::V0_0_45,
    ];
    pub const OLDEST: Self = Self::V0_0_40;
    pub const NEWEST: Self = Self::V0_0_45;

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V0_0_40 => "v0.0.40",
            Self::V0_0_41 => "v0.0.41",
            Self::V0_0_42 => "v0.0.42",
            Self::V0_0_43 => "v0.0.43",
            Self::V0_0_44 => "v0.0.44",
            Self::V0_0_45 => "v0.0.45",
        }
    }

    /// The data parser plugin slurmrestd names in every answer of this version
    /// (`meta.plugin.data_parser`).
    pub fn data_parser(self) -> String {
        format!("data_parser/{}", self.as_str())
    }

    /// Position in [`Self::ALL`].
    pub(crate) const fn index(self) -> usize {
        self as usize
    }

    /// The versions tried when nothing is pinned: newest first, so a slurmrestd serving several
    /// gets the newest both sides speak.
    pub fn newest_first() -> impl Iterator<Item = Self> {
        Self::ALL.into_iter().rev()
    }

    /// What the facade speaks, for messages: `v0.0.40 to v0.0.45`.
    pub fn spoken() -> String {
        format!("{} to {}", Self::OLDEST, Self::NEWEST)
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A version string the facade does not speak.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("REST API version {0:?} is not one the operator speaks ({spoken})", spoken = ApiVersion::spoken())]
pub struct UnknownVersion(pub String);

impl FromStr for ApiVersion {
    type Err = UnknownVersion;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let bare = text.strip_prefix("data_parser/").unwrap_or(text);
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == bare)
            .ok_or_else(|| UnknownVersion(text.to_owned()))
    }
}

/// The REST API versions named in an OpenAPI document's paths (`/slurm/v0.0.39/...`,
/// `/slurmdb/v0.0.46/...`), sorted and without repeats: what a slurmrestd serves, read from its
/// own `/openapi/v3`, including versions the facade does not speak.
pub fn versions_in_paths(text: &str) -> Vec<String> {
    // slurmrestd escapes every slash in its JSON (`"\/slurm\/v0.0.40\/ping\/"`).
    let text = text.replace("\\/", "/");
    let mut found = std::collections::BTreeSet::new();
    for prefix in ["/slurm/v", "/slurmdb/v"] {
        let mut rest = text.as_str();
        while let Some(at) = rest.find(prefix) {
            rest = &rest[at + prefix.len()..];
            let version: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .take(16)
                .collect();
            let parts: Vec<&str> = version.split('.').collect();
            if parts.len() == 3 && parts.iter().all(|p| !p.is_empty()) {
                found.insert(format!("v{version}"));
            }
        }
    }
    let mut versions: Vec<String> = found.into_iter().collect();
    // Numeric order: v0.0.9 before v0.0.40.
    versions.sort_by_key(|v| {
        v.trim_start_matches('v')
            .split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0))
            .collect::<Vec<_>>()
    });
    versions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip_and_unknown_ones_are_refused() {
        for version in ApiVersion::ALL {
            assert_eq!(version.as_str().parse::<ApiVersion>(), Ok(version));
            assert_eq!(version.data_parser().parse::<ApiVersion>(), Ok(version));
            assert_eq!(ApiVersion::ALL[version.index()], version);
        }
        for bad in ["", "v0.0.39", "v0.0.46", "0.0.42", "v0.0.420", "auto"] {
            let err = bad.parse::<ApiVersion>().unwrap_err();
            assert!(err.to_string().contains("v0.0.40 to v0.0.45"), "{err}");
        }
        let order: Vec<ApiVersion> = ApiVersion::newest_first().collect();
        assert_eq!(order.first(), Some(&ApiVersion::NEWEST));
        assert_eq!(order.last(), Some(&ApiVersion::OLDEST));
    }

    #[test]
    fn served_versions_are_read_from_openapi_paths() {
        let doc = r#"{"paths": {"/slurm/v0.0.39/ping/": {}, "/slurmdb/v0.0.39/jobs/": {},
            "/slurm/v0.0.9/diag/": {}, "/slurm/v0.0.46/jobs/": {}, "/slurm/vx/": {},
            "/openapi/v3": {}, "/slurm/v0.0./x": {}}}"#;
        assert_eq!(versions_in_paths(doc), ["v0.0.9", "v0.0.39", "v0.0.46"]);
        // As slurmrestd writes it (24.11, /openapi/v3): every slash escaped.
        let escaped =
            r#"{"paths": {"\/slurm\/v0.0.40\/ping\/": {}, "\/slurmdb\/v0.0.40\/jobs\/": {}}}"#;
        assert_eq!(versions_in_paths(escaped), ["v0.0.40"]);
        assert!(versions_in_paths("").is_empty());
    }
}
