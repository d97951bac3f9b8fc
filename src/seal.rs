//! Secrets at rest (design §14): the payloads and results of sensitive jobs (`"sensitive": true`,
//! and every `fedify` job: its messages carry the actor's private keys) are sealed with
//! AES-256-GCM before they reach D1, under the secret `PAYLOAD_KEY`, and never shown by the API,
//! the dashboard or the logs ("redacted"). Their queue messages carry no payload either: the
//! ledger row is what runs.
//!
//! Sealed text: `sealed:v1:<key id>:<base64url(nonce ‖ ciphertext ‖ tag)>`, a fresh 96-bit nonce
//! per write, the job id as additional data (a sealed payload moved to another row does not
//! open). `PAYLOAD_KEY` is `<id>:<base64 of 32 bytes>[,<id>:<base64>...]`: the first key seals,
//! every listed key opens, so a key is rotated by putting a new one first and dropping the old
//! one once no job sealed with it is left. The cipher itself is a port ([`Sealer`]): WebCrypto on
//! Workers (`edge.rs`), a pure Rust AES-GCM in the tests.

use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};
use base64::Engine;
use futures::future::LocalBoxFuture;

use crate::config::ConfigError;
use crate::error::InfraError;

/// What every sealed text starts with.
pub const SEALED_PREFIX: &str = "sealed:v1:";
/// What the API, the dashboard and logs show instead of a sealed payload or result.
pub const REDACTED: &str = "redacted";
/// The job type whose jobs are always sealed (Fedify's tasks carry private keys).
pub const FEDIFY_TYPE: &str = "fedify";

/// Whether `text` is sealed.
pub fn is_sealed(text: &str) -> bool {
    text.starts_with(SEALED_PREFIX)
}

/// One AES-256 key and its id.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    /// Its id, stored with what it sealed.
    pub id: String,
    /// 32 bytes.
    pub bytes: [u8; 32],
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({:?}, 32 bytes)", self.id)
    }
}

/// `PAYLOAD_KEY`'s keys: the first seals, all open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys(pub Vec<Key>);

impl Keys {
    /// Reads `PAYLOAD_KEY`. A malformed one is a configuration error (never guessed around).
    pub fn parse(secret: &str) -> Result<Keys, ConfigError> {
        let bad = |reason: &str| ConfigError { var: "PAYLOAD_KEY", value: "…".into(), reason: reason.into() };
        let mut keys: Vec<Key> = Vec::new();
        for entry in secret.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (id, b64) = entry.split_once(':').ok_or_else(|| bad("each key must be <id>:<base64 of 32 bytes>"))?;
            let id = id.trim();
            if id.is_empty() || id.len() > 32 || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(bad("a key id must be 1 to 32 letters, digits, - or _"));
            }
            let bytes: [u8; 32] = B64
                .decode(b64.trim())
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| bad("a key must be the base64 of exactly 32 bytes (openssl rand -base64 32)"))?;
            if keys.iter().any(|k| k.id == id) {
                return Err(bad("a key id is listed twice"));
            }
            keys.push(Key { id: id.to_string(), bytes });
        }
        if keys.is_empty() {
            return Err(bad("no key given"));
        }
        Ok(Keys(keys))
    }

    /// The key that seals.
    pub fn current(&self) -> &Key {
        &self.0[0]
    }

    /// The key with id `id`.
    pub fn get(&self, id: &str) -> Option<&Key> {
        self.0.iter().find(|k| k.id == id)
    }
}

/// Sealed text from its parts.
pub fn format(key_id: &str, nonce: &[u8], ciphertext: &[u8]) -> String {
    let mut body = nonce.to_vec();
    body.extend_from_slice(ciphertext);
    format!("{SEALED_PREFIX}{key_id}:{}", B64URL.encode(body))
}

/// A sealed text's parts: key id, 12-byte nonce, ciphertext with its tag.
pub fn parse(sealed: &str) -> Result<(&str, Vec<u8>, Vec<u8>), InfraError> {
    let bad = || InfraError::new("seal", "not a sealed text this version reads");
    let rest = sealed.strip_prefix(SEALED_PREFIX).ok_or_else(bad)?;
    let (id, b64) = rest.split_once(':').ok_or_else(bad)?;
    let body = B64URL.decode(b64).map_err(|_| bad())?;
    if body.len() < 12 + 16 {
        return Err(bad());
    }
    let (nonce, ciphertext) = body.split_at(12);
    Ok((id, nonce.to_vec(), ciphertext.to_vec()))
}

/// Seals and opens payloads and results. Object-safe (boxed futures), so the API and the
/// consumer hold one as `&dyn Sealer`.
pub trait Sealer {
    /// `plain` sealed with the current key, bound to `job_id`.
    fn seal<'a>(&'a self, job_id: &'a str, plain: &'a str) -> LocalBoxFuture<'a, Result<String, InfraError>>;
    /// What `sealed` holds, if it was sealed for `job_id` with one of the keys.
    fn open<'a>(&'a self, job_id: &'a str, sealed: &'a str) -> LocalBoxFuture<'a, Result<String, InfraError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_id_and_32_bytes_the_first_seals() {
        let k1 = B64.encode([1u8; 32]);
        let k2 = B64.encode([2u8; 32]);
        let keys = Keys::parse(&format!("2026-12:{k2}, 2026-01:{k1}")).unwrap();
        assert_eq!(keys.current().id, "2026-12");
        assert_eq!(keys.get("2026-01").map(|k| k.bytes), Some([1u8; 32]));
        for bad in ["", "nokey", ":abc", &format!("a b:{k1}"), "k:c2hvcnQ=", &format!("k:{k1},k:{k2}")] {
            assert_eq!(Keys::parse(bad).unwrap_err().var, "PAYLOAD_KEY", "{bad}");
        }
        assert!(!format!("{keys:?}").contains(&k1), "a key never shows in a debug print");
    }

    #[test]
    fn sealed_text_round_trips_its_parts() {
        let s = format("k1", &[7u8; 12], &[9u8; 20]);
        assert!(is_sealed(&s));
        let (id, nonce, ct) = parse(&s).unwrap();
        assert_eq!((id, nonce, ct), ("k1", vec![7u8; 12], vec![9u8; 20]));
        assert!(parse("sealed:v1:k1:!!").is_err());
        assert!(parse("sealed:v1:k1:AAAA").is_err(), "too short for a nonce and a tag");
        assert!(!is_sealed("{\"type\":\"fedify\"}"));
    }
}
