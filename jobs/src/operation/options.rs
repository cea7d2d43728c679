//! What every submission may say about how its operation is scheduled, beside what it
//! asks for: a priority, a deadline (absolute, or a timeout from submission), and a
//! scheduled start. Validated here once for every submission path.

use serde::{Deserialize, Serialize};

/// The lowest and highest priority, and the default (the middle). Higher runs first within
/// a tenant's share.
pub const PRIORITY_MIN: i64 = 1;
pub const PRIORITY_MAX: i64 = 9;
pub const PRIORITY_DEFAULT: i64 = 5;

/// The scheduling fields of a submission (top-level beside the kind's own fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubmitOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 9))]
    pub priority: Option<i64>,
    /// Fail with `deadline_exceeded` if not finished by this time (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    /// …or this long after it may start (submission, or `notBeforeMs`), ms. Not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub timeout_ms: Option<i64>,
    /// Do not start before this time (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub not_before_ms: Option<i64>,
}

/// The field names of [`SubmitOptions`] on the wire (a submission body's top level).
pub const OPTION_FIELDS: [&str; 4] = ["priority", "deadlineMs", "timeoutMs", "notBeforeMs"];

/// Options resolved against the clock and the kind's default timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub priority: i64,
    pub deadline_ms: Option<i64>,
    pub not_before_ms: i64,
}

/// A year: longer timeouts and later starts are almost certainly unit mistakes.
const MAX_HORIZON_MS: i64 = 366 * 86_400_000;

impl SubmitOptions {
    /// Validate and resolve at `now_ms`; `default_timeout_ms` is the kind's configured
    /// default (used when neither deadline nor timeout is given). `Err` is a 400 message.
    pub fn resolve(&self, now_ms: i64, default_timeout_ms: Option<i64>) -> Result<Schedule, String> {
        let priority = self.priority.unwrap_or(PRIORITY_DEFAULT);
        if !(PRIORITY_MIN..=PRIORITY_MAX).contains(&priority) {
            return Err(format!("priority must be in {PRIORITY_MIN}..={PRIORITY_MAX} (default {PRIORITY_DEFAULT})"));
        }
        let not_before_ms = match self.not_before_ms {
            Some(t) if t < 0 => return Err("notBeforeMs must be a time in epoch milliseconds".into()),
            Some(t) if t > now_ms.saturating_add(MAX_HORIZON_MS) => {
                return Err("notBeforeMs is more than a year away".into());
            }
            Some(t) => t,
            None => 0,
        };
        // A timeout (given or the kind's default) runs from when the operation may start.
        let start = now_ms.max(not_before_ms);
        let deadline_ms = match (self.deadline_ms, self.timeout_ms) {
            (Some(_), Some(_)) => return Err("give deadlineMs or timeoutMs, not both".into()),
            (Some(d), None) => Some(d),
            (None, Some(t)) if t <= 0 => return Err("timeoutMs must be positive".into()),
            (None, Some(t)) if t > MAX_HORIZON_MS => return Err("timeoutMs is longer than a year".into()),
            (None, Some(t)) => Some(start.saturating_add(t)),
            (None, None) => default_timeout_ms.map(|t| start.saturating_add(t)),
        };
        if let Some(d) = deadline_ms {
            if d <= now_ms {
                return Err("the deadline has already passed".into());
            }
            if d <= not_before_ms {
                return Err("the deadline is before the scheduled start (notBeforeMs)".into());
            }
        }
        Ok(Schedule { priority, deadline_ms, not_before_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(
        priority: Option<i64>,
        deadline: Option<i64>,
        timeout: Option<i64>,
        not_before: Option<i64>,
    ) -> SubmitOptions {
        SubmitOptions { priority, deadline_ms: deadline, timeout_ms: timeout, not_before_ms: not_before }
    }

    #[test]
    fn defaults_and_bounds() {
        let s = SubmitOptions::default().resolve(1_000, None).unwrap();
        assert_eq!(s, Schedule { priority: 5, deadline_ms: None, not_before_ms: 0 });
        assert!(opts(Some(0), None, None, None).resolve(0, None).is_err());
        assert!(opts(Some(10), None, None, None).resolve(0, None).is_err());
        assert_eq!(opts(Some(9), None, None, None).resolve(0, None).unwrap().priority, 9);
    }

    #[test]
    fn deadlines_resolve_against_the_clock() {
        assert_eq!(opts(None, None, Some(500), None).resolve(1_000, None).unwrap().deadline_ms, Some(1_500));
        assert_eq!(opts(None, Some(9_000), None, None).resolve(1_000, None).unwrap().deadline_ms, Some(9_000));
        assert_eq!(SubmitOptions::default().resolve(1_000, Some(60)).unwrap().deadline_ms, Some(1_060));
        assert_eq!(opts(None, Some(5_000), None, None).resolve(1_000, Some(60)).unwrap().deadline_ms, Some(5_000));
        assert!(opts(None, Some(9_000), Some(1), None).resolve(0, None).is_err(), "not both");
        assert!(opts(None, Some(999), None, None).resolve(1_000, None).is_err(), "already passed");
        assert!(opts(None, None, Some(0), None).resolve(1_000, None).is_err());
        assert!(opts(None, Some(2_000), None, Some(3_000)).resolve(1_000, None).is_err(), "before the start");
        assert_eq!(opts(None, None, None, Some(3_000)).resolve(1_000, None).unwrap().not_before_ms, 3_000);
        assert!(opts(None, None, None, Some(-1)).resolve(1_000, None).is_err());
        // A timeout runs from the scheduled start, so a default never refuses a late start.
        assert_eq!(opts(None, None, Some(500), Some(3_000)).resolve(1_000, None).unwrap().deadline_ms, Some(3_500));
        assert_eq!(opts(None, None, None, Some(3_000)).resolve(1_000, Some(60)).unwrap().deadline_ms, Some(3_060));
    }
}
