//! Normalised words: the one reading of text shared by lexical recall (BM25 terms) and the
//! hashing embedder (unigram and bigram features), so both see the same vocabulary.
//!
//! Normalisation: Unicode lowercase, split on anything that is not alphanumeric, drop a
//! small set of English function words (they carry no topic and dominate postings), and
//! fold a trailing plural `s` (`deployments` → `deployment`) so number does not split terms.

/// Function words dropped from terms: sorted, for binary search.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by",
    "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "his", "how", "i", "if",
    "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or", "our", "she", "so", "than", "that",
    "the", "their", "them", "then", "there", "these", "they", "this", "to", "up", "us", "was", "we", "were", "what",
    "when", "which", "who", "will", "with", "would", "you", "your",
];

pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// Fold a regular plural: `s` after at least three characters, not `ss`, `us` or `is`.
fn fold_plural(word: &mut String) {
    let n = word.len();
    if n > 3 && word.ends_with('s') && !word.ends_with("ss") && !word.ends_with("us") && !word.ends_with("is") {
        word.truncate(n - 1);
    }
}

/// The normalised terms of `text`, in order (repeats kept).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<String>| {
        if !word.is_empty() {
            if !is_stopword(word) {
                fold_plural(word);
                out.push(std::mem::take(word));
            } else {
                word.clear();
            }
        }
    };
    for ch in text.chars() {
        if ch.is_alphanumeric() {
            word.extend(ch.to_lowercase());
        } else {
            flush(&mut word, &mut out);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// 64-bit FNV-1a: a fixed, platform-independent hash (feature hashing must never change
/// between builds, or stored vectors stop matching new queries).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopwords_are_sorted() {
        assert!(STOPWORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn terms_normalise() {
        assert_eq!(terms("The Deployments of Kafka-clusters, in 2024!"), ["deployment", "kafka", "cluster", "2024"]);
        assert_eq!(terms("Straße ÜBER class status"), ["straße", "über", "class", "status"]);
        assert!(terms("  the of ").is_empty());
    }

    #[test]
    fn fnv_is_fixed() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
