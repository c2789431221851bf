//! The ownership tag that ties a Slurm job to one SlurmJob generation, and the key that signs it.
//!
//! Every job the operator submits carries, in its `comment`,
//! `slurm.rs/uid=<uid>,generation=<n>,sig=<mac>`: `mac` is HMAC-SHA256 over the SlurmJob's uid,
//! the generation and the Slurm user the job is submitted as, under a key only the operator holds
//! ([`TagKey`]), truncated to 128 bits and base64url-encoded (22 characters). Anyone can read a
//! comment, so the text alone proves nothing: a job is ours only when its tag verifies for the
//! Slurm user slurmctld says the job runs as (`Job::ownership`). A copied tag on another user's
//! job, or a guessed one, does not verify.
//!
//! Tags written before signing existed (`slurm.rs/uid=<uid>,generation=<n>`) parse as
//! [`Seal::Legacy`]: such a job is still followed and cancelled through the SlurmJob's own
//! `status.jobId`, but never adopted (see `controller::slurmjob::plan`).
//!
//! The facade parses the tag once, where Slurm's records are converted ([`Job::owner`] is the
//! claim, [`Job::seal`] what backs it); the index, its events and the controllers carry the typed
//! [`OwnerTag`], never the text.
//!
//! [`Job::owner`]: super::types::Job::owner
//! [`Job::seal`]: super::types::Job::seal

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Prefix of every tag: a job whose comment is a tag claims to belong to a SlurmJob.
pub const TAG_PREFIX: &str = "slurm.rs/uid=";

/// What separates the claim from its signature in a comment.
const SIG_SEPARATOR: &str = ",sig=";

/// Bytes of the HMAC kept: 128 bits, far beyond what guessing online against slurmctld can reach.
pub const SIGNATURE_BYTES: usize = 16;

/// Shortest key accepted (bytes). Generated keys have [`GENERATED_KEY_BYTES`].
pub const MIN_KEY_BYTES: usize = 32;
/// The size of a key [`TagKey::generate`] makes.
pub const GENERATED_KEY_BYTES: usize = 32;

/// Domain separation: a MAC made for anything else with the same key never verifies as a tag.
const DOMAIN: &[u8] = b"slurm.rs/owner-tag/v1";

/// The SlurmJob (by uid) and generation a Slurm job claims to be submitted for.
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

    /// The claim a comment makes, if it is exactly one of our tags, signed or legacy (spelled
    /// as written: `generation=01` is not the tag of generation 1). Says nothing about whether
    /// the claim is true: see [`parse_comment`] and [`TagKey::verify`].
    pub fn parse(comment: &str) -> Option<Self> {
        parse_comment(comment).map(|(tag, _)| tag)
    }

    /// The legacy, unsigned form: `slurm.rs/uid=<uid>,generation=<n>`.
    fn parse_claim(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(TAG_PREFIX)?;
        let (uid, generation) = rest.split_once(",generation=")?;
        if uid.is_empty() || uid.contains(',') {
            return None;
        }
        let tag = Self::new(uid, generation.parse().ok()?);
        (tag.to_string() == text).then_some(tag)
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

/// The claim, as the legacy tag spells it (logs, and the part a signed comment starts with).
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

/// A truncated HMAC-SHA256 of a tag.
#[derive(Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Signature([u8; SIGNATURE_BYTES]);

impl Signature {
    /// Strict: exactly the 22 characters [`Display`](fmt::Display) writes.
    fn decode(text: &str) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        let signature = Self(bytes.try_into().ok()?);
        (signature.to_string() == text).then_some(signature)
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&URL_SAFE_NO_PAD.encode(self.0))
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({self})")
    }
}

/// What backs a tag's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Seal {
    /// A signature, still to be verified against the job's Slurm user.
    Signed(Signature),
    /// Nothing: a tag written before tags were signed.
    Legacy,
}

/// The claim and seal a comment is, if it is exactly one of our tags.
pub fn parse_comment(comment: &str) -> Option<(OwnerTag, Seal)> {
    match comment.rsplit_once(SIG_SEPARATOR) {
        Some((claim, signature)) => Some((
            OwnerTag::parse_claim(claim)?,
            Seal::Signed(Signature::decode(signature)?),
        )),
        None => Some((OwnerTag::parse_claim(comment)?, Seal::Legacy)),
    }
}

/// The key tags are signed with. Only the operator holds it (a Secret in its credentials
/// namespace, or a per-run key for `job run`); cheap to clone.
#[derive(Clone)]
pub struct TagKey {
    mac: Arc<Hmac<Sha256>>,
}

