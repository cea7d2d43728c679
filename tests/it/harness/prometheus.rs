//! Reading samples out of a `/metrics` page (Prometheus text format 0.0.4), so tests can
//! assert on a metric's value instead of on a substring of the page.

/// The sum of every sample of `name` whose labels include all of `labels` (an exact name
/// match: `context_ops_operations` does not match `context_ops_operations_submitted_total`);
/// `None` when no sample matches.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut sum = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, label_text) = match series.split_once('{') {
            Some((metric, rest)) => (metric, rest.strip_suffix('}').unwrap_or(rest)),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        // Our label values are bounded words (kinds, states, outcomes): no commas or quotes.
        let found: Vec<(&str, &str)> = label_text
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        if labels.iter().all(|l| found.contains(l))
            && let Ok(v) = value.parse::<f64>()
        {
            sum = Some(sum.unwrap_or(0.0) + v);
        }
    }
    sum
}

#[test]
fn samples_match_name_and_labels_exactly() {
    let page = "# TYPE context_ops_operations gauge\n\
                context_ops_operations{kind=\"delete\",state=\"queued\"} 3\n\
                context_ops_operations{kind=\"delete\",state=\"succeeded\"} 1\n\
                context_ops_operations_submitted_total{kind=\"delete\"} 9\n\
                context_ops_oldest_queued_timestamp_seconds 1700000000.5\n";
    let ops = "context_ops_operations";
    assert_eq!(sample(page, ops, &[("state", "queued")]), Some(3.0));
    assert_eq!(sample(page, ops, &[("kind", "delete")]), Some(4.0));
    assert_eq!(sample(page, ops, &[("state", "failed")]), None);
    assert_eq!(sample(page, "context_ops_oldest_queued_timestamp_seconds", &[]), Some(1_700_000_000.5));
}
