//! Direct database access through the service's own `Db`: seeding a large conversation
//! the way the append path leaves it, counting what is left, and the operation columns the
//! API does not show.

use context_ops::store::Db;
use context_ops::store::now_ms;
use serde_json::json;

/// Run one body of raw sqlx against whichever pool `$db` holds (compiled once per engine):
/// tests read and write the tables directly, beside the service's own store.
macro_rules! with_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            context_ops::store::Db::Postgres($pool) => $body,
            context_ops::store::Db::Sqlite($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// The tenant of open mode and of the static token.
pub const DEFAULT_TENANT: &str = "default/default";

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

/// An operation row as stored, with what the API does not show (attempt, lease, backoff,
/// push time, checkpoint).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OpRow {
    pub state: String,
    pub phase: String,
    pub processed: i64,
    pub total: i64,
    pub attempt: i64,
    pub version: i64,
    pub error_code: Option<String>,
    pub error: Option<String>,
    pub checkpoint: Option<String>,
    pub lease_token: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    pub not_before_ms: i64,
    pub pushed_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

pub async fn operation_row(db: &Db, id: &str) -> OpRow {
    with_pool!(db, pool => {
        sqlx::query_as::<_, OpRow>(
            "SELECT state, phase, processed, total, attempt, version, error_code, error, checkpoint, lease_token, \
             lease_expires_at_ms, not_before_ms, pushed_at_ms, created_at_ms, updated_at_ms \
             FROM operations WHERE id = $1",
        )
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
    })
}

/// Wait (up to 10 s) until a statement of this test's PostgreSQL database waits for a lock
/// (a race staged on row locks: the other side has its statement in, blocked).
pub async fn until_a_lock_is_awaited(db: &Db) {
    let waiting = async {
        loop {
            let n: i64 = context_ops::store::query(
                "SELECT COUNT(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE NOT l.granted AND a.datname = current_database()",
            )
            .fetch_scalar(db)
            .await
            .unwrap();
            if n > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), waiting).await.expect("no statement waited for a lock");
}
