//! Embeddings as pure functions: the built-in deterministic hashing embedder, cosine
//! similarity, the compact i8 form the recall index keeps in memory (the stored form is
//! `vector_codec`'s), and the OpenAI-compatible `/v1/embeddings` wire shapes (request
//! body and fail-closed response decoding). The HTTP call itself is the shell's.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::text::{fnv1a64, terms};

/// Model name recorded with vectors from the hashing embedder (bump when features change).
pub const HASHING_MODEL: &str = "hashing-v1";

/// Bigrams carry phrase information but are rarer and noisier than words: half weight.
const BIGRAM_WEIGHT: f32 = 0.5;

/// Signed feature hashing of normalised word unigrams and bigrams into `dim` buckets,
/// L2-normalised. No model, no network: the same text always gives the same vector. Text
/// without terms gives the zero vector (cosine 0 with everything).
pub fn hashing_embed(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; dim.max(1)];
    let words = terms(text);
    let mut add = |feature: &[u8], weight: f32| {
        let h = fnv1a64(feature);
        let bucket = (h % v.len() as u64) as usize;
        // The sign comes from bits the bucket index barely uses, so collisions cancel out
        // on average instead of piling up.
        let sign = if (h >> 63) & 1 == 1 { -1.0 } else { 1.0 };
        v[bucket] += sign * weight;
    };
    let mut buf = Vec::with_capacity(64);
    for (i, w) in words.iter().enumerate() {
        buf.clear();
        buf.extend_from_slice(b"u:");
        buf.extend_from_slice(w.as_bytes());
        add(&buf, 1.0);
        if let Some(next) = words.get(i + 1) {
            buf.clear();
            buf.extend_from_slice(b"b:");
            buf.extend_from_slice(w.as_bytes());
            buf.push(b' ');
            buf.extend_from_slice(next.as_bytes());
            add(&buf, BIGRAM_WEIGHT);
        }
    }
    l2_normalise(&mut v);
    v
}

pub fn l2_normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Cosine similarity; 0 when either side is zero or the lengths differ.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 { 0.0 } else { (dot / (na.sqrt() * nb.sqrt())).clamp(-1.0, 1.0) }
}

/// The compact in-memory form: i8 per dimension plus one scale, normalised so that
/// `dot_i8(a, b) × a.scale × b.scale` approximates the cosine (≈1% error).
pub fn quantize(v: &[f32]) -> (Vec<i8>, f32) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if norm == 0.0 || max == 0.0 || !norm.is_finite() {
        return (vec![0; v.len()], 0.0);
    }
    let q = v.iter().map(|x| (x / max * 127.0).round() as i8).collect();
    (q, max / 127.0 / norm)
}

/// Integer dot product (written so the compiler vectorises it).
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum()
}

/// The most bytes of one text an embeddings request sends; a longer text embeds by its
/// start. A model counts tokens, and a token is at least one byte, so 8,191 bytes stay
/// within OpenAI's 8,191-token input limit whatever the text. An entry's content may reach
/// 64 KiB, and an entry the model refused as too long held its tenant's projection back.
pub const MAX_INPUT_BYTES: usize = 8_191;

/// The most bytes of text one request carries, past its first input (OpenAI caps the
/// tokens of one request at 300,000).
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;

