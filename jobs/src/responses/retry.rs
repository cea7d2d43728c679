//! The retry policy for `POST /v1/responses`, as pure decisions.
//!
//! It follows the official OpenAI clients: retry 408, 409, 429 and 5xx (and
//! connection errors / timeouts), obey `x-should-retry`, honour a short
//! `retry-after-ms` / `retry-after` hint, and otherwise back off exponentially
//! from 0.5 s to a cap of 8 s, shortened by up to 25 % jitter. Two deliberate
//! differences: a 429 caused by `insufficient_quota` is never retried (it will
//! not clear by waiting), and the number of attempts is always bounded — create
//! has no idempotency key, so every retry can bill again.
//!
//! The caller supplies the jitter (a number in `0..=1`) and the attempt count,
//! so every decision here is deterministic and testable without a clock.

use serde_json::Value;

use crate::operation::ErrorCode;

/// First retry waits this long (before jitter); each further retry doubles it.
const INITIAL_BACKOFF_MS: f64 = 500.0;
/// Upper bound of the computed backoff.
const MAX_BACKOFF_MS: f64 = 8_000.0;
/// A server hint longer than this is ignored in favour of our own backoff, so a
/// misbehaving server cannot park a job for minutes.
const MAX_SERVER_HINT_MS: f64 = 60_000.0;

/// What to do after an HTTP error status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpDisposition {
    /// Try again after this many milliseconds.
    Retry { after_ms: u64 },
    /// Give up; `code` is a stable machine-readable reason.
    Fail { code: ErrorCode },
}

/// The response headers that steer retries, as raw strings (header names are
/// `retry-after-ms`, `retry-after`, `x-should-retry`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryHeaders {
    pub retry_after_ms: Option<String>,
    pub retry_after: Option<String>,
    pub x_should_retry: Option<String>,
}

/// Classify a non-`2xx` reply. `attempt` is the zero-based index of the attempt
/// that just failed; `max_attempts` counts every attempt including the first
/// (the official clients' default of 2 retries is `max_attempts = 3`).
#[must_use]
pub fn classify_http(
    status: u16,
    headers: &RetryHeaders,
    body: &Value,
    attempt: u32,
    max_attempts: u32,
    jitter: f64,
) -> HttpDisposition {
    if let Err(code) = retryable(status, headers, body) {
        return HttpDisposition::Fail { code };
    }
    if attempts_exhausted(attempt, max_attempts) {
        return HttpDisposition::Fail { code: ErrorCode::RetriesExhausted };
    }
    let after_ms = server_hint_ms(headers).unwrap_or_else(|| backoff_ms(attempt, jitter));
    HttpDisposition::Retry { after_ms }
}

/// Classify a connection error or timeout: always worth retrying, within the
/// same attempt budget and with the same backoff as an HTTP error.
#[must_use]
pub fn classify_transport_error(attempt: u32, max_attempts: u32, jitter: f64) -> HttpDisposition {
    if attempts_exhausted(attempt, max_attempts) {
        return HttpDisposition::Fail { code: ErrorCode::RetriesExhausted };
    }
    HttpDisposition::Retry { after_ms: backoff_ms(attempt, jitter) }
}

/// `min(500 ms · 2^attempt, 8 s) × (1 − 0.25 · jitter)`, in milliseconds. Jitter
/// only ever shortens the wait, so the cap stays a true upper bound; a jitter
/// outside `0..=1` (or NaN) is clamped rather than trusted.
#[must_use]
pub fn backoff_ms(attempt: u32, jitter: f64) -> u64 {
    // 2^5 · 500 ms already exceeds the cap; clamping the exponent avoids
    // computing huge powers for large attempt numbers.
    let base = (INITIAL_BACKOFF_MS * 2f64.powi(attempt.min(5) as i32)).min(MAX_BACKOFF_MS);
    let jitter = if jitter.is_nan() { 0.0 } else { jitter.clamp(0.0, 1.0) };
    (base * (1.0 - 0.25 * jitter)).round() as u64
}

fn attempts_exhausted(attempt: u32, max_attempts: u32) -> bool {
    attempt.saturating_add(1) >= max_attempts
}

/// `Ok(())` when the status may be retried, else the failure code. The server's
/// explicit `x-should-retry` overrides the status rules, as in the official
/// clients.
fn retryable(status: u16, headers: &RetryHeaders, body: &Value) -> Result<(), ErrorCode> {
    // Out of credit does not clear by waiting, whatever the server hints: checked
    // before `x-should-retry` so a `true` there cannot re-bill a hopeless call.
    if status == 429 && is_insufficient_quota(body) {
        return Err(ErrorCode::InsufficientQuota);
    }
    match headers.x_should_retry.as_deref().map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("true") => return Ok(()),
        Some("false") => return Err(ErrorCode::ProviderRejected),
        _ => {}
    }
    match status {
        408 | 409 | 429 | 500.. => Ok(()),
        _ => Err(ErrorCode::ProviderRejected),
    }
}

