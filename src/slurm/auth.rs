//! Authentication to slurmrestd with `rest_auth/jwt`.
//!
//! Two sources of tokens: a ready token (e.g. from a Secret), or the cluster's `jwt_hs256.key`
//! from which we mint short-lived HS256 tokens ourselves. Credentials are consulted on every
//! request (through the generated client's pre-request hook), so a rotated key or token takes
//! effect by swapping the `Credentials` without rebuilding any HTTP client.
//!
//! Key bytes and tokens are held in `secrecy` wrappers: they never show up in `Debug` output or
//! logs, and the header values are marked sensitive so HTTP-level tracing redacts them too.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::header::HeaderValue;
use secrecy::{ExposeSecret, SecretBox, SecretString};
use serde::Serialize;

/// Header carrying the Slurm user name.
pub const USER_HEADER: &str = "X-SLURM-USER-NAME";
/// Header carrying the JWT.
pub const TOKEN_HEADER: &str = "X-SLURM-USER-TOKEN";

/// Default lifetime of a minted token.
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// Shortest lifetime we mint: below this, clock skew between us and slurmctld dominates.
pub const MIN_TOKEN_LIFETIME: Duration = Duration::from_secs(30);
/// Longest lifetime we mint: a leaked token must not outlive a quarter hour.
pub const MAX_TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// A minted token is replaced once this fraction (in percent) of its lifetime has passed...
const REFRESH_AT_PERCENT: u32 = 80;
/// ...or when less than this is left, whichever comes first, so a request never leaves with a
/// token that expires in flight.
const REFRESH_FLOOR: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the JWT signing key is empty")]
    EmptyKey,
    #[error("the token is empty")]
    EmptyToken,
    #[error("the Slurm user name is empty")]
    EmptyUser,
    #[error(
        "token lifetime {requested:?} is outside the allowed range {MIN_TOKEN_LIFETIME:?}..={MAX_TOKEN_LIFETIME:?}"
    )]
    LifetimeOutOfRange { requested: Duration },
    #[error("failed to sign a JWT")]
    Sign(#[source] jsonwebtoken::errors::Error),
    #[error("the {header} value contains characters not allowed in an HTTP header")]
    InvalidHeaderValue { header: &'static str },
    #[error("the system clock is before the Unix epoch")]
    Clock,
    #[error("the token expired at {at} (its exp claim): put a new token in the Secret")]
    TokenExpired { at: String },
    #[error(
        "cannot act as Slurm user {user:?}: the cluster's credentials are a ready token for \
         another user, and only a JWT signing key (auth.jwt) can mint tokens for other users"
    )]
    // `token_user` is not shown: this text reaches tenants (a SlurmJob's condition), and who
    // the cluster's token is for is the admin's to know (the operator's log has it).
    CannotActAs { user: String, token_user: String },
    #[error(
        "will not act as Slurm user root for a namespace's jobs: their scripts would run as root \
         on the Slurm nodes"
    )]
    Root,
    #[error(
        "will not act as Slurm user {user:?} for a namespace's jobs: slurmctld reads a name of \
         digits as a uid (0 is root); name the user instead"
    )]
    NumericUser { user: String },
}

/// How requests authenticate. Cheap to share behind an `Arc`; never prints its secrets.
pub struct Credentials {
    user: Option<String>,
    source: TokenSource,
}

enum TokenSource {
    Static {
        token: SecretString,
        /// The token's `exp` claim, when it is a JWT that has one.
        expires: Option<SystemTime>,
        /// The token's `sun` claim (the user it was issued for), when it is a JWT that has one.
        subject: Option<String>,
    },
    Minted(Minter),
}

/// The only claims read from a ready token (unverified: the key is slurmctld's): its expiry,
/// so that an expired token is reported as such instead of as slurmrestd's bare 401/511, and
/// whom it was issued for, the one user it can act as.
#[derive(serde::Deserialize)]
struct ReadyClaims {
    exp: Option<u64>,
    sun: Option<String>,
}

struct Minter {
    key: SecretBox<[u8]>,
    lifetime: Duration,
    current: Mutex<Option<MintedToken>>,
}

struct MintedToken {
    token: SecretString,
    /// When it was minted (its `iat`), on this host's clock.
    minted_at: SystemTime,
    refresh_after: SystemTime,
}