/// `text` cut to at most `max` bytes, at a character boundary.
pub fn truncate_input(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Inputs of `lens` bytes each, split into consecutive requests of at most `max_count`
/// inputs and, past each request's first input, `max_bytes` together: their index ranges.
pub fn request_ranges(lens: &[usize], max_count: usize, max_bytes: usize) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, len) in lens.iter().enumerate() {
        if i > start && (i - start == max_count || bytes + len > max_bytes) {
            ranges.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < lens.len() {
        ranges.push(start..lens.len());
    }
    ranges
}

/// The `/v1/embeddings` request body for `inputs` (OpenAI's shape; `dimensions` asks
/// models that support it for a fixed size).
pub fn embeddings_request(model: &str, inputs: &[&str], dim: usize) -> Value {
    json!({"model": model, "input": inputs, "dimensions": dim, "encoding_format": "float"})
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbeddingsDecodeError {
    #[error("embeddings response is not valid JSON of the expected shape: {0}")]
    Malformed(String),
    #[error("embeddings response has {got} vectors for {want} inputs")]
    Count { want: usize, got: usize },
    #[error("embedding {index} has {got} dimensions; expected {want}")]
    Dimension { index: usize, want: usize, got: usize },
    #[error("embedding {index} is missing or repeated")]
    Index { index: usize },
    #[error("embedding {index} contains a non-finite value")]
    NonFinite { index: usize },
}

#[derive(Deserialize)]
struct EmbeddingsBody {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    index: usize,
    embedding: Vec<f32>,
}

/// Decode a `/v1/embeddings` reply, fail-closed: exactly one vector per input (placed by
/// `index`), each of `dim` finite values; returned L2-normalised in input order.
pub fn decode_embeddings(body: &[u8], inputs: usize, dim: usize) -> Result<Vec<Vec<f32>>, EmbeddingsDecodeError> {
    let parsed: EmbeddingsBody =
        serde_json::from_slice(body).map_err(|e| EmbeddingsDecodeError::Malformed(e.to_string()))?;
    if parsed.data.len() != inputs {
        return Err(EmbeddingsDecodeError::Count { want: inputs, got: parsed.data.len() });
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; inputs];
    for item in parsed.data {
        let index = item.index;
        let slot = out.get_mut(index).filter(|s| s.is_none()).ok_or(EmbeddingsDecodeError::Index { index })?;
        if item.embedding.len() != dim {
            return Err(EmbeddingsDecodeError::Dimension { index, want: dim, got: item.embedding.len() });
        }
        if item.embedding.iter().any(|x| !x.is_finite()) {
            return Err(EmbeddingsDecodeError::NonFinite { index });
        }
        let mut v = item.embedding;
        l2_normalise(&mut v);
        *slot = Some(v);
    }
    Ok(out.into_iter().map(|v| v.unwrap_or_default()).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn inputs_are_cut_at_character_boundaries_and_requests_by_count_and_bytes() {
        use super::{request_ranges, truncate_input};
        assert_eq!(truncate_input("héllo", 2), "h");
        assert_eq!(truncate_input("héllo", 3), "hé");
        assert_eq!(truncate_input("héllo", 99), "héllo");
        assert_eq!(truncate_input(&"\u{1F600}".repeat(3), 7), "\u{1F600}");
        assert_eq!(request_ranges(&[], 2, 10), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(request_ranges(&[1, 1, 1, 1, 1], 2, 10), [0..2, 2..4, 4..5]);
        assert_eq!(request_ranges(&[6, 6, 3, 20, 1], 9, 10), [0..1, 1..3, 3..4, 4..5]);
    }

    use super::*;

    #[test]
    fn hashing_is_deterministic_normalised_and_topical() {
        let a = hashing_embed("Deploy the Kafka cluster on Friday", 256);
        assert_eq!(a, hashing_embed("deploy the kafka cluster on friday!", 256));
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        let near = hashing_embed("Kafka cluster deploy", 256);
        let far = hashing_embed("Grandma likes blueberry pie", 256);
        assert!(cosine(&a, &near) > 0.5 && cosine(&a, &far) < 0.2);
        assert!(hashing_embed("the of", 64).iter().all(|x| *x == 0.0));
    }

    #[test]
    fn bigrams_make_word_order_matter() {
        let a = hashing_embed("new york pizza", 512);
        let b = hashing_embed("york new pizza", 512);
        assert!(cosine(&a, &b) < 0.999 && cosine(&a, &b) > 0.5);
    }

    #[test]
    fn quantized_dot_approximates_cosine() {
        let a = hashing_embed("rust async runtime tokio scheduler", 256);
        let b = hashing_embed("tokio scheduler for async rust", 256);
        let (qa, sa) = quantize(&a);
        let (qb, sb) = quantize(&b);
        let approx = f64::from(dot_i8(&qa, &qb) as f32 * sa * sb);
        assert!((approx - cosine(&a, &b)).abs() < 0.03, "{approx} vs {}", cosine(&a, &b));
        assert_eq!(quantize(&[0.0, 0.0]).1, 0.0);
    }

    #[test]
    fn embeddings_decoding_is_fail_closed() {
        let ok = br#"{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}],"model":"m"}"#;
        let v = decode_embeddings(ok, 2, 2).unwrap();
        assert_eq!(v[0], vec![0.6, 0.8]);
        assert_eq!(v[1], vec![0.0, 1.0]);
        assert!(matches!(decode_embeddings(ok, 3, 2), Err(EmbeddingsDecodeError::Count { .. })));
        assert!(matches!(decode_embeddings(ok, 2, 3), Err(EmbeddingsDecodeError::Dimension { .. })));
        let dup = br#"{"data":[{"index":0,"embedding":[1,0]},{"index":0,"embedding":[1,0]}]}"#;
        assert!(matches!(decode_embeddings(dup, 2, 2), Err(EmbeddingsDecodeError::Index { index: 0 })));
        assert!(matches!(decode_embeddings(b"{}", 1, 2), Err(EmbeddingsDecodeError::Malformed(_))));
        assert!(matches!(decode_embeddings(b"<html>", 1, 2), Err(EmbeddingsDecodeError::Malformed(_))));
    }
}
