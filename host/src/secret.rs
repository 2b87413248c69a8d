//! Bearer secrets (API keys, the admin and metrics tokens) as the broker
//! keeps them: only their sha256 digests.
//!
//! A config may give a secret itself or its digest `sha256:<64 hex>` (what
//! `lockbroker hash-key` prints), so the file need hold nothing a thief
//! could present. Either way only the digest is kept: it cannot leak
//! through a `Debug` print or a log line, and comparisons run in constant
//! time so response times say nothing about which byte differed.

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// sha256 of a secret.
pub type SecretDigest = [u8; 32];

/// The prefix of a secret given as its digest.
pub const DIGEST_PREFIX: &str = "sha256:";

/// Hashes a presented bearer secret for comparison.
pub fn digest(secret: &str) -> SecretDigest {
    Sha256::digest(secret.as_bytes()).into()
}

/// `sha256:<hex>` of `secret`, as a config may hold it.
pub fn digest_text(secret: &str) -> String {
    let hex: String = digest(secret).iter().map(|b| format!("{b:02x}")).collect();
    format!("{DIGEST_PREFIX}{hex}")
}

/// A configured secret: only its digest.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct Secret(SecretDigest);

/// Why a configured secret was refused. Never repeats the text given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("must not be empty")]
    Empty,
    #[error("starts with \"sha256:\" but is not followed by 64 hex digits")]
    BadDigest,
}

impl Secret {
    /// True when `presented` is this secret, in constant time.
    pub fn matches(&self, presented: &SecretDigest) -> bool {
        presented.ct_eq(&self.0).into()
    }

    /// Some of `secrets` matches `presented`; every one is compared (no
    /// early exit).
    pub fn any_matches<'a>(
        secrets: impl IntoIterator<Item = &'a Secret>,
        presented: &SecretDigest,
    ) -> bool {
        secrets
            .into_iter()
            .fold(false, |found, secret| secret.matches(presented) | found)
    }
}

impl TryFrom<String> for Secret {
    type Error = SecretError;
    fn try_from(text: String) -> Result<Secret, SecretError> {
        text.as_str().try_into()
    }
}

impl TryFrom<&str> for Secret {
    type Error = SecretError;
    fn try_from(text: &str) -> Result<Secret, SecretError> {
        if text.is_empty() {
            return Err(SecretError::Empty);
        }
        let Some(hex) = text.strip_prefix(DIGEST_PREFIX) else {
            return Ok(Secret(digest(text)));
        };
        let hex = hex.to_ascii_lowercase();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(SecretError::BadDigest);
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("checked hex");
        }
        Ok(Secret(bytes))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(text: &str) -> Secret {
        Secret::try_from(text).unwrap()
    }

    #[test]
    fn a_secret_and_its_digest_are_the_same_secret() {
        let text = digest_text("key-a");
        assert_eq!(text.len(), DIGEST_PREFIX.len() + 64);
        assert_eq!(secret("key-a"), secret(&text));
        assert_eq!(
            secret(&text.to_uppercase().replace("SHA256:", "sha256:")),
            secret("key-a")
        );
        assert!(secret(&text).matches(&digest("key-a")));
        assert!(!secret(&text).matches(&digest("key-b")));
        // The digest is not itself a key.
        assert!(!secret(&text).matches(&digest(&text)));
    }

    #[test]
    fn empty_and_malformed_digests_are_refused() {
        assert_eq!(Secret::try_from(""), Err(SecretError::Empty));
        for bad in [
            "sha256:",
            "sha256:abc",
            &format!("sha256:{}", "g".repeat(64)),
        ] {
            assert_eq!(Secret::try_from(bad), Err(SecretError::BadDigest), "{bad}");
        }
    }

    #[test]
    fn a_secret_never_prints() {
        let printed = format!("{:?}", secret("hunter2"));
        assert!(!printed.contains("hunter2"), "{printed}");
        let err = Secret::try_from("sha256:hunter2").unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn any_matches_looks_at_every_secret() {
        let keys = [secret("old"), secret("new")];
        assert!(Secret::any_matches(&keys, &digest("old")));
        assert!(Secret::any_matches(&keys, &digest("new")));
        assert!(!Secret::any_matches(&keys, &digest("other")));
    }
}
