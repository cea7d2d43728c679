//! Text compares bytewise on both engines (migration 15): ids, tenants and keyset cursors
//! order alike on SQLite (BINARY) and on PostgreSQL whatever the database's locale, so an
//! export writes its lines in one order and a cursor walks the same sequence on either.

use context_jobs::ids::TenantKey;
use context_ops::store::Db;
use context_ops::store::messages::{self, conversations};

use crate::harness::db::with_pool;
use crate::harness::{Backend, fresh_linguistic_database, message};

/// Ids whose bytewise order (`B < Z < a < b < e < é`) differs from any linguistic one.
const IDS: [&str; 6] = ["b", "é", "B", "a", "Z", "e"];

/// The conversations of the tenant, in the order the store's keyset walk returns them.
async fn walk(db: &Db) -> Vec<String> {
    conversations::sweep_page(db, &(String::new(), String::new()), 100)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, conversation)| conversation)
        .collect()
}

async fn text_orders_bytewise(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_linguistic_database(backend, dir.path()).await;
    let db = Db::connect(&url, 2).await.unwrap();
    db.migrate_until(14).await.unwrap();
    let tenant = TenantKey::new("t", "collation");
    for id in IDS {
        messages::append(&db, &tenant, &[message(id, &format!("{id}-1"), "user", "x")]).await.unwrap();
    }
    let before = walk(&db).await;
    // A new process migrates (PostgreSQL refuses the old connections' cached plans of the
    // changed columns: "cached plan must not change result type"; see the README).
    db.close().await;
    let db = Db::connect(&url, 2).await.unwrap();
    db.migrate().await.unwrap();
    let after = walk(&db).await;

    let mut bytewise: Vec<String> = IDS.iter().map(|s| s.to_string()).collect();
    bytewise.sort();
    assert_eq!(after, bytewise, "keys order as bytes");
    if backend == Backend::Postgres {
        // The database really is linguistic, so the migration is what changed the order.
        assert_ne!(before, bytewise, "before migration 15 PostgreSQL ordered by its locale: {before:?}");
        // Every text column of every table compares bytewise: every ordering and range
        // the engines share agrees, not only these keys. A later table must say so too.
        let linguistic: Vec<String> = with_pool!(&db, pool => {
            sqlx::query_scalar(
                "SELECT c.table_name || '.' || c.column_name FROM information_schema.columns c \
                 JOIN information_schema.tables t USING (table_schema, table_name) \
                 WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' \
                 AND c.data_type = 'text' AND c.collation_name IS DISTINCT FROM 'C' \
                 AND c.table_name <> '_sqlx_migrations'",
            )
            .fetch_all(pool)
            .await
            .unwrap()
        });
        assert!(linguistic.is_empty(), "text columns with the database's collation: {linguistic:?}");
    } else {
        assert_eq!(before, bytewise, "SQLite compares bytewise by default");
    }
    // The rows survived the change of their indexes.
    for id in IDS {
        let n: i64 = with_pool!(&db, pool => {
            sqlx::query_scalar("SELECT message_count FROM conversations WHERE conversation_id = $1")
                .bind(id)
                .fetch_one(pool)
                .await
                .unwrap()
        });
        assert_eq!(n, 1, "conversation {id}");
    }
    db.close().await;
}

backend_tests!(backend: text_orders_bytewise);
