//! The one NUL rule: no text the service accepts may hold U+0000 — not a JSON body (any
//! string or key, at any depth), not an artifact line, not a path or query parameter, not a
//! credential's claim. PostgreSQL `text` and `jsonb` cannot store it, so both engines refuse
//! it alike, at the edge, before anything is stored or an operation is queued.
//!
//! JSON text can only carry NUL as the escape `\u0000` (a raw control byte inside a string
//! is not JSON), so [`check_json`] scans the bytes for that escape — linear, no parse — and
//! parses only to name the field once it has found one.

use serde_json::Value;

/// `Err` (a 400 message) if `text` holds NUL; `what` names the field.
pub fn check_text(what: &str, text: &str) -> Result<(), String> {
    if text.contains('\0') { Err(message(what)) } else { Ok(()) }
}

fn message(what: &str) -> String {
    format!("{what} must not contain NUL (\\u0000) characters")
}

/// Whether JSON text holds a NUL: an unescaped `\u0000` (or a raw NUL byte, which no
/// parser accepts either).
pub fn json_has_nul(bytes: &[u8]) -> bool {
    let mut at = 0;
    while let Some(found) = memchr::memchr2(b'\\', 0, &bytes[at..]) {
        let i = at + found;
        if bytes[i] == 0 {
            return true;
        }
        // `\` starts an escape: `\u0000` is NUL; `\\` (and every other escape) is skipped
        // whole, so `\\u0000` — a backslash, then the text `u0000` — is not.
        if bytes.get(i + 1) == Some(&b'u') && bytes.get(i + 2..i + 6) == Some(b"0000") {
            return true;
        }
        at = i + 2;
        if at >= bytes.len() {
            return false;
        }
    }
    false
}

/// The path (`messages[3].scope.userId`) of the first string or key holding NUL.
pub fn find_in_value(value: &Value) -> Option<String> {
    fn walk(value: &Value, path: &mut String) -> bool {
        match value {
            Value::String(s) => s.contains('\0'),
            Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let hit = walk(item, path);
                if !hit {
                    path.truncate(len);
                }
                hit
            }),
            Value::Object(fields) => fields.iter().any(|(key, item)| {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key.replace('\0', "\\u0000"));
                let hit = key.contains('\0') || walk(item, path);
                if !hit {
                    path.truncate(len);
                }
                hit
            }),
            _ => false,
        }
    }
    let mut path = String::new();
    walk(value, &mut path).then_some(path)
}

/// `Err` (a 400 message naming the field) if any string or key of `value` holds NUL;
/// `what` names `value` itself.
pub fn check_value(what: &str, value: &Value) -> Result<(), String> {
    match find_in_value(value) {
        None => Ok(()),
        Some(path) if path.is_empty() || path.starts_with('[') => Err(message(&format!("{what}{path}"))),
        Some(path) => Err(message(&format!("{what}.{path}"))),
    }
}

/// `Err` (a 400 message naming the field) if the JSON text `bytes` holds a NUL anywhere;
/// `whole` names the text itself (`the request body`, `the line`).
pub fn check_json(whole: &str, bytes: &[u8]) -> Result<(), String> {
    if !json_has_nul(bytes) {
        return Ok(());
    }
    // Only now parse, to say where it is. Text that is not JSON is the parser's to reject;
    // report it as a NUL here all the same, since it holds one.
    let path = serde_json::from_slice::<Value>(bytes).ok().and_then(|v| find_in_value(&v));
    Err(match path {
        Some(path) if !path.is_empty() => message(&path),
        _ => message(whole),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_nul_escapes_only() {
        assert!(json_has_nul(br#"{"id":"a\u0000"}"#));
        assert!(json_has_nul(b"{\"id\":\"a\0\"}"));
        assert!(!json_has_nul(br#"{"id":"a\\u0000"}"#), "an escaped backslash, then text");
        assert!(json_has_nul(br#"{"id":"a\\\u0000"}"#));
        assert!(!json_has_nul(br#"{"id":"\u0001\n\"\\"}"#));
        assert!(json_has_nul(br#"{"id":"\u00001"}"#), "NUL, then the text 1");
        assert!(!json_has_nul(b"\\"));
        assert!(!json_has_nul(b""));
    }

    #[test]
    fn names_the_field() {
        let body = br#"{"messages":[{"id":"ok"},{"scope":{"userId":"u\u0000"}}]}"#;
        assert_eq!(
            check_json("the request body", body).unwrap_err(),
            "messages[1].scope.userId must not contain NUL (\\u0000) characters"
        );
        assert_eq!(find_in_value(&json!({"meta": {"k\u{0}": 1}})).unwrap(), "meta.k\\u0000");
        assert_eq!(
            check_json("the request body", br#""\u0000""#).unwrap_err(),
            "the request body must not contain NUL (\\u0000) characters"
        );
        assert!(check_json("the line", br#"{"a":"\\u0000"}"#).is_ok());
        assert!(check_text("conversationId", "c\0").is_err());
        assert!(check_text("conversationId", "c").is_ok());
    }
}