/// Whether slurmctld would take `user` as a uid: `uid_from_string` falls back to `strtol`, which
/// skips leading blanks and takes a sign, so " 0", "+0" and "-0" are root as much as "0" is.
fn reads_as_a_uid(user: &str) -> bool {
    // C's isspace: ASCII blanks and the vertical tab.
    let rest = user.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '\u{0b}');
    let rest = rest.strip_prefix(['+', '-']).unwrap_or(rest);
    !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())
}

#[derive(Serialize)]
struct Claims<'a> {
    iat: u64,
    nbf: u64,
    exp: u64,
    sun: &'a str,
    jti: String,
}

impl Credentials {
    /// Mint tokens for `user` from the raw bytes of `jwt_hs256.key`.
    pub fn minted(
        key: Vec<u8>,
        user: impl Into<String>,
        lifetime: Duration,
    ) -> Result<Self, AuthError> {
        let user = user.into();
        if key.is_empty() {
            return Err(AuthError::EmptyKey);
        }
        if user.trim().is_empty() {
            return Err(AuthError::EmptyUser);
        }
        if !(MIN_TOKEN_LIFETIME..=MAX_TOKEN_LIFETIME).contains(&lifetime) {
            return Err(AuthError::LifetimeOutOfRange {
                requested: lifetime,
            });
        }
        check_header_value(&user, USER_HEADER)?;
        Ok(Self {
            user: Some(user),
            source: TokenSource::Minted(Minter {
                key: SecretBox::new(key.into_boxed_slice()),
                lifetime,
                current: Mutex::new(None),
            }),
        })
    }

    /// Use a ready token. The user name header is optional for slurmrestd (the token's `sun`
    /// claim names the user); pass it when known.
    pub fn token(token: impl Into<String>, user: Option<String>) -> Result<Self, AuthError> {
        let token = token.into().trim().to_owned();
        if token.is_empty() {
            return Err(AuthError::EmptyToken);
        }
        check_header_value(&token, TOKEN_HEADER)?;
        let user = user.filter(|u| !u.trim().is_empty());
        if let Some(user) = &user {
            check_header_value(user, USER_HEADER)?;
        }
        let claims = jsonwebtoken::dangerous::insecure_decode_claims::<ReadyClaims>(&token).ok();
        let expires = claims
            .as_ref()
            .and_then(|claims| claims.exp)
            // An `exp` past what the clock can hold (from 2^63 s) is read as no known expiry,
            // as a token without one; adding it would panic.
            .and_then(|exp| UNIX_EPOCH.checked_add(Duration::from_secs(exp)));
        let subject = claims.and_then(|claims| claims.sun);
        Ok(Self {
            user,
            source: TokenSource::Static {
                token: SecretString::from(token),
                expires,
                subject,
            },
        })
    }

    /// Credentials for Slurm user `user` from the same source: tokens minted with the same key
    /// and lifetime, or this ready token when it is `user`'s own (by its `sun` claim or the user
    /// it was given with). A ready token cannot act as anyone else.
    pub fn for_user(&self, user: &str) -> Result<Self, AuthError> {
        // Tenants' jobs are submitted through here (`SlurmClient::as_user`); an access entry
        // stored before the CRD refused root is stopped here too.
        if user == "root" {
            return Err(AuthError::Root);
        }
        if reads_as_a_uid(user) {
            return Err(AuthError::NumericUser {
                user: user.to_owned(),
            });
        }
        match &self.source {
            TokenSource::Minted(minter) => {
                Self::minted(minter.key.expose_secret().to_vec(), user, minter.lifetime)
            }
            TokenSource::Static { token, .. } => {
                let token_user = self.acting_user().map(str::to_owned);
                match token_user {
                    Some(token_user) if token_user == user => {
                        Self::token(token.expose_secret(), Some(token_user))
                    }
                    other => Err(AuthError::CannotActAs {
                        user: user.to_owned(),
                        token_user: other.map_or_else(
                            || "an unknown user".to_owned(),
                            |u| format!("user {u:?}"),
                        ),
                    }),
                }
            }
        }
    }

    /// The Slurm user requests run as, when known.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Whether these are a ready token (`tokenSecretRef`), which acts only as its own user, rather
    /// than a key that mints tokens.
    pub fn is_ready_token(&self) -> bool {
        matches!(self.source, TokenSource::Static { .. })
    }

