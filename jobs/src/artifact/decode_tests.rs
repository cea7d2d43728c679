//! Tests of the incremental artifact decoder.
use super::*;
use crate::artifact::{Encoder, header_line};
use crate::contract::{ContextInsightKind, ContextInsightStatus, ContextProvenance, ConversationScope};
use serde_json::{Value, json};

fn message(i: usize) -> ConversationRecord {
    ConversationRecord {
        id: format!("m{i}"),
        scope: ConversationScope::conversation(format!("c{}", i / 3)),
        role: "assistant".into(),
        content: json!([{"type": "text", "text": format!("é∑ {i}")}]),
        name: None,
        tool_call_id: None,
        sequence: i as i64 + 1,
        created_at_ms: 5,
        metadata: json!({"k": i}),
    }
}

fn entry(i: usize) -> ContextInsight {
    ContextInsight {
        id: format!("e{i}"),
        kind: ContextInsightKind::Fact,
        content: json!("sky is blue"),
        attributes: Value::Null,
        version: 1,
        status: ContextInsightStatus::Active,
        provenance: ContextProvenance {
            conversation_id: "c0".into(),
            message_ids: vec!["m0".into()],
            extractor_ref: None,
            observed_at_ms: 3,
        },
        superseded_by: None,
        expires_at_ms: None,
        created_at_ms: 1,
        updated_at_ms: 2,
    }
}

fn artifact(messages: usize, entries: usize) -> (Vec<u8>, String) {
    let mut enc = Encoder::new(37, &Header::new("t/p", 9));
    for i in 0..messages {
        enc.message(&message(i)).unwrap();
    }
    for i in 0..entries {
        enc.entry(&entry(i)).unwrap();
    }
    let finished = enc.finish().unwrap();
    let bytes: Vec<u8> = enc.take_ready().into_iter().flat_map(|(_, c)| c).collect();
    (bytes, finished.digest)
}

fn decode_in(bytes: &[u8], piece: usize) -> Result<(Vec<Decoded>, Summary), DecodeError> {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    for part in bytes.chunks(piece.max(1)) {
        decoder.feed(part, &mut out)?;
    }
    Ok((out, decoder.finish()?))
}

fn lines_to_bytes(lines: &[String]) -> Vec<u8> {
    lines.iter().flat_map(|l| format!("{l}\n").into_bytes()).collect()
}

fn error(bytes: &[u8]) -> DecodeError {
    decode_in(bytes, 7).expect_err("must fail")
}

#[test]
fn round_trips_whatever_the_split() {
    let (bytes, digest) = artifact(7, 3);
    for piece in [1, 2, 3, 5, 64, bytes.len()] {
        let (records, summary) = decode_in(&bytes, piece).unwrap();
        assert_eq!(records.len(), 10);
        assert_eq!(records[0].record, Record::Message(message(0)));
        assert_eq!(records[7].record, Record::Entry(entry(0)));
        assert_eq!(records[0].line, 2);
        let trailer = r#"{"type":"trailer","messages":7,"entries":3}"#.len() + 1;
        assert_eq!(records.last().unwrap().end_offset as usize, bytes.len() - trailer);
        assert_eq!(summary.messages, 7);
        assert_eq!(summary.entries, 3);
        assert_eq!(summary.bytes as usize, bytes.len());
        assert_eq!(summary.header, Some(Header::new("t/p", 9)));
        summary.check_digest(&digest).unwrap();
    }
}

#[test]
fn resumes_at_a_record_boundary() {
    let (bytes, _) = artifact(6, 2);
    let (all, _) = decode_in(&bytes, 1000).unwrap();
    let cut = &all[3];
    let mut decoder = Decoder::resume(cut.end_offset, cut.line, 4, 0);
    let mut out = Vec::new();
    decoder.feed(&bytes[cut.end_offset as usize..], &mut out).unwrap();
    let summary = decoder.finish().unwrap();
    assert_eq!(out, all[4..].to_vec());
    assert_eq!(summary.messages, 6);
    assert!(summary.digest.is_none());
}

