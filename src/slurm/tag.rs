//! The ownership tag that ties a Slurm job to one SlurmJob generation.
//!
//! Every job the operator submits carries `slurm.rs/uid=<uid>,generation=<n>` in its `comment`.
//! The facade parses it once, where Slurm's records are converted ([`Job::owner`]); the index,
//! its events and the controllers carry the typed [`OwnerTag`], never the text. Before
//! submitting, the operator looks for a job that already carries the tag, so a crash between
//! submit and the status write never produces a second job for the same generation.
//!
//! [`Job::owner`]: super::types::Job::owner

use std::fmt;

/// Prefix of every tag: a job whose comment is a tag belongs to a SlurmJob.
pub const TAG_PREFIX: &str = "slurm.rs/uid=";

/// The SlurmJob (by uid) and generation a Slurm job was submitted for.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct OwnerTag {
    uid: String,
    generation: i64,
}

impl OwnerTag {
    pub fn new(uid: impl Into<String>, generation: i64) -> Self {
        Self {
            uid: uid.into(),
            generation,
        }
    }

    /// The tag a comment is, if it is exactly one of ours (spelled as [`OwnerTag`]'s `Display`
    /// writes it: `generation=01` is not the tag of generation 1).
    pub fn parse(comment: &str) -> Option<Self> {
        let rest = comment.strip_prefix(TAG_PREFIX)?;
        let (uid, generation) = rest.split_once(",generation=")?;
        if uid.is_empty() {
            return None;
        }
        let tag = Self::new(uid, generation.parse().ok()?);
        (tag.to_string() == comment).then_some(tag)
    }

    /// The uid of the SlurmJob.
    pub fn uid(&self) -> &str {
        &self.uid
    }

    pub fn generation(&self) -> i64 {
        self.generation
    }

    /// Whether this is a tag of the SlurmJob `uid`, of any generation.
    pub fn is_of(&self, uid: &str) -> bool {
        self.uid == uid
    }
}

impl fmt::Display for OwnerTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TAG_PREFIX}{},generation={}", self.uid, self.generation)
    }
}

impl From<OwnerTag> for String {
    fn from(tag: OwnerTag) -> Self {
        tag.to_string()
    }
}

/// Not one of our tags.
#[derive(Debug, thiserror::Error)]
#[error("not an ownership tag (slurm.rs/uid=<uid>,generation=<n>): {0:?}")]
pub struct NotATag(String);

impl TryFrom<String> for OwnerTag {
    type Error = NotATag;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text).ok_or(NotATag(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_of_its_uid_at_any_generation() {
        assert!(OwnerTag::new("a", 1).is_of("a"));
        assert!(OwnerTag::new("a", 9).is_of("a"));
        assert!(!OwnerTag::new("ab", 1).is_of("a"));
        assert!(!OwnerTag::new("a", 1).is_of("ab"));
    }

    #[test]
    fn tags_round_trip_and_foreign_comments_are_not_ours() {
        let t = OwnerTag::new("0b6d9c2e-1f4a-4f5e-9a51-3f0c1d2e3f40", 7);
        assert_eq!(
            t.to_string(),
            "slurm.rs/uid=0b6d9c2e-1f4a-4f5e-9a51-3f0c1d2e3f40,generation=7"
        );
        assert_eq!(OwnerTag::parse(&t.to_string()), Some(t.clone()));
        assert_eq!(t.uid(), "0b6d9c2e-1f4a-4f5e-9a51-3f0c1d2e3f40");
        assert_eq!(t.generation(), 7);
        for foreign in [
            "",
            "my own comment",
            "slurm.rs/uid=",
            "slurm.rs/uid=x",
            "slurm.rs/uid=,generation=1",
            "slurm.rs/uid=x,generation=y",
            "slurm.rs/uid=x,generation=01",
            "slurm.rs/uid=x,generation=+1",
            " slurm.rs/uid=x,generation=1",
        ] {
            assert_eq!(OwnerTag::parse(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn a_tag_serializes_as_its_text() {
        let t = OwnerTag::new("u", 3);
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json, serde_json::json!("slurm.rs/uid=u,generation=3"));
        assert_eq!(serde_json::from_value::<OwnerTag>(json).unwrap(), t);
        assert!(serde_json::from_value::<OwnerTag>(serde_json::json!("x")).is_err());
    }
}
