use super::*;
use crate::contract::ConversationScope;
use serde_json::{Value, json};

fn message(i: usize) -> ConversationRecord {
    ConversationRecord {
        id: format!("m{i}"),
        scope: ConversationScope::conversation("c"),
        role: "user".into(),
        content: json!(format!("hello {i}")),
        name: None,
        tool_call_id: None,
        sequence: i as i64 + 1,
        created_at_ms: 1000 + i as i64,
        metadata: Value::Null,
    }
}

fn drain(enc: &mut Encoder, out: &mut Vec<u8>) {
    for (offset, chunk) in enc.take_ready() {
        assert_eq!(offset as usize, out.len(), "chunks are contiguous");
        out.extend_from_slice(&chunk);
    }
}

#[test]
fn lines_have_the_documented_shape_and_chunks_are_fixed_size() {
    let mut enc = Encoder::new(64, &Header::new("t/p", 42));
    let mut out = Vec::new();
    for i in 0..10 {
        enc.message(&message(i)).unwrap();
        for (_, chunk) in enc.take_ready() {
            assert_eq!(chunk.len(), 64);
            out.extend_from_slice(&chunk);
        }
    }
    let finished = enc.finish().unwrap();
    drain(&mut enc, &mut out);
    let text = String::from_utf8(out.clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], r#"{"type":"header","schemaVersion":1,"tenant":"t/p","createdAtMs":42}"#);
    assert!(lines[1].starts_with(r#"{"type":"message","id":"m0","scope":{"conversationId":"c"},"role":"user""#));
    assert_eq!(lines[11], r#"{"type":"trailer","messages":10,"entries":0}"#);
    assert!(text.ends_with('\n'));
    assert_eq!(finished.size_bytes as usize, out.len());
    assert_eq!(finished.digest, ArtifactDigest::of(&out));
    assert_eq!(finished.messages, 10);
}

/// Chunks handed back are written again, and the artifact is the same bytes as
/// without recycling. (Handed back with a capacity no fresh buffer has, so a chunk
/// written into one is told apart from a new allocation at the same address.)
#[test]
fn recycled_chunks_are_reused_and_change_nothing() {
    const MARK: usize = 8192;
    let header = Header::new("t/p", 42);
    let (mut plain, mut recycling) = (Encoder::new(256, &header), Encoder::new(256, &header));
    let (mut expected, mut out) = (Vec::new(), Vec::new());
    let mut reused = 0;
    for i in 0..200 {
        plain.message(&message(i)).unwrap();
        recycling.message(&message(i)).unwrap();
        drain(&mut plain, &mut expected);
        for (offset, mut chunk) in recycling.take_ready() {
            assert_eq!(offset as usize, out.len());
            out.extend_from_slice(&chunk);
            reused += usize::from(chunk.capacity() >= MARK);
            chunk.reserve_exact(MARK);
            recycling.recycle(chunk);
        }
    }
    plain.finish().unwrap();
    let finished = recycling.finish().unwrap();
    drain(&mut plain, &mut expected);
    drain(&mut recycling, &mut out);
    assert_eq!(out, expected);
    assert_eq!(finished.digest, ArtifactDigest::of(&expected));
    assert!(expected.len() > 40 * 256, "many chunks: {}", expected.len());
    assert!(reused > 30, "chunks written into recycled buffers: {reused}");
}

#[test]
fn stored_messages_write_the_record_line() {
    let mut full = message(3);
    full.name = Some("calc".into());
    full.tool_call_id = Some("call-1".into());
    full.metadata = json!({"b": [1, 2.5, null], "a": "é\n\"q\""});
    full.content = json!([{"type": "text", "text": "tab\there"}]);
    full.scope.agent_id = Some("agent".into());
    for record in [message(1), full] {
        let scope = serde_json::to_string(&record.scope).unwrap();
        let content = record.content.to_string();
        let metadata = (!record.metadata.is_null()).then(|| record.metadata.to_string());
        let stored = StoredColumns {
            id: &record.id,
            scope: &scope,
            role: &record.role,
            content: &content,
            name: record.name.as_deref(),
            tool_call_id: record.tool_call_id.as_deref(),
            sequence: record.sequence,
            created_at_ms: record.created_at_ms,
            metadata: metadata.as_deref(),
        };
        let mut typed = Encoder::new(1 << 20, &Header::new("t", 0));
        let mut raw = Encoder::new(1 << 20, &Header::new("t", 0));
        typed.message(&record).unwrap();
        raw.stored_message(&stored).unwrap();
        assert_eq!(typed.finish().unwrap(), raw.finish().unwrap());
    }
    let spans_lines = StoredColumns {
        id: "m",
        scope: "{\"conversationId\":\n\"c\"}",
        role: "user",
        content: "1",
        name: None,
        tool_call_id: None,
        sequence: 1,
        created_at_ms: 1,
        metadata: None,
    };
    let mut enc = Encoder::new(1 << 20, &Header::new("t", 0));
    assert!(matches!(enc.stored_message(&spans_lines), Err(EncodeError::Json(_))));
    assert_eq!(enc.state().messages, 0, "a refused message leaves nothing behind");
}

#[test]
fn order_is_enforced() {
    let mut enc = Encoder::new(1024, &Header::new("t", 0));
    enc.end_messages();
    assert!(matches!(enc.message(&message(0)), Err(EncodeError::OutOfOrder(..))));
    enc.finish().unwrap();
    assert!(enc.finish().is_err());
}

#[test]
fn resume_from_any_checkpoint_gives_identical_bytes() {
    let run = |stop_after: Option<usize>| {
        let mut enc = Encoder::new(50, &Header::new("t/p", 7));
        let mut out = Vec::new();
        for i in 0..20 {
            enc.message(&message(i)).unwrap();
            drain(&mut enc, &mut out);
            if stop_after == Some(i) {
                // "Crash": keep only the committed bytes and the checkpoint JSON.
                let saved = serde_json::to_string(enc.state()).unwrap();
                let state: EncoderState = serde_json::from_str(&saved).unwrap();
                let mut prefix = ArtifactDigest::new();
                prefix.update(&out);
                enc = Encoder::resume(50, state, prefix);
            }
        }
        let finished = enc.finish().unwrap();
        drain(&mut enc, &mut out);
        (out, finished)
    };
    let (whole, finished) = run(None);
    for stop in [0, 3, 11, 19] {
        let (resumed, f) = run(Some(stop));
        assert_eq!(resumed, whole, "resumed after record {stop}");
        assert_eq!(f, finished);
    }
}