#[test]
fn each_failure_has_its_code_and_line() {
    let (bytes, digest) = artifact(3, 1);
    let text = String::from_utf8(bytes.clone()).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();

    let (_, summary) = decode_in(&bytes, 10).unwrap();
    let mut tampered = digest.clone();
    tampered.replace_range(10..11, if &digest[10..11] == "0" { "1" } else { "0" });
    let e = summary.check_digest(&tampered).unwrap_err();
    assert_eq!(e.code().as_str(), "artifact_bad_digest");

    // Truncated: cut mid-line, missing trailer, empty, trailer counts off.
    let e = error(&bytes[..bytes.len() - 10]);
    assert_eq!((e.code().as_str(), e.line), ("artifact_truncated", 6));
    let e = error(&lines_to_bytes(&lines[..5]));
    assert_eq!((e.code().as_str(), e.line), ("artifact_truncated", 6), "{e}");
    assert_eq!(error(b"").code().as_str(), "artifact_truncated");
    let mut short = lines.clone();
    short.remove(2);
    let e = error(&lines_to_bytes(&short));
    assert_eq!((e.code().as_str(), e.line), ("artifact_truncated", 5), "{e}");

    // Bad lines: garbage, unknown type, order, after trailer, invalid record, blank.
    for (index, replacement, expected_line) in [
        (2, "{not json".to_string(), 3),
        (2, r#"{"type":"vector","id":"x"}"#.to_string(), 3),
        (1, lines[4].clone(), 3),
        (2, r#"{"type":"message","id":"","scope":{"conversationId":"c"},"role":"user","content":"x"}"#.into(), 3),
        (2, r#"{"type":"message","id":"m","scope":{"conversationId":"c"},"role":"wizard","content":"x"}"#.into(), 3),
        (3, String::new(), 4),
        (0, lines[5].clone(), 1),
    ] {
        let mut bad = lines.clone();
        bad[index] = replacement;
        let e = error(&lines_to_bytes(&bad));
        assert_eq!((e.code().as_str(), e.line), ("artifact_bad_line", expected_line), "{e}");
        assert!(e.to_string().starts_with(&format!("line {expected_line}: ")), "{e}");
    }
    let mut after = lines.clone();
    after.push(lines[1].clone());
    let e = error(&lines_to_bytes(&after));
    assert_eq!((e.code().as_str(), e.line), ("artifact_bad_line", 7));
    assert_eq!(error(br#"{"type":"hea"#).code().as_str(), "artifact_truncated", "a header cut off at EOF");
    assert_eq!(error(&[b'x'; 10]).code().as_str(), "artifact_bad_line", "junk is not a cut-off line");
    let mut invalid_utf8 = lines_to_bytes(&lines);
    invalid_utf8[lines[0].len() + 10] = 0xff;
    assert_eq!(error(&invalid_utf8).code().as_str(), "artifact_bad_line");

    // Unknown schema version.
    let mut v2 = lines.clone();
    v2[0] = header_line(&Header { schema_version: 2, ..Header::new("t/p", 9) });
    let e = error(&lines_to_bytes(&v2));
    assert_eq!((e.code().as_str(), e.line), ("artifact_unknown_schema", 1));
}

#[test]
fn a_last_line_without_newline_is_accepted_when_complete() {
    let (bytes, _) = artifact(2, 0);
    let (records, summary) = decode_in(&bytes[..bytes.len() - 1], 4).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(summary.bytes as usize, bytes.len() - 1);
}

/// Lines ending in CRLF (an artifact that went through a Windows editor or a tool that
/// rewrites line endings) read as the same records; the digest is of the bytes as given.
#[test]
fn crlf_line_endings_are_accepted() {
    let (bytes, _) = artifact(4, 2);
    let crlf: Vec<u8> = bytes.iter().flat_map(|&b| if b == b'\n' { vec![b'\r', b'\n'] } else { vec![b] }).collect();
    let (plain, _) = decode_in(&bytes, 5).unwrap();
    for cut in [0, 2] {
        // With and without the last line's CRLF.
        let given = &crlf[..crlf.len() - cut];
        let (records, summary) = decode_in(given, 5).unwrap();
        assert_eq!(
            records.iter().map(|d| &d.record).collect::<Vec<_>>(),
            plain.iter().map(|d| &d.record).collect::<Vec<_>>()
        );
        assert_eq!(summary.bytes as usize, given.len());
        assert_eq!(summary.digest, Some(crate::artifact::ArtifactDigest::of(given)));
    }
}

/// NUL anywhere in a line (PostgreSQL cannot store it) is a bad line, named by field.
#[test]
fn nul_anywhere_is_a_bad_line() {
    let (bytes, _) = artifact(3, 1);
    let lines: Vec<String> = String::from_utf8(bytes).unwrap().lines().map(str::to_string).collect();
    for (line, from, to) in
        [(2, "\"id\":\"m1\"", "\"id\":\"m\\u0000\""), (3, "\"k\":2", "\"k\\u0000\":2"), (4, "sky", "s\\u0000ky")]
    {
        let mut case = lines.clone();
        assert!(case[line].contains(from), "{}", case[line]);
        case[line] = case[line].replace(from, to);
        let e = error(&lines_to_bytes(&case));
        assert_eq!((e.code().as_str(), e.line), ("artifact_bad_line", line as u64 + 1), "{e}");
        assert!(e.message.contains("NUL"), "{e}");
    }
}

#[test]
fn overlong_lines_are_rejected_without_buffering_them() {
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    let header = format!("{}\n", header_line(&Header::new("t", 0)));
    decoder.feed(header.as_bytes(), &mut out).unwrap();
    let block = vec![b' '; 1024 * 1024];
    let mut result = Ok(());
    for _ in 0..17 {
        result = decoder.feed(&block, &mut out);
        if result.is_err() {
            break;
        }
    }
    let e = result.unwrap_err();
    assert_eq!((e.code().as_str(), e.line), ("artifact_bad_line", 2));
}

#[test]
fn an_unhashed_decoder_reads_the_same_records_and_checks_no_digest() {
    let (bytes, digest) = artifact(7, 2);
    let (hashed, _) = decode_in(&bytes, 5).unwrap();
    let mut decoder = Decoder::unhashed();
    let mut out = Vec::new();
    decoder.feed(&bytes, &mut out).unwrap();
    let summary = decoder.finish().unwrap();
    assert_eq!(out, hashed);
    assert_eq!((summary.messages, summary.entries, summary.digest.as_deref()), (7, 2, None));
    assert!(summary.check_digest(&digest).is_err(), "nothing hashed, nothing to vouch for");
}