/// A key that cannot sign.
#[derive(Debug, thiserror::Error)]
pub enum TagKeyError {
    #[error("the tag key has {0} bytes; at least {MIN_KEY_BYTES} are needed")]
    TooShort(usize),
    #[error("cannot read random bytes for a new tag key")]
    Random(#[source] getrandom::Error),
}

impl TagKey {
    /// A key from its bytes (at least [`MIN_KEY_BYTES`]).
    pub fn new(bytes: &[u8]) -> Result<Self, TagKeyError> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(TagKeyError::TooShort(bytes.len()));
        }
        let mac = Hmac::<Sha256>::new_from_slice(bytes)
            .map_err(|_| TagKeyError::TooShort(bytes.len()))?;
        Ok(Self { mac: Arc::new(mac) })
    }

    /// Whether `other` is the same key (judged by what each signs: the bytes are not kept).
    pub fn same_as(&self, other: &TagKey) -> bool {
        let sign = |key: &TagKey| {
            let mut mac = (*key.mac).clone();
            mac.update(b"slurm.rs tag key comparison");
            mac.finalize().into_bytes()
        };
        sign(self) == sign(other)
    }

    /// Fresh random key bytes, from the operating system.
    pub fn generate_bytes() -> Result<Vec<u8>, TagKeyError> {
        let mut bytes = vec![0u8; GENERATED_KEY_BYTES];
        getrandom::fill(&mut bytes).map_err(TagKeyError::Random)?;
        Ok(bytes)
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, TagKeyError> {
        Self::new(&Self::generate_bytes()?)
    }

    /// A random key that lives as long as this process: for tests, and until `run` has loaded
    /// the shared one. Infallible: its randomness comes from four UUIDv4s (the operating
    /// system's generator, which `uuid` treats as unfailing).
    pub fn ephemeral() -> Self {
        let mut bytes = [0u8; 64];
        for (chunk, uuid) in bytes
            .chunks_mut(16)
            .zip(std::iter::repeat_with(uuid::Uuid::new_v4))
        {
            chunk.copy_from_slice(uuid.as_bytes());
        }
        // A key of exactly SHA-256's block size: the infallible constructor.
        let mac = <Hmac<Sha256> as hmac::digest::KeyInit>::new(&bytes.into());
        Self { mac: Arc::new(mac) }
    }

    /// The MAC of `tag` for a job submitted as Slurm user `user`, before truncation. Each field
    /// is length-prefixed, so no two (uid, generation, user) share an input.
    fn mac(&self, tag: &OwnerTag, user: &str) -> Hmac<Sha256> {
        let mut mac = (*self.mac).clone();
        let generation = tag.generation.to_string();
        for field in [
            DOMAIN,
            tag.uid.as_bytes(),
            generation.as_bytes(),
            user.as_bytes(),
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
        mac
    }

    pub fn sign(&self, tag: &OwnerTag, user: &str) -> Signature {
        let full = self.mac(tag, user).finalize().into_bytes();
        let mut truncated = [0u8; SIGNATURE_BYTES];
        truncated.copy_from_slice(&full[..SIGNATURE_BYTES]);
        Signature(truncated)
    }

    /// Whether `signature` is this key's for `tag` and Slurm user `user` (constant time).
    pub fn verify(&self, tag: &OwnerTag, user: &str, signature: &Signature) -> bool {
        self.mac(tag, user)
            .verify_truncated_left(&signature.0)
            .is_ok()
    }

    /// The comment a job submitted for `tag` as Slurm user `user` carries.
    pub fn comment(&self, tag: &OwnerTag, user: &str) -> String {
        format!("{tag}{SIG_SEPARATOR}{}", self.sign(tag, user))
    }
}

/// Never prints the key.
impl fmt::Debug for TagKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TagKey(..)")
    }
}

/// How far a job's comment proves the job is ours ([`Job::ownership`]).
///
/// [`Job::ownership`]: super::types::Job::ownership
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// Signed with our key for its claim and the Slurm user the job runs as.
    Proven,
    /// A legacy, unsigned tag: followed through `status.jobId` only, never adopted.
    Legacy,
    /// A signed tag that does not verify (forged, copied onto another user's job, another key).
    Forged,
    /// No tag at all.
    Untagged,
}

impl Ownership {
    /// Stable PascalCase name (log field, metric label, Event text).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proven => "Proven",
            Self::Legacy => "Unsigned",
            Self::Forged => "Forged",
            Self::Untagged => "Untagged",
        }
    }
}

