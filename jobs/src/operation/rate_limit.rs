//! Provider rate limits as data and arithmetic: the configured rules (requests and tokens
//! per minute, hour or day, per model and optionally per tenant, several stacked on one
//! key) and GCRA, the generic cell rate algorithm, which keeps one number per key (its
//! theoretical arrival time) and so works the same in Redis and in a database row.

use serde::{Deserialize, Serialize};

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Unit {
    Requests,
    Tokens,
}

/// `limit` units per `window_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RateLimit {
    pub unit: Unit,
    pub limit: u64,
    pub window_ms: i64,
}

impl RateLimit {
    /// The short name of the limit (`rpm`, `tpd`, …), as configured.
    pub fn name(&self) -> String {
        let unit = match self.unit {
            Unit::Requests => 'r',
            Unit::Tokens => 't',
        };
        let window = match self.window_ms {
            SECOND_MS => 's',
            MINUTE_MS => 'm',
            HOUR_MS => 'h',
            _ => 'd',
        };
        format!("{unit}p{window}")
    }

    fn interval_us(&self) -> f64 {
        (self.window_ms as f64 * 1000.0) / self.limit.max(1) as f64
    }

    /// How far `cost` units move a key's arrival time (µs). A cost above the limit is
    /// counted as the limit (it could never be admitted otherwise).
    pub fn increment_us(&self, cost: u64) -> i64 {
        (cost.min(self.limit).max(1) as f64 * self.interval_us()).ceil() as i64
    }

    /// How far `delta` units (after the fact) move it.
    pub fn delta_us(&self, delta: i64) -> i64 {
        (delta as f64 * self.interval_us()) as i64
    }

    /// The units to account after the fact for a turn admitted at `estimated` that used
    /// `actual`: the difference from what [`Self::increment_us`] charged (the estimate,
    /// capped at the limit), not from the estimate itself — else a turn estimated above
    /// the limit was recorded as using less than it did.
    pub fn settle_units(&self, estimated: u64, actual: u64) -> i64 {
        let charged = estimated.min(self.limit).max(1);
        actual.min(i64::MAX as u64) as i64 - charged as i64
    }
}

const SECOND_MS: i64 = 1_000;
const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;

/// One configured rule: which turns it applies to, and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateRule {
    /// `None`: every model, each keyed separately.
    pub model: Option<String>,
    /// `None`: all tenants together.
    pub tenant: Option<String>,
    pub limits: Vec<RateLimit>,
}

/// Parse `CONTEXT_OPS_RATE_LIMITS`: rules separated by `;`, each a space-separated list of
/// `model=NAME|*`, optional `tenant=TENANT/PROJECT`, and one or more of `rps= tps= rpm= tpm=
/// rph= tph= rpd= tpd=` (requests/tokens per second/minute/hour/day), e.g.
/// `model=gpt-4o rpm=500 tpm=200000 rpd=10000; model=* tenant=acme/prod rpm=20`.
pub fn parse_rules(text: &str) -> Result<Vec<RateRule>, String> {
    let mut rules = Vec::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (mut model, mut tenant, mut limits) = (None::<Option<String>>, None, Vec::new());
        for word in part.split_whitespace() {
            let (key, value) =
                word.split_once('=').ok_or_else(|| format!("rate limit rule {part:?}: {word:?} is not key=value"))?;
            match key {
                "model" => model = Some((value != "*").then(|| value.to_string())),
                "tenant" => tenant = Some(value.to_string()),
                _ => {
                    let (unit, window) = match key {
                        "rps" => (Unit::Requests, SECOND_MS),
                        "tps" => (Unit::Tokens, SECOND_MS),
                        "rpm" => (Unit::Requests, MINUTE_MS),
                        "tpm" => (Unit::Tokens, MINUTE_MS),
                        "rph" => (Unit::Requests, HOUR_MS),
                        "tph" => (Unit::Tokens, HOUR_MS),
                        "rpd" => (Unit::Requests, DAY_MS),
                        "tpd" => (Unit::Tokens, DAY_MS),
                        other => return Err(format!("rate limit rule {part:?}: unknown key {other:?}")),
                    };
                    let limit: u64 = value
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("rate limit rule {part:?}: {key} must be a positive integer"))?;
                    limits.push(RateLimit { unit, limit, window_ms: window });
                }
            }
        }
        let model = model.ok_or_else(|| format!("rate limit rule {part:?}: name a model (model=NAME or model=*)"))?;
        if limits.is_empty() {
            return Err(format!(
                "rate limit rule {part:?}: give at least one of rps, tps, rpm, tpm, rph, tph, rpd, tpd"
            ));
        }
        rules.push(RateRule { model, tenant, limits });
    }
    Ok(rules)
}

/// The keys and limits that apply to one turn of `model` for `tenant`: every matching
/// rule's limits, keyed so that a `*` rule counts each model on its own.
pub fn keys_for(rules: &[RateRule], tenant: &str, model: &str) -> Vec<(String, RateLimit)> {
    let mut out = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        if rule.model.as_deref().is_some_and(|m| m != model) || rule.tenant.as_deref().is_some_and(|t| t != tenant) {
            continue;
        }
        let scope = rule.tenant.as_deref().unwrap_or("*");
        for limit in &rule.limits {
            out.push((format!("rate:{i}:{scope}:{model}:{}", limit.name()), *limit));
        }
    }
    out
}

/// The model-wide key a provider 429 blocks (its `retry-after`).
pub fn block_key(model: &str) -> String {
    format!("rate:block:{model}")
}

