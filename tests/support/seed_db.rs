//! Direct database access for the fault tests: seeding a large conversation the way the
//! append path leaves it, and counting what is left.

#![allow(dead_code)]

use context_ops::db::Db;
use context_ops::store::now_ms;
use context_ops::with_pool;
use serde_json::json;

/// A conversation with `n` messages (sequences 1..=n), as the append path leaves it.
pub async fn seed_conversation(db: &Db, tenant: &str, conversation: &str, n: i64) {
    let now = now_ms();
    let scope = json!({"conversationId": conversation}).to_string();
    with_pool!(db, pool => {
        sqlx::query(
            "INSERT INTO conversations (tenant, conversation_id, next_sequence, message_count, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $5)",
        )
        .bind(tenant)
        .bind(conversation)
        .bind(n + 1)
        .bind(n)
        .bind(now)
        .execute(pool)
        .await
        .unwrap();
    });
    let rows = match db {
        Db::Postgres(_) => "SELECT g FROM generate_series(1, $3::BIGINT) AS g",
        Db::Sqlite(_) => "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < $3) SELECT g FROM s",
    };
    let sql = format!(
        "INSERT INTO messages (tenant, conversation_id, id, sequence, role, scope, content, search_text, created_at_ms) \
         SELECT $1, $2, 'm' || g, g, 'user', $4, '\"message ' || g || '\"', 'message ' || g, $5 FROM ({rows}) AS r"
    );
    with_pool!(db, pool => {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(conversation)
            .bind(n)
            .bind(scope.as_str())
            .bind(now)
            .execute(pool)
            .await
            .unwrap();
    });
}

/// Messages left in the conversation.
pub async fn message_count(db: &Db, tenant: &str, conversation: &str) -> i64 {
    with_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM messages WHERE tenant = $1 AND conversation_id = $2")
            .bind(tenant)
            .bind(conversation)
            .fetch_one(pool)
            .await
            .unwrap()
    })
}

/// `message_count` of the conversation row, `None` when the row is gone.
pub async fn conversation_count(db: &Db, tenant: &str, conversation: &str) -> Option<i64> {
    with_pool!(db, pool => {
        sqlx::query_scalar::<_, i64>("SELECT message_count FROM conversations WHERE tenant = $1 AND conversation_id = $2")
            .bind(tenant)
            .bind(conversation)
            .fetch_optional(pool)
            .await
            .unwrap()
    })
}
