//! The message page cursor: an opaque URL-safe base64 of `{sequence, id}`.

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

/// Stable opaque cursor position for `(sequence ASC, id ASC)` ordering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MessageCursor {
    pub sequence: i64,
    pub id: String,
}

impl MessageCursor {
    pub fn encode(&self) -> String {
        // Serialising two plain fields cannot fail.
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(bytes)
    }

    pub fn decode(value: &str) -> Result<Self, String> {
        let bytes = URL_SAFE_NO_PAD.decode(value).map_err(|_| "invalid message cursor encoding".to_string())?;
        let cursor: Self = serde_json::from_slice(&bytes).map_err(|_| "invalid message cursor payload".to_string())?;
        // A forged cursor pointing before the first sequence is as invalid as garbage.
        if cursor.sequence < 0 || cursor.id.is_empty() {
            return Err("invalid message cursor payload".to_string());
        }
        Ok(cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let c = MessageCursor { sequence: 42, id: "m-1".into() };
        assert_eq!(MessageCursor::decode(&c.encode()).unwrap(), c);
    }

    #[test]
    fn rejects_garbage_and_forgeries() {
        assert!(MessageCursor::decode("***").is_err());
        let forged = URL_SAFE_NO_PAD.encode(br#"{"sequence":1,"id":"a","x":1}"#);
        assert!(MessageCursor::decode(&forged).is_err());
        let negative = URL_SAFE_NO_PAD.encode(br#"{"sequence":-1,"id":"a"}"#);
        assert!(MessageCursor::decode(&negative).is_err());
        let not_json = URL_SAFE_NO_PAD.encode(b"hello");
        assert!(MessageCursor::decode(&not_json).is_err());
    }
}

/// The opaque cursor of a newest-first listing (operations, artifacts): the position
/// `(createdAtMs, id)` of the last row of a page.
pub struct ListCursor;

impl ListCursor {
    pub fn encode(created_at_ms: i64, id: &str) -> String {
        URL_SAFE_NO_PAD.encode(format!("{created_at_ms}:{id}"))
    }

    /// `None` for anything this service did not hand out.
    pub fn decode(text: &str) -> Option<(i64, String)> {
        let raw = URL_SAFE_NO_PAD.decode(text).ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (at, id) = text.split_once(':')?;
        Some((at.parse().ok()?, id.to_string()))
    }
}

#[cfg(test)]
mod list_cursor_tests {
    use super::ListCursor;

    #[test]
    fn list_cursors_round_trip_and_reject_junk() {
        let c = ListCursor::encode(17, "01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(ListCursor::decode(&c), Some((17, "01ARZ3NDEKTSV4RRFFQ69G5FAV".to_string())));
        assert_eq!(ListCursor::decode("%%%"), None);
        assert_eq!(ListCursor::decode("bm9jb2xvbg"), None);
    }
}