/// GCRA: admit `cost` units at `now_us` against a key whose theoretical arrival time is
/// `tat_us`. `Ok(new tat)` admits (store it); `Err(wait_us)` says how long until it would.
/// A burst of up to `limit` units per window is allowed; a cost above the limit is
/// counted as the limit (it could never be admitted otherwise).
pub fn admit(tat_us: i64, now_us: i64, cost: u64, limit: &RateLimit) -> Result<i64, i64> {
    let new_tat = tat_us.max(now_us) + limit.increment_us(cost);
    let window_us = limit.window_ms * 1000;
    if new_tat - now_us <= window_us { Ok(new_tat) } else { Err(new_tat - now_us - window_us) }
}

/// Account `delta` more units (negative: fewer) than admitted, after the fact (a turn's
/// real token usage against its estimate). The arrival time never goes below `now_us`.
pub fn adjust(tat_us: i64, now_us: i64, delta: i64, limit: &RateLimit) -> i64 {
    let moved = tat_us + limit.delta_us(delta);
    moved.max(now_us.min(tat_us))
}

/// Admit one turn against every key at once: all or nothing. `tats` are the keys' current
/// arrival times (0 for a new key), in `limits` order; `costs` the units per limit.
pub fn admit_all(tats: &[i64], now_us: i64, limits: &[(RateLimit, u64)]) -> Result<Vec<i64>, i64> {
    let mut admitted = Vec::with_capacity(limits.len());
    let mut wait = 0i64;
    for (tat, (limit, cost)) in tats.iter().zip(limits) {
        match admit(*tat, now_us, *cost, limit) {
            Ok(t) => admitted.push(t),
            Err(w) => wait = wait.max(w),
        }
    }
    if wait > 0 { Err(wait) } else { Ok(admitted) }
}

/// A rough token count of a turn before it is sent: a quarter of the request's bytes plus
/// the output budget (what providers' TPM limits count).
pub fn estimate_tokens(request_bytes: usize, max_output_tokens: Option<u32>) -> u64 {
    (request_bytes as u64).div_ceil(4) + u64::from(max_output_tokens.unwrap_or(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rpm(n: u64) -> RateLimit {
        RateLimit { unit: Unit::Requests, limit: n, window_ms: MINUTE_MS }
    }

    #[test]
    fn gcra_admits_a_burst_then_paces() {
        let limit = rpm(60); // one a second, a burst of 60
        let mut tat = 0;
        let now = 1_000_000_000;
        for _ in 0..60 {
            tat = admit(tat, now, 1, &limit).unwrap();
        }
        let wait = admit(tat, now, 1, &limit).unwrap_err();
        assert_eq!(wait, 1_000_000, "the 61st waits one interval");
        assert!(admit(tat, now + wait, 1, &limit).is_ok());
        // Costs above the limit count as the limit.
        assert!(admit(0, now, 10_000, &limit).is_ok());
    }

    #[test]
    fn settling_counts_from_what_was_charged() {
        let tpm = RateLimit { unit: Unit::Tokens, limit: 30_000, window_ms: MINUTE_MS };
        // Estimated above the limit (charged 30,000), used 35,000: 5,000 more, not 6,024 less.
        assert_eq!(tpm.settle_units(41_024, 35_000), 5_000);
        assert_eq!(tpm.settle_units(1_000, 800), -200);
        assert_eq!(tpm.settle_units(1_000, 1_000), 0);
        assert_eq!(tpm.settle_units(0, 10), 9, "an estimate of 0 was charged as 1");
        assert_eq!(tpm.settle_units(10, u64::MAX), i64::MAX - 10);
    }

    #[test]
    fn stacked_limits_are_all_or_nothing() {
        let limits = [(rpm(2), 1), (RateLimit { unit: Unit::Tokens, limit: 100, window_ms: MINUTE_MS }, 60)];
        let now = 5_000_000;
        let first = admit_all(&[0, 0], now, &limits).unwrap();
        let second = admit_all(&first, now, &limits);
        assert!(second.is_err(), "120 tokens exceed 100 a minute");
        let later = admit_all(&first, now + 60_000_000, &limits);
        assert!(later.is_ok());
        assert_eq!(adjust(first[1], now, -60, &limits[1].0), now, "never below now");
    }

    #[test]
    fn rules_parse_and_match() {
        let rules = parse_rules("model=gpt-4o rpm=500 tpm=200000 rpd=10000; model=* tenant=acme/prod rpm=20").unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].limits.len(), 3);
        assert_eq!(rules[1].model, None);
        let keys = keys_for(&rules, "acme/prod", "gpt-4o");
        assert_eq!(keys.len(), 4);
        assert!(keys.iter().any(|(k, _)| k == "rate:0:*:gpt-4o:tpm"));
        assert!(keys.iter().any(|(k, _)| k == "rate:1:acme/prod:gpt-4o:rpm"));
        assert_eq!(keys_for(&rules, "other/x", "gpt-4o").len(), 3);
        assert!(keys_for(&rules, "other/x", "mini").is_empty());
        assert_eq!(parse_rules("model=m rps=3").unwrap()[0].limits[0].name(), "rps");
        for bad in ["rpm=5", "model=x", "model=x rpm=0", "model=x rpw=3", "model=x nonsense"] {
            assert!(parse_rules(bad).is_err(), "{bad}");
        }
        assert!(parse_rules("").unwrap().is_empty());
        assert_eq!(estimate_tokens(400, Some(100)), 200);
    }
}
