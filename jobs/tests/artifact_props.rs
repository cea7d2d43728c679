//! Properties of the artifact format: for any records, any chunk size, any way the bytes
//! are split when decoding and any checkpoint an export resumes from, the bytes, digest
//! and records are the same as one uninterrupted pass.

use context_jobs::artifact::{ArtifactDigest, Decoder, Encoder, EncoderState, Header, Record};
use context_jobs::contract::{ConversationRecord, ConversationScope};
use proptest::prelude::*;
use serde_json::{Value, json};

fn record(i: usize, text: &str, conversation: u8) -> ConversationRecord {
    ConversationRecord {
        id: format!("m{i}"),
        scope: ConversationScope::conversation(format!("c{conversation}")),
        role: "user".into(),
        content: json!(text),
        name: None,
        tool_call_id: None,
        sequence: i as i64 + 1,
        created_at_ms: i as i64,
        metadata: Value::Null,
    }
}

/// Encode `records`, "crashing" after each index in `crashes`: only the chunks taken so far
/// and the serialized state survive, and the digest is rebuilt from those chunks.
fn encode(records: &[ConversationRecord], chunk: usize, crashes: &[usize]) -> (Vec<u8>, String) {
    let mut enc = Encoder::new(chunk, &Header::new("t/p", 1));
    let mut out = Vec::new();
    for (i, r) in records.iter().enumerate() {
        enc.message(r).unwrap();
        for (offset, c) in enc.take_ready() {
            assert_eq!(offset as usize, out.len());
            assert_eq!(c.len(), chunk, "every chunk but the last is full");
            out.extend_from_slice(&c);
        }
        if crashes.contains(&i) {
            let state: EncoderState = serde_json::from_str(&serde_json::to_string(enc.state()).unwrap()).unwrap();
            let mut prefix = ArtifactDigest::new();
            prefix.update(&out);
            enc = Encoder::resume(chunk, state, prefix);
        }
    }
    let finished = enc.finish().unwrap();
    for (_, c) in enc.take_ready() {
        assert!(c.len() <= chunk);
        out.extend_from_slice(&c);
    }
    assert_eq!(finished.size_bytes as usize, out.len());
    (out, finished.digest)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn encode_decode_round_trip(
        // Any text but NUL, which no record may hold (`contract::nul`).
        texts in prop::collection::vec(("[^\\x00\\n]{0,40}", 0u8..3), 0..40),
        chunk in 1usize..200,
        crashes in prop::collection::vec(0usize..40, 0..4),
        splits in prop::collection::vec(1usize..97, 1..5),
    ) {
        let mut records: Vec<ConversationRecord> =
            texts.iter().enumerate().map(|(i, (t, c))| record(i, t, *c)).collect();
        records.sort_by(|a, b| a.scope.conversation_id.cmp(&b.scope.conversation_id));
        let (plain, digest) = encode(&records, chunk, &[]);
        let (resumed, resumed_digest) = encode(&records, chunk, &crashes);
        prop_assert_eq!(&plain, &resumed);
        prop_assert_eq!(&digest, &resumed_digest);
        prop_assert_eq!(&digest, &ArtifactDigest::of(&plain));

        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        let mut at = 0;
        let mut i = 0;
        while at < plain.len() {
            let n = splits[i % splits.len()].min(plain.len() - at);
            decoder.feed(&plain[at..at + n], &mut out).unwrap();
            at += n;
            i += 1;
        }
        let summary = decoder.finish().unwrap();
        summary.check_digest(&digest).unwrap();
        prop_assert_eq!(summary.messages as usize, records.len());
        let decoded: Vec<ConversationRecord> = out
            .into_iter()
            .map(|d| match d.record { Record::Message(m) => m, Record::Entry(_) => unreachable!() })
            .collect();
        prop_assert_eq!(decoded, records);
    }
}