    /// The Slurm user requests act as: the user given, else a ready token's `sun` claim (read,
    /// not verified: slurmrestd verifies the token, and acts as that user or refuses it).
    pub fn acting_user(&self) -> Option<&str> {
        self.user.as_deref().or(match &self.source {
            TokenSource::Static { subject, .. } => subject.as_deref(),
            TokenSource::Minted(_) => None,
        })
    }

    /// Whether `other` authenticates exactly as this does: the same Slurm user, and the same key
    /// (and token lifetime) or the same ready token. Clients are shared between SlurmClusters
    /// only when this holds: never across credentials.
    pub fn same_identity(&self, other: &Self) -> bool {
        self.user == other.user
            && match (&self.source, &other.source) {
                (TokenSource::Minted(a), TokenSource::Minted(b)) => {
                    a.lifetime == b.lifetime && a.key.expose_secret() == b.key.expose_secret()
                }
                (TokenSource::Static { token: a, .. }, TokenSource::Static { token: b, .. }) => {
                    a.expose_secret() == b.expose_secret()
                }
                _ => false,
            }
    }

    /// The token to send at `now`, minting a new one when the current one is due for refresh.
    pub fn token_at(&self, now: SystemTime) -> Result<SecretString, AuthError> {
        match &self.source {
            TokenSource::Static { token, expires, .. } => match expires {
                Some(at) if *at <= now => Err(AuthError::TokenExpired {
                    at: humantime::format_rfc3339_seconds(*at).to_string(),
                }),
                _ => Ok(token.clone()),
            },
            TokenSource::Minted(minter) => {
                minter.token_at(self.user.as_deref().unwrap_or_default(), now)
            }
        }
    }

    fn header_values(
        &self,
        now: SystemTime,
    ) -> Result<(Option<HeaderValue>, HeaderValue), AuthError> {
        let token = self.token_at(now)?;
        let mut token = HeaderValue::from_str(token.expose_secret()).map_err(|_| {
            AuthError::InvalidHeaderValue {
                header: TOKEN_HEADER,
            }
        })?;
        token.set_sensitive(true);
        let user =
            match &self.user {
                Some(user) => Some(HeaderValue::from_str(user).map_err(|_| {
                    AuthError::InvalidHeaderValue {
                        header: USER_HEADER,
                    }
                })?),
                None => None,
            };
        Ok((user, token))
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.source {
            TokenSource::Static { .. } => "static-token",
            TokenSource::Minted(_) => "minted-hs256",
        };
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("source", &kind)
            .finish_non_exhaustive()
    }
}

impl Minter {
    fn token_at(&self, user: &str, now: SystemTime) -> Result<SecretString, AuthError> {
        // The lock is never held across an await: minting is a synchronous HMAC.
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Not once the clock has stepped back past its minting (NTP, a restored VM): its `exp`
        // is where it was, and it would be reused past it by the step, refused every time.
        if let Some(minted) = current.as_ref()
            && minted.minted_at <= now
            && now < minted.refresh_after
        {
            return Ok(minted.token.clone());
        }
        let minted = self.mint(user, now)?;
        let token = minted.token.clone();
        *current = Some(minted);
        Ok(token)
    }

    fn mint(&self, user: &str, now: SystemTime) -> Result<MintedToken, AuthError> {
        let iat = now
            .duration_since(UNIX_EPOCH)
            .map_err(|_| AuthError::Clock)?
            .as_secs();
        let claims = Claims {
            iat,
            nbf: iat,
            exp: iat + self.lifetime.as_secs(),
            sun: user,
            jti: uuid::Uuid::new_v4().to_string(),
        };
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(self.key.expose_secret()),
        )
        .map_err(AuthError::Sign)?;
        Ok(MintedToken {
            token: SecretString::from(token),
            minted_at: now,
            refresh_after: now + refresh_delay(self.lifetime),
        })
    }
}

/// How long a freshly minted token is reused before a new one is minted.
fn refresh_delay(lifetime: Duration) -> Duration {
    let at_percent = lifetime * REFRESH_AT_PERCENT / 100;
    let before_floor = lifetime.saturating_sub(REFRESH_FLOOR);
    at_percent.min(before_floor)
}