/// How a record with claim `owner`, seal `seal` and Slurm user `user` stands under `key`.
pub fn ownership(
    key: &TagKey,
    owner: Option<&OwnerTag>,
    seal: Option<&Seal>,
    user: Option<&str>,
) -> Ownership {
    match (owner, seal) {
        (Some(tag), Some(Seal::Signed(signature))) => match user {
            Some(user) if key.verify(tag, user, signature) => Ownership::Proven,
            _ => Ownership::Forged,
        },
        (Some(_), Some(Seal::Legacy)) => Ownership::Legacy,
        _ => Ownership::Untagged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> TagKey {
        TagKey::new(&[byte; 32]).unwrap()
    }

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
    fn a_signed_comment_is_short_and_parses_back_to_its_claim_and_signature() {
        let k = key(1);
        let t = OwnerTag::new("0b6d9c2e-1f4a-4f5e-9a51-3f0c1d2e3f40", 7);
        let comment = k.comment(&t, "alice");
        assert!(comment.starts_with(&format!("{t},sig=")), "{comment}");
        // The legacy text plus 27 characters: a UUID's tag stays under 100.
        assert_eq!(comment.len(), t.to_string().len() + 5 + 22);
        assert!(comment.len() < 100);
        let (claim, seal) = parse_comment(&comment).unwrap();
        assert_eq!(claim, t);
        assert_eq!(seal, Seal::Signed(k.sign(&t, "alice")));
        assert_eq!(OwnerTag::parse(&comment), Some(t.clone()));
        assert_eq!(
            parse_comment(&t.to_string()),
            Some((t.clone(), Seal::Legacy))
        );
    }

    #[test]
    fn only_the_keys_signature_for_that_uid_generation_and_user_verifies() {
        let k = key(1);
        let t = OwnerTag::new("u1", 3);
        let signature = k.sign(&t, "alice");
        assert!(k.verify(&t, "alice", &signature));
        // Each part of what is signed matters.
        assert!(
            !k.verify(&OwnerTag::new("u2", 3), "alice", &signature),
            "uid"
        );
        assert!(
            !k.verify(&OwnerTag::new("u1", 4), "alice", &signature),
            "generation"
        );
        assert!(!k.verify(&t, "bob", &signature), "user");
        assert!(!key(2).verify(&t, "alice", &signature), "another key");
        // Every single bit of the signature matters.
        for byte in 0..SIGNATURE_BYTES {
            for bit in 0..8 {
                let mut tampered = signature;
                tampered.0[byte] ^= 1 << bit;
                assert!(!k.verify(&t, "alice", &tampered), "byte {byte} bit {bit}");
            }
        }
        // Length-prefixed fields: moving characters between them changes the MAC.
        assert_ne!(
            k.sign(&OwnerTag::new("u1", 3), "alice"),
            k.sign(&OwnerTag::new("u1", 3), "alic")
        );
        assert_ne!(
            k.sign(&OwnerTag::new("ab", 1), "c"),
            k.sign(&OwnerTag::new("a", 1), "bc")
        );
    }

    #[test]
    fn ownership_needs_a_signature_that_verifies_for_the_jobs_own_user() {
        let k = key(1);
        let t = OwnerTag::new("u1", 3);
        let signed = Seal::Signed(k.sign(&t, "alice"));
        let own = |tag: &OwnerTag, seal: Option<&Seal>, user: Option<&str>| {
            ownership(&k, Some(tag), seal, user)
        };
        assert_eq!(own(&t, Some(&signed), Some("alice")), Ownership::Proven);
        // Alice's tag copied onto bob's job.
        assert_eq!(own(&t, Some(&signed), Some("bob")), Ownership::Forged);
        assert_eq!(own(&t, Some(&signed), None), Ownership::Forged);
        // A replay for the next generation.
        assert_eq!(
            own(&OwnerTag::new("u1", 4), Some(&signed), Some("alice")),
            Ownership::Forged
        );
        assert_eq!(
            own(&t, Some(&Seal::Legacy), Some("alice")),
            Ownership::Legacy
        );
        assert_eq!(
            ownership(&k, None, None, Some("alice")),
            Ownership::Untagged
        );
    }

    #[test]
    fn parsing_is_strict() {
        let k = key(1);
        let t = OwnerTag::new("u", 1);
        let good = k.comment(&t, "alice");
        let sig = k.sign(&t, "alice").to_string();
        assert_eq!(sig.len(), 22);
        for bad in [
            format!("{t},sig="),
            format!("{t},sig={}", &sig[..21]),
            format!("{t},sig={sig}A"),
            format!("{t},sig={sig}="),
            format!("{t},sig={}", sig.replace(|_: char| true, "+")),
            format!("{t},sig={sig} "),
            format!(" {good}"),
            format!("{t},sig={sig},sig={sig}"),
            format!("{t},generation=2,sig={sig}"),
            format!("slurm.rs/uid=u,sig={sig}"),
            format!("slurm.rs/uid=u,x,generation=1,sig={sig}"),
        ] {
            assert_eq!(parse_comment(&bad), None, "{bad:?}");
        }
        // Non-canonical base64 (the last character's unused bits set) is refused too.
        let last = sig.chars().last().unwrap();
        let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let pos = alphabet.find(last).unwrap();
        // 16 bytes in 22 characters: the last character carries 2 bits, its low 4 are unused.
        let non_canonical = alphabet.as_bytes()[pos | 0x1] as char;
        let text = format!("{t},sig={}{non_canonical}", &sig[..21]);
        assert_eq!(parse_comment(&text), None, "{text:?}");
    }

    #[test]
    fn keys_are_long_random_and_never_printed() {
        assert!(matches!(
            TagKey::new(&[0; 31]),
            Err(TagKeyError::TooShort(31))
        ));
        let a = TagKey::generate_bytes().unwrap();
        let b = TagKey::generate_bytes().unwrap();
        assert_eq!(a.len(), GENERATED_KEY_BYTES);
        assert_ne!(a, b);
        assert_eq!(format!("{:?}", TagKey::new(&a).unwrap()), "TagKey(..)");
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