/// A 429 can mean "slow down" or "out of credit"; only the body tells them apart.
fn is_insufficient_quota(body: &Value) -> bool {
    let error = &body["error"];
    error["code"] == "insufficient_quota" || error["type"] == "insufficient_quota"
}

/// The server's requested delay, if it sent a usable one: `retry-after-ms`
/// (milliseconds, may be fractional) first, then `retry-after` (seconds, may be
/// fractional). The HTTP-date form of `retry-after` is not parsed — without a
/// clock it cannot be turned into a delay — so it falls back to backoff. A hint
/// outside `(0, 60 s]` is ignored, as the official clients do.
pub fn server_hint_ms(headers: &RetryHeaders) -> Option<u64> {
    hint_ms(headers, MAX_SERVER_HINT_MS)
}

/// How long a 429 keeps its model blocked for every worker: the server's delay as
/// [`server_hint_ms`] reads it, without that function's 60 s bound — which decides
/// whether one call waits in place, not how long the provider wants the model left alone
/// (a `retry-after: 120` blocked nothing) — up to an hour.
pub fn rate_limit_block_ms(headers: &RetryHeaders) -> Option<u64> {
    hint_ms(headers, MAX_BLOCK_MS)
}

const MAX_BLOCK_MS: f64 = 3_600_000.0;