fn check_header_value(value: &str, header: &'static str) -> Result<(), AuthError> {
    HeaderValue::from_str(value)
        .map(|_| ())
        .map_err(|_| AuthError::InvalidHeaderValue { header })
}

/// The generated client's pre-request hook: puts the current credentials on `request`.
pub async fn authorize(
    credentials: &Credentials,
    request: &mut reqwest::Request,
) -> Result<(), AuthError> {
    let (user, token) = credentials.header_values(SystemTime::now())?;
    let headers = request.headers_mut();
    if let Some(user) = user {
        headers.insert(USER_HEADER, user);
    }
    headers.insert(TOKEN_HEADER, token);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{DecodingKey, Validation};
    use serde::Deserialize;

    #[test]
    fn identity_is_user_and_key_material() {
        let minute = Duration::from_secs(60);
        let a = Credentials::minted(vec![1; 32], "alice", minute).unwrap();
        let same = Credentials::minted(vec![1; 32], "alice", minute).unwrap();
        assert!(a.same_identity(&same));
        let other_key = Credentials::minted(vec![2; 32], "alice", minute).unwrap();
        let other_user = Credentials::minted(vec![1; 32], "bob", minute).unwrap();
        let other_lifetime = Credentials::minted(vec![1; 32], "alice", minute * 2).unwrap();
        for other in [&other_key, &other_user, &other_lifetime] {
            assert!(!a.same_identity(other), "{other:?}");
        }
        let token = Credentials::token("t1", Some("alice".into())).unwrap();
        assert!(token.same_identity(&Credentials::token("t1", Some("alice".into())).unwrap()));
        assert!(!token.same_identity(&Credentials::token("t2", Some("alice".into())).unwrap()));
        assert!(!token.same_identity(&a));
    }

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[derive(Debug, Deserialize)]
    struct DecodedClaims {
        iat: u64,
        nbf: u64,
        exp: u64,
        sun: String,
        jti: String,
    }

    fn decode(token: &SecretString) -> DecodedClaims {
        let mut validation = Validation::new(Algorithm::HS256);
        // The tokens are minted at fixed points in the past; check the signature and claims, not the clock.
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        jsonwebtoken::decode::<DecodedClaims>(
            token.expose_secret(),
            &DecodingKey::from_secret(KEY),
            &validation,
        )
        .unwrap()
        .claims
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn a_ready_token_is_refused_from_its_exp_claim_on() {
        // Minted at 1 000 000 for 900 s: exp = 1 000 900.
        let minter = Credentials::minted(KEY.to_vec(), "slurm", Duration::from_secs(900)).unwrap();
        let jwt = minter.token_at(at(1_000_000)).unwrap();
        let ready = Credentials::token(jwt.expose_secret(), None).unwrap();
        assert_eq!(
            ready.token_at(at(1_000_899)).unwrap().expose_secret(),
            jwt.expose_secret()
        );
        for now in [1_000_900, 2_000_000] {
            let error = ready.token_at(at(now)).unwrap_err();
            assert!(matches!(error, AuthError::TokenExpired { .. }), "{error:?}");
            assert_eq!(
                error.to_string(),
                "the token expired at 1970-01-12T14:01:40Z (its exp claim): put a new token in the Secret"
            );
        }
        // Not a JWT, or one without exp: slurmrestd judges it.
        let no_exp = format!(
            "{}.{}.sig",
            "eyJhbGciOiJIUzI1NiJ9",
            "eyJzdW4iOiJzbHVybSJ9" // {"sun":"slurm"}
        );
        // One whose exp the clock cannot hold (2^63 s and above) is read as having none: it
        // used to panic, and the Secret it came from crash-looped the operator.
        let far = |exp: u64| {
            use base64::Engine as _;
            let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(format!(r#"{{"sun":"slurm","exp":{exp}}}"#));
            format!("eyJhbGciOiJIUzI1NiJ9.{claims}.sig")
        };
        let (overflow, largest) = (far(1 << 63), far(u64::MAX));
        for token in ["not-a-jwt", no_exp.as_str(), &overflow, &largest] {
            let ready = Credentials::token(token, None).unwrap();
            assert_eq!(
                ready
                    .token_at(at(u64::from(u32::MAX)))
                    .unwrap()
                    .expose_secret(),
                token
            );
        }
    }

    #[test]
    fn minted_token_carries_slurm_claims_signed_with_the_key() {
        let creds = Credentials::minted(KEY.to_vec(), "slurm", Duration::from_secs(900)).unwrap();
        let claims = decode(&creds.token_at(at(1_000_000)).unwrap());
        assert_eq!(claims.sun, "slurm");
        assert_eq!(claims.iat, 1_000_000);
        assert_eq!(claims.nbf, 1_000_000);
        assert_eq!(claims.exp, 1_000_900);
        assert_eq!(claims.jti.len(), 36);
    }

    #[test]
    fn token_from_another_key_does_not_verify() {
        let creds = Credentials::minted(
            b"another-key-another-key-another!".to_vec(),
            "slurm",
            DEFAULT_TOKEN_LIFETIME,
        )
        .unwrap();
        let token = creds.token_at(at(1_000_000)).unwrap();
        let mut validation = Validation::new(Algorithm::HS256);
        validation.validate_exp = false;
        let result = jsonwebtoken::decode::<DecodedClaims>(
            token.expose_secret(),
            &DecodingKey::from_secret(KEY),
            &validation,
        );
        assert!(result.is_err());
    }

    #[test]
    fn token_is_reused_until_80_percent_of_its_lifetime_then_reminted() {
        let creds = Credentials::minted(KEY.to_vec(), "slurm", Duration::from_secs(900)).unwrap();
        let first = creds.token_at(at(1_000_000)).unwrap();
        let same = creds.token_at(at(1_000_000 + 719)).unwrap();
        assert_eq!(first.expose_secret(), same.expose_secret());
        let renewed = creds.token_at(at(1_000_000 + 720)).unwrap();
        assert_ne!(first.expose_secret(), renewed.expose_secret());
        assert_eq!(decode(&renewed).iat, 1_000_720);
        // The clock stepped back a minute: a new token, not the one minted "later".
        let stepped_back = creds.token_at(at(1_000_660)).unwrap();
        assert_ne!(stepped_back.expose_secret(), renewed.expose_secret());
        assert_eq!(decode(&stepped_back).exp, 1_000_660 + 900);
    }

    #[test]
    fn short_lifetime_refreshes_at_the_floor_before_expiry() {
        // 80 % of 30 s is 24 s, but the floor says at most 20 s (30 s − 10 s).
        assert_eq!(
            refresh_delay(Duration::from_secs(30)),
            Duration::from_secs(20)
        );
        assert_eq!(
            refresh_delay(Duration::from_secs(900)),
            Duration::from_secs(720)
        );
        let creds = Credentials::minted(KEY.to_vec(), "slurm", Duration::from_secs(30)).unwrap();
        let first = creds.token_at(at(5_000)).unwrap();
        assert_eq!(
            first.expose_secret(),
            creds.token_at(at(5_019)).unwrap().expose_secret()
        );
        assert_ne!(
            first.expose_secret(),
            creds.token_at(at(5_020)).unwrap().expose_secret()
        );
    }

    #[test]
    fn bad_inputs_are_rejected_with_their_own_error() {
        assert!(matches!(
            Credentials::minted(vec![], "slurm", DEFAULT_TOKEN_LIFETIME),
            Err(AuthError::EmptyKey)
        ));
        assert!(matches!(
            Credentials::minted(KEY.to_vec(), " ", DEFAULT_TOKEN_LIFETIME),
            Err(AuthError::EmptyUser)
        ));
        assert!(matches!(
            Credentials::minted(KEY.to_vec(), "slurm", Duration::from_secs(5)),
            Err(AuthError::LifetimeOutOfRange { .. })
        ));
        assert!(matches!(
            Credentials::minted(KEY.to_vec(), "slurm", Duration::from_secs(3600)),
            Err(AuthError::LifetimeOutOfRange { .. })
        ));
        assert!(matches!(
            Credentials::minted(KEY.to_vec(), "bad\nuser", DEFAULT_TOKEN_LIFETIME),
            Err(AuthError::InvalidHeaderValue {
                header: USER_HEADER
            })
        ));
        assert!(matches!(
            Credentials::token("  \n", None),
            Err(AuthError::EmptyToken)
        ));
        assert!(matches!(
            Credentials::token("abc\u{7f}def", None),
            Err(AuthError::InvalidHeaderValue {
                header: TOKEN_HEADER
            })
        ));
    }

    #[test]
    fn static_token_is_trimmed_and_user_is_optional() {
        let creds = Credentials::token("eyJ.token.sig\n", None).unwrap();
        assert_eq!(
            creds.token_at(SystemTime::now()).unwrap().expose_secret(),
            "eyJ.token.sig"
        );
        assert_eq!(creds.user(), None);
        let creds = Credentials::token("t", Some(String::new())).unwrap();
        assert_eq!(creds.user(), None);
    }

    /// A ready token acts as the user it was issued for (its `sun` claim) when no user is
    /// given with it: that is the user its requests and submits act as, while the user header
    /// stays unsent as before.
    #[test]
    fn a_ready_tokens_user_is_the_one_it_was_issued_for() {
        let minted = Credentials::minted(KEY.to_vec(), "slurm", DEFAULT_TOKEN_LIFETIME).unwrap();
        let jwt = minted.token_at(SystemTime::now()).unwrap();
        let ready = Credentials::token(jwt.expose_secret(), None).unwrap();
        assert_eq!(ready.user(), None);
        assert_eq!(ready.acting_user(), Some("slurm"));
        assert!(ready.for_user("slurm").is_ok());
        assert!(matches!(
            ready.for_user("alice"),
            Err(AuthError::CannotActAs { .. })
        ));
        let named = Credentials::token(jwt.expose_secret(), Some("ops".into())).unwrap();
        assert_eq!(named.acting_user(), Some("ops"));
        let opaque = Credentials::token("not-a-jwt", None).unwrap();
        assert_eq!(opaque.acting_user(), None);
        assert_eq!(minted.acting_user(), Some("slurm"));
    }

    /// A tenant's job is never run as root, whichever way the credentials come.
    #[test]
    fn no_credentials_are_made_for_root() {
        let minted = Credentials::minted(KEY.to_vec(), "slurm", DEFAULT_TOKEN_LIFETIME).unwrap();
        assert!(matches!(minted.for_user("root"), Err(AuthError::Root)));
        assert!(minted.for_user("alice").is_ok());
        let ready = Credentials::token("t", Some("root".into())).unwrap();
        assert!(matches!(ready.for_user("root"), Err(AuthError::Root)));
        // slurmctld's uid_from_string takes digits as a uid: "0" is root.
        // Nor does what strtol reads as 0 (blanks first, a sign), or any other uid.
        for user in ["0", "00", "+0", "-0", " 0", "\t+0", "\u{0b}0", "1000"] {
            assert!(
                matches!(minted.for_user(user), Err(AuthError::NumericUser { .. })),
                "{user:?}"
            );
        }
        for user in ["alice2", "0alice", "+", "-", "0 ", "u-1"] {
            assert!(minted.for_user(user).is_ok(), "{user:?}");
        }
    }

    #[test]
    fn debug_output_never_contains_key_or_token() {
        let minted = Credentials::minted(KEY.to_vec(), "slurm", DEFAULT_TOKEN_LIFETIME).unwrap();
        let token = minted.token_at(SystemTime::now()).unwrap();
        let printed = format!("{minted:?}");
        assert!(!printed.contains("0123456789abcdef"), "{printed}");
        assert!(!printed.contains(token.expose_secret()), "{printed}");
        let fixed = Credentials::token("very-secret-token", Some("slurm".into())).unwrap();
        assert!(!format!("{fixed:?}").contains("very-secret-token"));
    }

    #[tokio::test]
    async fn authorize_sets_both_headers_and_marks_the_token_sensitive() {
        let creds = Credentials::minted(KEY.to_vec(), "slurm", DEFAULT_TOKEN_LIFETIME).unwrap();
        let mut request = reqwest::Request::new(
            reqwest::Method::GET,
            "http://127.0.0.1:1/x".parse().unwrap(),
        );
        authorize(&creds, &mut request).await.unwrap();
        assert_eq!(request.headers()[USER_HEADER], "slurm");
        let token = &request.headers()[TOKEN_HEADER];
        assert!(token.is_sensitive());
        assert_eq!(
            decode(&SecretString::from(token.to_str().unwrap().to_owned())).sun,
            "slurm"
        );
        assert!(!format!("{:?}", request.headers()).contains(token.to_str().unwrap()));
    }
}
