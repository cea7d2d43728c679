//! Which queued operation of a kind runs next: fair share across tenants (the tenant with
//! the fewest running operations for its weight, then the one served longest ago), then
//! priority and age within the tenant (the store hands each tenant's head in that order).
//! Pauses and concurrency limits hold work back; the reason becomes the held operation's
//! phase.

/// One tenant with queued work of the kind, as the store found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantQueue<'a> {
    pub tenant: &'a str,
    /// The tenant's next due operation (highest priority, then oldest), if any is due.
    pub head: Option<&'a str>,
    /// The tenant's running operations of the kind.
    pub running: u32,
    /// Its share (≥ 1; the default 1).
    pub weight: u32,
    /// When an operation of the tenant last started (epoch ms; 0 never).
    pub last_claim_ms: i64,
    /// The kind is paused for this tenant.
    pub paused: bool,
}

/// The kind's own state and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KindLimits {
    /// The kind is paused for everyone.
    pub paused: bool,
    /// Running operations of the kind, all tenants.
    pub running: u32,
    pub max_running: Option<u32>,
    pub max_running_per_tenant: Option<u32>,
}

/// Why due work is not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    Paused,
    Concurrency,
}

impl Hold {
    /// The phase a held operation shows.
    pub fn phase(self) -> &'static str {
        match self {
            Hold::Paused => phase::PAUSED,
            Hold::Concurrency => phase::WAITING_FOR_CONCURRENCY,
        }
    }
}

/// Phases of a queued operation that is held back.
pub mod phase {
    pub const PAUSED: &str = "paused";
    pub const WAITING_FOR_CONCURRENCY: &str = "waiting_for_concurrency";
    pub const WAITING_FOR_RATE_LIMIT: &str = "waiting_for_rate_limit";
    pub const SCHEDULED: &str = "scheduled";
}

/// The scheduler's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick<'a> {
    /// Claim this operation of this tenant.
    Run { tenant: &'a str, id: &'a str },
    /// Due work exists but every candidate is held; `head` is one to mark with the reason.
    Held { hold: Hold, tenant: &'a str, head: &'a str },
    /// Nothing is due.
    Idle,
}

/// Choose the next operation of a kind.
pub fn pick<'a>(queues: &[TenantQueue<'a>], kind: &KindLimits) -> Pick<'a> {
    let due: Vec<&TenantQueue<'a>> = queues.iter().filter(|q| q.head.is_some()).collect();
    let Some(first) = due.first() else { return Pick::Idle };
    let held = |hold, q: &TenantQueue<'a>| Pick::Held { hold, tenant: q.tenant, head: q.head.unwrap_or_default() };
    if kind.paused {
        return held(Hold::Paused, first);
    }
    if kind.max_running.is_some_and(|max| kind.running >= max) {
        return held(Hold::Concurrency, first);
    }
    let under_tenant_limit = |q: &&&TenantQueue<'a>| kind.max_running_per_tenant.is_none_or(|max| q.running < max);
    let eligible = due.iter().filter(|q| !q.paused).filter(under_tenant_limit);
    // Fewest running for the weight first (compared without division: a/wa < b/wb ⇔
    // a·wb < b·wa), then the tenant served longest ago, then a stable order.
    let best = eligible.min_by(|a, b| {
        let (wa, wb) = (u64::from(a.weight.max(1)), u64::from(b.weight.max(1)));
        (u64::from(a.running) * wb)
            .cmp(&(u64::from(b.running) * wa))
            .then(a.last_claim_ms.cmp(&b.last_claim_ms))
            .then(a.tenant.cmp(b.tenant))
    });
    match best {
        Some(q) => Pick::Run { tenant: q.tenant, id: q.head.unwrap_or_default() },
        None => match due.iter().find(|q| !q.paused) {
            Some(q) => held(Hold::Concurrency, q),
            None => held(Hold::Paused, first),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q<'a>(tenant: &'a str, head: Option<&'a str>, running: u32, last: i64) -> TenantQueue<'a> {
        TenantQueue { tenant, head, running, weight: 1, last_claim_ms: last, paused: false }
    }

    #[test]
    fn the_least_served_tenant_goes_first() {
        // A has a backlog and two running; B has one waiting and none running.
        let queues = [q("a", Some("a1"), 2, 100), q("b", Some("b1"), 0, 0)];
        assert_eq!(pick(&queues, &KindLimits::default()), Pick::Run { tenant: "b", id: "b1" });
        // Equal running: the one served longest ago (no starvation with one slot).
        let queues = [q("a", Some("a2"), 0, 200), q("b", Some("b2"), 0, 100)];
        assert_eq!(pick(&queues, &KindLimits::default()), Pick::Run { tenant: "b", id: "b2" });
        // Weights: a with weight 3 and two running is below b with one running.
        let mut heavy = q("a", Some("a3"), 2, 0);
        heavy.weight = 3;
        let queues = [heavy, q("b", Some("b3"), 1, 0)];
        assert_eq!(pick(&queues, &KindLimits::default()), Pick::Run { tenant: "a", id: "a3" });
    }

    #[test]
    fn nothing_due_is_idle_and_limits_hold_work() {
        assert_eq!(pick(&[q("a", None, 0, 0)], &KindLimits::default()), Pick::Idle);
        let queues = [q("a", Some("a1"), 1, 0), q("b", Some("b1"), 0, 0)];
        let global = KindLimits { running: 4, max_running: Some(4), ..KindLimits::default() };
        assert_eq!(pick(&queues, &global), Pick::Held { hold: Hold::Concurrency, tenant: "a", head: "a1" });
        let per_tenant = KindLimits { max_running_per_tenant: Some(1), ..KindLimits::default() };
        assert_eq!(pick(&queues, &per_tenant), Pick::Run { tenant: "b", id: "b1" });
        assert_eq!(pick(&queues[..1], &per_tenant), Pick::Held { hold: Hold::Concurrency, tenant: "a", head: "a1" });
        let paused = KindLimits { paused: true, ..KindLimits::default() };
        assert_eq!(pick(&queues, &paused), Pick::Held { hold: Hold::Paused, tenant: "a", head: "a1" });
        let mut a = q("a", Some("a1"), 0, 0);
        a.paused = true;
        assert_eq!(
            pick(&[a.clone(), q("b", Some("b1"), 5, 0)], &KindLimits::default()).clone(),
            Pick::Run { tenant: "b", id: "b1" }
        );
        assert_eq!(pick(&[a], &KindLimits::default()), Pick::Held { hold: Hold::Paused, tenant: "a", head: "a1" });
        assert_eq!(Hold::Concurrency.phase(), "waiting_for_concurrency");
    }
}
