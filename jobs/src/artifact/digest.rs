//! The artifact digest: `sha256:<64 lowercase hex>` of the whole byte stream.

use sha2::{Digest as _, Sha256};

/// A running SHA-256 over artifact bytes. Its state is deliberately not serializable
/// here: a resumed export rebuilds it by re-reading the chunks it already committed (see
/// [`crate::artifact::Encoder::resume`]), so no hash-internal format is ever persisted.
#[derive(Clone, Default)]
pub struct ArtifactDigest(Sha256);

impl ArtifactDigest {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest in its wire form, `sha256:<hex>`.
    pub fn finish(self) -> String {
        format!("sha256:{}", crate::kinds::hex(&self.0.finalize()))
    }

    /// The digest of `bytes` in one call.
    pub fn of(bytes: &[u8]) -> String {
        let mut d = Self::new();
        d.update(bytes);
        d.finish()
    }
}

impl std::fmt::Debug for ArtifactDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArtifactDigest(..)")
    }
}

/// Whether `s` is a well-formed digest: `sha256:` and 64 lowercase hex digits.
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector_and_incremental_equals_one_shot() {
        assert_eq!(
            ArtifactDigest::of(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut d = ArtifactDigest::new();
        d.update(b"a");
        d.update(b"bc");
        assert_eq!(d.finish(), ArtifactDigest::of(b"abc"));
    }

    #[test]
    fn digest_syntax() {
        assert!(is_digest(&ArtifactDigest::of(b"")));
        assert!(!is_digest("sha256:ABC"));
        assert!(!is_digest("md5:00"));
        assert!(!is_digest(&format!("sha256:{}", "G".repeat(64))));
    }
}
