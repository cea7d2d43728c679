-- Conversations and their messages. Every row carries the tenant key ("tenant/project").
CREATE TABLE conversations (
    tenant              TEXT    NOT NULL,
    conversation_id     TEXT    NOT NULL,
    agent_id            TEXT,
    next_sequence       BIGINT  NOT NULL DEFAULT 1,
    message_count       BIGINT  NOT NULL DEFAULT 0,
    created_at_ms       BIGINT  NOT NULL,
    updated_at_ms       BIGINT  NOT NULL,
    -- Set while a delete operation runs: appends are refused (409) until it finishes.
    deleting_operation  TEXT,
    PRIMARY KEY (tenant, conversation_id)
);
CREATE INDEX conversations_by_agent ON conversations (tenant, agent_id, updated_at_ms DESC);

CREATE TABLE messages (
    tenant          TEXT    NOT NULL,
    conversation_id TEXT    NOT NULL,
    id              TEXT    NOT NULL,
    sequence        BIGINT  NOT NULL,
    role            TEXT    NOT NULL,
    scope           TEXT    NOT NULL,
    content         TEXT    NOT NULL,
    search_text     TEXT    NOT NULL,
    name            TEXT,
    tool_call_id    TEXT,
    created_at_ms   BIGINT  NOT NULL,
    metadata        TEXT,
    PRIMARY KEY (tenant, conversation_id, id)
);
CREATE UNIQUE INDEX messages_by_sequence ON messages (tenant, conversation_id, sequence);
