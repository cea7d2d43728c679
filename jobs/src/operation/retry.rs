//! The engine's retry policy for transient failures: exponential backoff with jitter up to
//! an attempt budget. (The provider call inside an inference turn has its own, in
//! `responses::retry`.)

/// Exponential backoff with jitter: attempt `n` waits `base · 2^(n-1)`, capped, shortened
/// by up to `jitter_fraction` (jitter only ever shortens, so the cap stays a bound).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts before a transient failure becomes `retries_exhausted`.
    pub max_attempts: u32,
    pub base_ms: u64,
    pub cap_ms: u64,
    pub jitter_fraction: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_attempts: 5, base_ms: 1_000, cap_ms: 60_000, jitter_fraction: 0.25 }
    }
}

impl RetryPolicy {
    /// The wait before retrying after attempt `attempt` (1-based) failed; `jitter` in
    /// `0..=1` is supplied by the caller (non-finite values count as 0).
    pub fn backoff_ms(&self, attempt: u32, jitter: f64) -> u64 {
        let exp = attempt.saturating_sub(1).min(32);
        let raw = self.base_ms.saturating_mul(1u64 << exp).min(self.cap_ms);
        let jitter = if jitter.is_finite() { jitter.clamp(0.0, 1.0) } else { 0.0 };
        (raw as f64 * (1.0 - self.jitter_fraction * jitter)) as u64
    }

    /// Whether a transient failure of attempt `attempt` is retried.
    pub fn may_retry(&self, attempt: u32) -> bool {
        attempt < self.max_attempts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_jitters_down() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff_ms(1, 0.0), 1000);
        assert_eq!(p.backoff_ms(2, 0.0), 2000);
        assert_eq!(p.backoff_ms(10, 0.0), 60_000);
        assert_eq!(p.backoff_ms(2, 1.0), 1500);
        assert_eq!(p.backoff_ms(200, f64::NAN), 60_000);
        assert!(p.may_retry(1) && !p.may_retry(5));
    }
}
