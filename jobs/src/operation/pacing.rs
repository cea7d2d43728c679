//! Batch sizes paced by time: a job that deletes in checkpointed batches starts at the
//! configured size and doubles it while a batch takes under half the target time, halving
//! it again (never below the configured size) when one takes over twice the target.
//!
//! Why: a batch's fixed cost (its transaction, checkpoint write and round trips, ~1 ms on
//! PostgreSQL) is paid per batch whatever its size. A delete of 5,000 rows runs in ~2 ms, so
//! fixed batches of 5,000 spent a quarter of a large delete on that cost; a batch of ~50 ms
//! spends ~2 %. What bounds a batch for the operator is its time — how long until a cancel,
//! pause, deadline or shutdown is seen at the next boundary — so that is what the target
//! names; the configured size stays the smallest batch and the unit of growth.

/// The largest batch, as a multiple of the configured size: a bound on one transaction's
/// rows (and WAL) whatever the timing says.
pub const MAX_GROWTH: i64 = 64;

/// The next batch's size, from how long the last ones took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPacer {
    size: i64,
    base: i64,
    target_ms: u64,
}

impl BatchPacer {
    /// Batches of `base` rows (at least 1) paced towards `target_ms` per batch; a target of
    /// 0 keeps every batch at `base`.
    pub fn new(base: i64, target_ms: u64) -> Self {
        let base = base.max(1);
        Self { size: base, base, target_ms }
    }

    /// Rows in the next batch.
    pub fn size(&self) -> i64 {
        self.size
    }

    /// The batch just committed held `rows` of a full batch's [`size`](Self::size) and took
    /// `took_ms`, from asking for its transaction (a wait for a connection included: that
    /// only slows the growth) to its commit. Only a full batch can show
    /// that a larger one would still be quick (a short one is the last, or a sparse range).
    pub fn record(&mut self, rows: i64, took_ms: u64) {
        if self.target_ms == 0 {
            return;
        }
        if took_ms.saturating_mul(2) < self.target_ms && rows >= self.size {
            self.size = self.size.saturating_mul(2).min(self.base.saturating_mul(MAX_GROWTH));
        } else if took_ms > self.target_ms.saturating_mul(2) {
            self.size = (self.size / 2).max(self.base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_full_batches_double_up_to_the_bound() {
        let mut p = BatchPacer::new(5_000, 50);
        let sizes: Vec<i64> = (0..8)
            .map(|_| {
                let size = p.size();
                p.record(size, 3);
                size
            })
            .collect();
        assert_eq!(sizes, [5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 320_000]);
    }

    #[test]
    fn a_batch_near_the_target_keeps_the_size_and_a_slow_one_halves_it_down_to_the_base() {
        let mut p = BatchPacer::new(100, 50);
        p.record(100, 1);
        p.record(200, 1);
        assert_eq!(p.size(), 400);
        p.record(400, 40);
        assert_eq!(p.size(), 400, "under twice the target and over half of it: kept");
        p.record(400, 101);
        assert_eq!(p.size(), 200);
        p.record(200, 500);
        p.record(100, 500);
        assert_eq!(p.size(), 100, "never below the configured size");
    }

    #[test]
    fn a_short_batch_does_not_grow_it_and_a_zero_target_keeps_it_fixed() {
        let mut p = BatchPacer::new(100, 50);
        p.record(99, 1);
        assert_eq!(p.size(), 100);
        let mut fixed = BatchPacer::new(100, 0);
        fixed.record(100, 0);
        fixed.record(100, 10_000);
        assert_eq!(fixed.size(), 100);
        assert_eq!(BatchPacer::new(0, 50).size(), 1, "at least one row");
    }
}
