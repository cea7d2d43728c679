//! The scheduler's configuration as data: per-kind values (`export=2,inference=16,*=4`),
//! tenant weights (`acme/prod=3`), parsed and looked up here so every process reads the
//! same rules the same way.

use crate::contract::ContextOperationKind;

/// `kind=value` pairs, `*` for every other kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerKind {
    pairs: Vec<(Option<ContextOperationKind>, u64)>,
}

impl PerKind {
    /// Parse `export=2,inference=16,*=4` (empty: nothing set). `what` names the setting in
    /// errors.
    pub fn parse(what: &str, text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (kind, value) = part.split_once('=').ok_or_else(|| format!("{what}: {part:?} is not kind=value"))?;
            let kind = match kind.trim() {
                "*" => None,
                k => Some(ContextOperationKind::parse(k).ok_or_else(|| format!("{what}: unknown kind {k:?}"))?),
            };
            let value: u64 = value
                .trim()
                .parse()
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("{what}: {part:?} needs a positive integer"))?;
            pairs.push((kind, value));
        }
        Ok(Self { pairs })
    }

    /// The value for `kind`: its own pair, else `*`'s, else none.
    pub fn get(&self, kind: ContextOperationKind) -> Option<u64> {
        let own = self.pairs.iter().find(|(k, _)| *k == Some(kind));
        own.or_else(|| self.pairs.iter().find(|(k, _)| k.is_none())).map(|(_, v)| *v)
    }
}

/// Parse tenant weights `tenant/project=3,other/p=2` (each ≥ 1; others weigh 1).
pub fn parse_weights(text: &str) -> Result<Vec<(String, u32)>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (tenant, weight) =
            part.rsplit_once('=').ok_or_else(|| format!("tenant weights: {part:?} is not tenant/project=weight"))?;
        if !tenant.contains('/') {
            return Err(format!("tenant weights: {tenant:?} is not tenant/project"));
        }
        let weight: u32 = weight
            .trim()
            .parse()
            .ok()
            .filter(|w| (1..=1000).contains(w))
            .ok_or_else(|| format!("tenant weights: {part:?} needs a weight in 1..=1000"))?;
        out.push((tenant.trim().to_string(), weight));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_kind_values_fall_back_to_the_wildcard() {
        let m = PerKind::parse("max running", "export=2, inference=16,*=4").unwrap();
        assert_eq!(m.get(ContextOperationKind::Export), Some(2));
        assert_eq!(m.get(ContextOperationKind::Delete), Some(4));
        assert_eq!(PerKind::parse("x", "").unwrap().get(ContextOperationKind::Delete), None);
        for bad in ["export", "export=0", "nope=1", "export=x"] {
            assert!(PerKind::parse("x", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn weights_parse() {
        assert_eq!(parse_weights("a/b=3, c/d=1").unwrap(), vec![("a/b".into(), 3), ("c/d".into(), 1)]);
        for bad in ["a=3", "a/b", "a/b=0", "a/b=x"] {
            assert!(parse_weights(bad).is_err(), "{bad}");
        }
    }
}
