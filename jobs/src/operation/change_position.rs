//! Where a stream of operation changes stands (`GET …/operations/events`): the resume token
//! a client sends back as `Last-Event-ID`. Opaque on the wire (base64url), one owner here.
//!
//! The order of changes has to hold across every process, so it comes from the database,
//! not from any process's clock:
//! - **SQLite** has one writer at a time (across processes too): every change takes the next
//!   number of a counter inside its write transaction, so numbers follow commit order and a
//!   position is the last number delivered ([`ChangePosition::Seq`]).
//! - **PostgreSQL** commits concurrently, so a counter taken mid-transaction does not follow
//!   commit order (and one taken under a lock would queue every writer behind every other).
//!   Each change records its transaction id instead, and a position is a snapshot: every
//!   change it sees was delivered ([`ChangePosition::Snapshot`]); the next ones are those a
//!   newer snapshot sees and it did not (PgQ's batches, without a ticker). Delivery within
//!   one such batch is ordered by `(transaction id, operation id)`, so a position may also
//!   say how far into a batch the client got.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The longest token accepted (a snapshot lists the transactions in flight when it was
/// taken; thousands of them would be a different problem).
pub const MAX_TOKEN_CHARS: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangePosition {
    /// SQLite: every change numbered up to this one was delivered.
    Seq(i64),
    /// PostgreSQL: every change visible in `seen` was delivered, and of those `batch`
    /// sees beyond it, every one up to and including `(xid, operation id)`.
    Snapshot { seen: PgSnapshot, batch: Option<(PgSnapshot, u64, String)> },
}

/// A PostgreSQL `pg_snapshot` in its text form `xmin:xmax:xip,…`, checked as PostgreSQL's
/// own input function checks it (so a forged token is a 400 here, never a database error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgSnapshot(String);

impl PgSnapshot {
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, ':');
        let xmin: u64 = parts.next()?.parse().ok()?;
        let xmax: u64 = parts.next()?.parse().ok()?;
        let xip = parts.next()?;
        // PostgreSQL's `FullTransactionIdIsValid`: the 32-bit transaction id inside the
        // 64-bit one (its epoch in the high half) is not 0.
        let valid = |x: u64| x & u64::from(u32::MAX) != 0;
        if !valid(xmin) || !valid(xmax) || xmax < xmin {
            return None;
        }
        let mut last = xmin;
        for x in xip.split(',').filter(|x| !x.is_empty()) {
            let x: u64 = x.parse().ok()?;
            if x < last || x >= xmax {
                return None;
            }
            last = x;
        }
        if xip.starts_with(',') || xip.ends_with(',') || xip.contains(",,") {
            return None;
        }
        Some(Self(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl ChangePosition {
    /// The token a client sends back.
    pub fn encode(&self) -> String {
        let raw = match self {
            Self::Seq(n) => format!("s:{n}"),
            Self::Snapshot { seen, batch: None } => format!("p:{}", seen.0),
            Self::Snapshot { seen, batch: Some((batch, xid, id)) } => format!("p:{}|{}|{xid}|{id}", seen.0, batch.0),
        };
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// `None` for anything this service did not hand out.
    pub fn decode(token: &str) -> Option<Self> {
        if token.len() > MAX_TOKEN_CHARS {
            return None;
        }
        let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(token.trim()).ok()?).ok()?;
        if let Some(n) = raw.strip_prefix("s:") {
            return n.parse().ok().filter(|n: &i64| *n >= 0).map(Self::Seq);
        }
        let rest = raw.strip_prefix("p:")?;
        let mut parts = rest.split('|');
        let seen = PgSnapshot::parse(parts.next()?)?;
        let batch = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (None, ..) => None,
            (Some(batch), Some(xid), Some(id), None) => {
                let id_ok = !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric());
                id_ok.then_some(())?;
                Some((PgSnapshot::parse(batch)?, xid.parse().ok()?, id.to_string()))
            }
            _ => return None,
        };
        Some(Self::Snapshot { seen, batch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(s: &str) -> PgSnapshot {
        PgSnapshot::parse(s).unwrap()
    }

    #[test]
    fn positions_round_trip() {
        for p in [
            ChangePosition::Seq(0),
            ChangePosition::Seq(42),
            ChangePosition::Snapshot { seen: snap("10:12:10,11"), batch: None },
            ChangePosition::Snapshot {
                seen: snap("10:12:"),
                batch: Some((snap("12:15:13"), 12, "01ARZ3NDEKTSV4RRFFQ69G5FAV".into())),
            },
        ] {
            assert_eq!(ChangePosition::decode(&p.encode()), Some(p.clone()), "{p:?}");
        }
    }

    #[test]
    fn snapshots_are_checked_as_postgresql_checks_them() {
        for good in
            ["1:1:", "5:9:", "5:9:5", "5:9:5,7,8", "5:9:5,5", "4294967297:4294967297:", "5:4294967297:4294967296"]
        {
            assert!(PgSnapshot::parse(good).is_some(), "{good}");
        }
        for bad in [
            "",
            "0:5:",
            "9:5:",
            "5:9:4",
            "5:9:9",
            "5:9:8,6",
            "5:9",
            "5:9:,",
            "5:9:6,",
            "a:b:",
            "5:9:6;select",
            "4294967296:4294967296:",
            "5:4294967296:",
        ] {
            assert!(PgSnapshot::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn junk_tokens_decode_to_nothing() {
        let enc = |s: &str| URL_SAFE_NO_PAD.encode(s);
        for junk in [
            "%%%".to_string(),
            "".to_string(),
            enc("s:-1"),
            enc("s:x"),
            enc("q:1"),
            enc("p:0:1:"),
            enc("p:1:2:|1:2:|3"),
            enc("p:1:2:|1:2:|3|id'--"),
            enc("p:1:2:|1:2:|3|ID|more"),
            "A".repeat(MAX_TOKEN_CHARS + 1),
        ] {
            assert_eq!(ChangePosition::decode(&junk), None, "{junk}");
        }
    }
}