fn hint_ms(headers: &RetryHeaders, max_ms: f64) -> Option<u64> {
    let parse = |v: &Option<String>| v.as_deref().and_then(|s| s.trim().parse::<f64>().ok()).filter(|x| x.is_finite());
    let hint = parse(&headers.retry_after_ms).or_else(|| parse(&headers.retry_after).map(|secs| secs * 1000.0))?;
    // Round up so we never come back before the time the server asked for.
    (hint > 0.0 && hint <= max_ms).then(|| hint.ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_headers() -> RetryHeaders {
        RetryHeaders::default()
    }
    fn classify(status: u16, headers: &RetryHeaders, body: &Value) -> HttpDisposition {
        classify_http(status, headers, body, 0, 3, 0.0)
    }
    fn retry(after_ms: u64) -> HttpDisposition {
        HttpDisposition::Retry { after_ms }
    }
    fn fail(code: &str) -> HttpDisposition {
        HttpDisposition::Fail { code: ErrorCode::parse(code).expect("a known code") }
    }

    #[test]
    fn transient_statuses_are_retried() {
        for status in [408, 409, 429, 500, 502, 503, 504, 599] {
            assert_eq!(classify(status, &no_headers(), &Value::Null), retry(500), "{status}");
        }
    }

    #[test]
    fn other_client_errors_are_rejected() {
        for status in [400, 401, 403, 404, 413, 422] {
            assert_eq!(classify(status, &no_headers(), &json!({"error": {"message": "x"}})), fail("provider_rejected"));
        }
    }

    #[test]
    fn insufficient_quota_is_never_retried() {
        let by_code = json!({"error": {"code": "insufficient_quota", "type": "x"}});
        let by_type = json!({"error": {"type": "insufficient_quota"}});
        assert_eq!(classify(429, &no_headers(), &by_code), fail("insufficient_quota"));
        assert_eq!(classify(429, &no_headers(), &by_type), fail("insufficient_quota"));
        let rate = json!({"error": {"code": "rate_limit_exceeded", "type": "requests"}});
        assert_eq!(classify(429, &no_headers(), &rate), retry(500));
    }

    #[test]
    fn x_should_retry_overrides_the_status_rules() {
        let yes = RetryHeaders { x_should_retry: Some("true".into()), ..no_headers() };
        let no = RetryHeaders { x_should_retry: Some(" FALSE ".into()), ..no_headers() };
        let junk = RetryHeaders { x_should_retry: Some("maybe".into()), ..no_headers() };
        assert_eq!(classify(400, &yes, &Value::Null), retry(500));
        // …except that out-of-credit is never retried, even when the server says so.
        assert_eq!(classify(429, &yes, &json!({"error": {"code": "insufficient_quota"}})), fail("insufficient_quota"));
        assert_eq!(classify(503, &no, &Value::Null), fail("provider_rejected"));
        assert_eq!(classify(429, &no, &json!({"error": {"code": "insufficient_quota"}})), fail("insufficient_quota"));
        assert_eq!(classify(503, &junk, &Value::Null), retry(500));
        assert_eq!(classify(400, &junk, &Value::Null), fail("provider_rejected"));
    }

    #[test]
    fn attempts_are_bounded() {
        let h = no_headers();
        assert_eq!(classify_http(500, &h, &Value::Null, 1, 3, 0.0), retry(1000));
        assert_eq!(classify_http(500, &h, &Value::Null, 2, 3, 0.0), fail("retries_exhausted"));
        assert_eq!(classify_http(500, &h, &Value::Null, 0, 1, 0.0), fail("retries_exhausted"));
        assert_eq!(classify_http(500, &h, &Value::Null, 0, 0, 0.0), fail("retries_exhausted"));
        assert_eq!(classify_http(500, &h, &Value::Null, u32::MAX, u32::MAX, 0.0), fail("retries_exhausted"));
        // A non-retryable status keeps its own code even on the last attempt.
        assert_eq!(classify_http(401, &h, &Value::Null, 2, 3, 0.0), fail("provider_rejected"));
    }

    #[test]
    fn server_hints_are_honoured_within_sixty_seconds() {
        let ms = RetryHeaders { retry_after_ms: Some("1500.2".into()), retry_after: Some("9".into()), ..no_headers() };
        assert_eq!(classify(429, &ms, &Value::Null), retry(1501), "retry-after-ms wins, rounded up");
        let secs = RetryHeaders { retry_after: Some("2".into()), ..no_headers() };
        assert_eq!(classify(503, &secs, &Value::Null), retry(2000));
        let frac = RetryHeaders { retry_after: Some("0.25".into()), ..no_headers() };
        assert_eq!(classify(503, &frac, &Value::Null), retry(250));
        let max = RetryHeaders { retry_after: Some("60".into()), ..no_headers() };
        assert_eq!(classify(503, &max, &Value::Null), retry(60_000));
    }

    #[test]
    fn a_rate_limit_blocks_its_model_as_long_as_the_server_asks_up_to_an_hour() {
        let h = |ms: Option<&str>, secs: Option<&str>| RetryHeaders {
            retry_after_ms: ms.map(Into::into),
            retry_after: secs.map(Into::into),
            ..no_headers()
        };
        assert_eq!(rate_limit_block_ms(&h(None, Some("120"))), Some(120_000), "past the 60 s a call waits in place");
        assert_eq!(server_hint_ms(&h(None, Some("120"))), None);
        assert_eq!(rate_limit_block_ms(&h(Some("1500.2"), Some("9"))), Some(1501));
        assert_eq!(rate_limit_block_ms(&h(None, Some("3600"))), Some(3_600_000));
        for unusable in
            [h(None, Some("3601")), h(None, Some("0")), h(None, Some("Wed, 21 Oct 2015 07:28:00 GMT")), h(None, None)]
        {
            assert_eq!(rate_limit_block_ms(&unusable), None, "{unusable:?}");
        }
    }

    #[test]
    fn unusable_hints_fall_back_to_backoff() {
        for (ms, secs) in [
            (None, Some("61")),
            (None, Some("0")),
            (None, Some("-3")),
            (None, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            (None, Some("NaN")),
            (Some("inf"), None),
            (Some("60001"), Some("1")),
        ] {
            let h =
                RetryHeaders { retry_after_ms: ms.map(Into::into), retry_after: secs.map(Into::into), ..no_headers() };
            assert_eq!(classify_http(500, &h, &Value::Null, 1, 5, 0.0), retry(1000), "{h:?}");
        }
        // An unparseable retry-after-ms does not hide a usable retry-after.
        let h = RetryHeaders { retry_after_ms: Some("soon".into()), retry_after: Some("3".into()), ..no_headers() };
        assert_eq!(classify(500, &h, &Value::Null), retry(3000));
    }

    #[test]
    fn backoff_doubles_then_caps_and_jitter_only_shortens() {
        let plain: Vec<u64> = (0..7).map(|a| backoff_ms(a, 0.0)).collect();
        assert_eq!(plain, vec![500, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(backoff_ms(u32::MAX, 0.0), 8000);
        assert_eq!(backoff_ms(0, 1.0), 375);
        assert_eq!(backoff_ms(4, 0.5), 7000);
        assert_eq!(backoff_ms(10, 1.0), 6000);
        // Out-of-range jitter is clamped, never trusted.
        assert_eq!(backoff_ms(0, -5.0), 500);
        assert_eq!(backoff_ms(0, 9.0), 375);
        assert_eq!(backoff_ms(0, f64::NAN), 500);
        assert_eq!(classify_http(500, &no_headers(), &Value::Null, 3, 10, 1.0), retry(3000));
    }

    #[test]
    fn transport_errors_retry_within_the_same_budget() {
        assert_eq!(classify_transport_error(0, 3, 0.0), retry(500));
        assert_eq!(classify_transport_error(1, 3, 1.0), retry(750));
        assert_eq!(classify_transport_error(2, 3, 0.0), fail("retries_exhausted"));
    }
}
