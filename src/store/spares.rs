//! Large buffers handed back by the consumer of a pipeline stage for its producer to fill
//! again: export pages, artifact chunks read by an import (its batches were tried too and
//! not kept: docs/artifacts.md).
//!
//! Why: glibc serves blocks of 128 KiB or more as fresh mappings (`src/main.rs` keeps that
//! threshold fixed, which bounds memory), and the kernel faults each one in page by page.
//! A stage that made a new megabyte per page, chunk or batch spent a large share of its
//! CPU in those faults (docs/artifacts.md); a few reused buffers cost the same memory.

use std::sync::{Arc, Mutex};

/// At most `KEPT` spare buffers, shared by the stages of one pipeline.
pub struct Spares<T, const KEPT: usize>(Arc<Mutex<Vec<T>>>);

impl<T, const KEPT: usize> Spares<T, KEPT> {
    /// A buffer the consumer is done with (dropped when `KEPT` are already kept).
    pub fn give(&self, spare: T) {
        let mut spares = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if spares.len() < KEPT {
            spares.push(spare);
        }
    }

    /// A spare buffer, as it was given back, if there is one.
    pub fn take(&self) -> Option<T> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }
}

impl<T, const KEPT: usize> Clone for Spares<T, KEPT> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T, const KEPT: usize> Default for Spares<T, KEPT> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_at_most_its_bound_and_shares_between_clones() {
        let spares: Spares<Vec<u8>, 2> = Spares::default();
        let other = spares.clone();
        for n in 1..=3 {
            spares.give(vec![0; n]);
        }
        assert_eq!(other.take().map(|v| v.len()), Some(2));
        assert_eq!(other.take().map(|v| v.len()), Some(1));
        assert_eq!(spares.take(), None);
    }
}
