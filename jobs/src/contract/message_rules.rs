//! The rules of the messages' wire shapes, applied wherever a message enters (an append,
//! an inline import, an artifact line): ids, scope, roles, the byte bound of a message's
//! key, search queries. `Err` is a 400's message.

use super::messages::{ConversationRecord, ConversationScope, MESSAGE_ROLES};
use super::{MAX_APPEND_MESSAGES, MAX_RESOURCE_ID_CHARS, MAX_SEARCH_QUERY_BYTES};

/// A resource id must be non-empty, at most `MAX_RESOURCE_ID_CHARS` characters, and hold
/// no NUL ([`super::nul`]).
pub fn validate_resource_id(what: &str, id: &str) -> Result<(), String> {
    super::nul::check_text(what, id)?;
    if id.trim().is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if id.chars().count() > MAX_RESOURCE_ID_CHARS {
        return Err(format!("{what} must be at most {MAX_RESOURCE_ID_CHARS} characters"));
    }
    Ok(())
}

pub fn validate_scope(scope: &ConversationScope) -> Result<(), String> {
    validate_resource_id("scope.conversationId", &scope.conversation_id)?;
    for (what, value) in [
        ("scope.userId", &scope.user_id),
        ("scope.agentId", &scope.agent_id),
        ("scope.agentSpaceId", &scope.agent_space_id),
        ("scope.runtimeType", &scope.runtime_type),
    ] {
        if let Some(v) = value {
            validate_resource_id(what, v)?;
        }
    }
    for (what, ids) in [
        ("scope.relations.agentIds", &scope.relations.agent_ids),
        ("scope.relations.runtimeIds", &scope.relations.runtime_ids),
        ("scope.relations.userIds", &scope.relations.user_ids),
    ] {
        // Relation ids are resource ids like the scope's own (the first agent id is the
        // conversation's listing agent, an indexed column).
        for id in ids {
            validate_resource_id(what, id)?;
        }
    }
    Ok(())
}

pub fn validate_roles(roles: &[String]) -> Result<(), String> {
    match roles.iter().find(|r| !MESSAGE_ROLES.contains(&r.as_str())) {
        Some(bad) => Err(format!("unknown role {bad:?}; expected one of {MESSAGE_ROLES:?}")),
        None => Ok(()),
    }
}

/// The most bytes a message's key may take: the tenant key (`"{tenantId}/{projectId}"`),
/// its conversation id and its id together. PostgreSQL indexes messages by those three and
/// refuses an index row above 2,704 bytes; ids are limited in characters, so ids of 191
/// four-byte characters each would reach ~3,080 bytes (a 500). The rule is the same on
/// both engines, and only such ids meet it: 2,600 bytes is, for instance, a 191-character
/// CJK tenant, project, conversation and message id together.
pub const MAX_MESSAGE_KEY_BYTES: usize = 2_600;

/// A record's key fits [`MAX_MESSAGE_KEY_BYTES`] under `tenant` (the tenant key's text).
pub fn validate_message_key(tenant: &str, r: &ConversationRecord) -> Result<(), String> {
    let bytes = tenant.len() + r.scope.conversation_id.len() + r.id.len();
    if bytes > MAX_MESSAGE_KEY_BYTES {
        return Err(format!(
            "id: the tenant, project, scope.conversationId and id take {bytes} bytes (UTF-8) together; at most {MAX_MESSAGE_KEY_BYTES}"
        ));
    }
    Ok(())
}

/// Validate one append batch of `tenant` (the tenant key's text) as a whole: the batch is
/// atomic, so one bad record rejects all.
pub fn validate_append(tenant: &str, records: &[ConversationRecord]) -> Result<(), String> {
    if records.is_empty() {
        return Err("messages must not be empty".into());
    }
    if records.len() > MAX_APPEND_MESSAGES {
        return Err(format!("an append carries at most {MAX_APPEND_MESSAGES} messages, got {}", records.len()));
    }
    for (i, r) in records.iter().enumerate() {
        validate_record(r).and_then(|()| validate_message_key(tenant, r)).map_err(|e| format!("messages[{i}].{e}"))?;
    }
    Ok(())
}

/// The rules of one record, wherever it comes from (an append, an inline import, an
/// artifact line): its id, scope and role, no NUL in any of its text (name, toolCallId,
/// content, metadata — [`super::nul`]), and a creation time that is not negative.
/// `Err` starts with the field's name relative to the record (`id …`, `scope.userId …`).
pub fn validate_record(r: &ConversationRecord) -> Result<(), String> {
    validate_resource_id("id", &r.id)?;
    validate_scope(&r.scope)?;
    validate_roles(std::slice::from_ref(&r.role)).map_err(|e| format!("role: {e}"))?;
    for (what, text) in [("name", &r.name), ("toolCallId", &r.tool_call_id)] {
        if let Some(text) = text {
            super::nul::check_text(what, text)?;
        }
    }
    super::nul::check_value("content", &r.content)?;
    super::nul::check_value("metadata", &r.metadata)?;
    if r.created_at_ms < 0 {
        return Err("createdAtMs must not be negative".into());
    }
    Ok(())
}

pub fn validate_search_query(query: &str) -> Result<(), String> {
    if query.len() > MAX_SEARCH_QUERY_BYTES {
        return Err(format!("query must be at most {MAX_SEARCH_QUERY_BYTES} bytes"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A user's message `id` in `conversation`.
    fn user(id: &str, conversation: &str) -> ConversationRecord {
        ConversationRecord::new(id, conversation, "user", json!("x"))
    }

    #[test]
    fn validation_rejects_bad_batches() {
        let ok = user("m", "c");
        assert!(validate_append(T, std::slice::from_ref(&ok)).is_ok());
        assert!(validate_append(T, &[]).is_err());
        let mut bad_role = ok.clone();
        bad_role.role = "wizard".into();
        assert!(validate_append(T, &[ok.clone(), bad_role]).is_err());
        let mut long_id = ok.clone();
        long_id.id = "x".repeat(MAX_RESOURCE_ID_CHARS + 1);
        assert!(validate_append(T, &[long_id]).is_err());
        assert!(validate_append(T, &vec![ok; MAX_APPEND_MESSAGES + 1]).is_err());
        assert!(validate_search_query(&"q".repeat(MAX_SEARCH_QUERY_BYTES + 1)).is_err());
    }

    const T: &str = "default/default";

    #[test]
    fn a_message_key_fits_postgresql_index_rows() {
        let four = |n| "\u{1F600}".repeat(n);
        let mut r = user(&four(MAX_RESOURCE_ID_CHARS), &four(MAX_RESOURCE_ID_CHARS));
        assert!(validate_append(T, std::slice::from_ref(&r)).is_ok());
        // Every id at 191 characters of three bytes (CJK) fits.
        let three = "\u{4E2D}".repeat(MAX_RESOURCE_ID_CHARS);
        let cjk_tenant = format!("{three}/{three}");
        let mut cjk = r.clone();
        (cjk.id, cjk.scope.conversation_id) = (three.clone(), three);
        assert!(validate_append(&cjk_tenant, std::slice::from_ref(&cjk)).is_ok());
        // Four-byte ids everywhere do not.
        let big_tenant = format!("{0}/{0}", four(MAX_RESOURCE_ID_CHARS));
        let err = validate_append(&big_tenant, std::slice::from_ref(&r)).unwrap_err();
        assert!(err.starts_with("messages[0].id: "), "{err}");
        assert!(err.contains("3057 bytes"), "{err}");
        r.id = "m".into();
        assert!(validate_append(&big_tenant, &[r]).is_ok());
    }
}
