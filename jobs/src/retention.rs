//! Retention policy evaluation: which messages of a conversation a policy removes.
//! The plan is computed once, stored in the operation's checkpoint, and every batch
//! deletes by the same predicate, so a resumed run removes exactly what the first planned.

use serde::{Deserialize, Serialize};

use crate::contract::RetentionPolicy;

const DAY_MS: i64 = 86_400_000;

/// Delete every message with `created_at_ms < older_than_ms` or `sequence <= up_to_sequence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RetentionPlan {
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub older_than_ms: Option<i64>,
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub up_to_sequence: Option<i64>,
}

impl RetentionPlan {
    pub fn is_noop(&self) -> bool {
        self.older_than_ms.is_none() && self.up_to_sequence.is_none()
    }
}

pub fn validate_policy(policy: &RetentionPolicy) -> Result<(), String> {
    if policy.max_age_days == Some(0) {
        return Err("policy.maxAgeDays must be at least 1 (omit it for no age limit)".into());
    }
    if policy.max_age_days.is_some_and(|d| d > 36_500) {
        return Err("policy.maxAgeDays must be at most 36500".into());
    }
    Ok(())
}

/// Plan retention for a conversation holding `message_count` messages, where
/// `nth_newest_sequence(k)` is the sequence of the k-th newest message (1-based) — the
/// shell answers it with one indexed query.
pub fn plan(
    policy: &RetentionPolicy,
    now_ms: i64,
    message_count: u64,
    nth_newest_sequence: impl FnOnce(u64) -> Option<i64>,
) -> RetentionPlan {
    let older_than_ms = policy.max_age_days.map(|d| now_ms.saturating_sub(i64::from(d) * DAY_MS));
    let up_to_sequence = match policy.max_messages {
        Some(max) if message_count > u64::from(max) => {
            // Keep the newest `max`: everything at or before the (max+1)-th newest goes.
            nth_newest_sequence(u64::from(max) + 1)
        }
        _ => None,
    };
    RetentionPlan { older_than_ms, up_to_sequence }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_and_count_limits() {
        let policy = RetentionPolicy { max_age_days: Some(1), max_messages: Some(10) };
        let plan = plan(&policy, 10 * DAY_MS, 25, |k| Some(25 - k as i64 + 1));
        assert_eq!(plan.older_than_ms, Some(9 * DAY_MS));
        // 25 messages, keep the newest 10 (16..=25): delete up to sequence 15.
        assert_eq!(plan.up_to_sequence, Some(15));
    }

    #[test]
    fn under_the_limit_keeps_everything() {
        let policy = RetentionPolicy { max_age_days: None, max_messages: Some(10) };
        let plan = plan(&policy, 0, 10, |_| panic!("not needed"));
        assert!(plan.is_noop());
    }

    #[test]
    fn zero_age_is_rejected() {
        assert!(validate_policy(&RetentionPolicy { max_age_days: Some(0), max_messages: None }).is_err());
        assert!(validate_policy(&RetentionPolicy::default()).is_ok());
    }
}
