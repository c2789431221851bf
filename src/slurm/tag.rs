//! The ownership tag that ties a Slurm job to one SlurmJob generation.
//!
//! Every job the operator submits carries `slurm.rs/uid=<uid>,generation=<n>` in its `comment`.
//! Before submitting, the operator looks for a job that already carries the tag, so a crash
//! between submit and the status write never produces a second job for the same generation.

/// Prefix of every tag: a job whose comment starts with it belongs to a SlurmJob.
pub const TAG_PREFIX: &str = "slurm.rs/uid=";

/// The tag for `uid` at `generation`.
pub fn tag(uid: &str, generation: i64) -> String {
    format!("{TAG_PREFIX}{uid},generation={generation}")
}

/// The (uid, generation) a comment carries, if it is one of our tags.
pub fn parse(comment: &str) -> Option<(&str, i64)> {
    let rest = comment.strip_prefix(TAG_PREFIX)?;
    let (uid, generation) = rest.split_once(",generation=")?;
    if uid.is_empty() {
        return None;
    }
    Some((uid, generation.parse().ok()?))
}

/// Whether `comment` is a tag of the SlurmJob `uid`, of any generation.
pub fn is_of(comment: Option<&str>, uid: &str) -> bool {
    comment.and_then(parse).is_some_and(|(u, _)| u == uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_of_its_uid_at_any_generation() {
        assert!(is_of(Some(&tag("a", 1)), "a"));
        assert!(is_of(Some(&tag("a", 9)), "a"));
        assert!(!is_of(Some(&tag("ab", 1)), "a"));
        assert!(!is_of(Some(&tag("a", 1)), "ab"));
        assert!(!is_of(Some("a"), "a"));
        assert!(!is_of(None, "a"));
    }

    #[test]
    fn tags_round_trip_and_foreign_comments_are_not_ours() {
        let t = tag("0b6d9c2e-1f4a-4f5e-9a51-3f0c1d2e3f40", 7);
        assert_eq!(
            t,
            "slurm.rs/uid=0b6d9c2e-1f4a-4f5e-9a51-3f0c1d2e3f40,generation=7"
        );
        assert_eq!(parse(&t), Some(("0b6d9c2e-1f4a-4f5e-9a51-3f0c1d2e3f40", 7)));
        for foreign in [
            "",
            "my own comment",
            "slurm.rs/uid=",
            "slurm.rs/uid=x",
            "slurm.rs/uid=,generation=1",
            "slurm.rs/uid=x,generation=y",
        ] {
            assert_eq!(parse(foreign), None, "{foreign:?}");
        }
    }
}
