//! An operation that fails on an unexpected database error says so in fixed words, with
//! `errorCode: "internal"`: the driver's text (which names tables and can quote stored data)
//! goes to the log, never into the operation's `error`.

use context_jobs::contract::ContextOperationState;
use context_ops::config::Role;

use crate::harness::db::with_pool;
use crate::harness::{Backend, TestApp, message};

async fn a_database_error_is_not_shown(backend: Backend) {
    // API only: the delete stays queued while the table it needs goes away.
    let api = TestApp::start_command(backend, Role::Api, |_| {}).await;
    api.append_records(&[message("c", "m1", "user", "x")]).await;
    let id = api.submit_delete("c").await.id;
    with_pool!(api.db(), pool => {
        sqlx::query("ALTER TABLE messages RENAME TO messages_elsewhere").execute(pool).await.unwrap();
    });
    let worker = TestApp::start_on(&api, Role::Worker, |_| {}).await;
    let op = api.wait_terminal(&id).await;
    assert_eq!(op.state, ContextOperationState::Failed, "{op:?}");
    assert_eq!(op.error_code.as_deref(), Some("internal"), "{op:?}");
    let error = op.error.unwrap_or_default();
    assert_eq!(error, context_ops::kinds::job::INTERNAL_DB_ERROR);
    for driver_words in ["messages", "relation", "table", "sqlite", "postgres"] {
        assert!(!error.to_lowercase().contains(driver_words), "driver text in {error:?}");
    }
    worker.stop().await;
    api.stop().await;
}

backend_tests!(backend: a_database_error_is_not_shown);
