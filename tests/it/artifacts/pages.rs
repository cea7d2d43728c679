//! An export reads its messages in pages of `batch_size` rows — or fewer once a page's text
//! reaches `export_pages::PAGE_BYTES`, so a tenant of large messages keeps each page (and
//! the few read ahead) to a few megabytes instead of `batch_size` times a message; so are
//! its entries' pages (an entry may hold ~80 KiB); an import cuts its batches by bytes the
//! same way, and a recall index syncs its entries in such pages.

use std::sync::{Arc, Mutex};

use context_jobs::contract::{CONTEXT_RECALL_PATH, ContextOperationState, ExportFilter};
use context_jobs::ids::TenantKey;
use context_ops::store::artifacts::export_pages::{PAGE_BYTES, SparePages, for_each_page};
use context_ops::store::entries::reads::export_page;
use context_ops::store::query;
use context_ops::store::vectors::reads::entries_changed_after;
use serde_json::json;

use crate::harness::insights::insight;
use crate::harness::{OperationExt as _, TestApp, message};

async fn large_messages_are_read_in_pages_bounded_by_bytes(app: TestApp) {
    // Twelve messages of ~1 MiB each, three per append (the append limit is 8 MiB).
    let big = "x".repeat(1 << 20);
    for batch in 0..4 {
        let records: Vec<_> = (0..3).map(|i| message("big", &format!("m{:02}", batch * 3 + i), "user", &big)).collect();
        app.append_records(&records).await;
    }
    let pages = Arc::new(Mutex::new(Vec::new()));
    let seen = pages.clone();
    let spares = SparePages::default();
    let tenant = TenantKey::default_tenant();
    for_each_page(app.db(), &tenant, &ExportFilter::default(), None, 1_000, &spares, move |page| {
        let sizes: Vec<(i64, usize)> = page.rows().map(|r| (r.sequence, r.columns.content.len())).collect();
        seen.lock().unwrap().push(sizes);
        async { true }
    })
    .await
    .unwrap();
    let pages = pages.lock().unwrap().clone();
    let sequences: Vec<i64> = pages.iter().flatten().map(|(s, _)| *s).collect();
    assert_eq!(sequences, (1..=12).collect::<Vec<_>>(), "every message once, in order");
    assert!(pages.len() >= 3, "12 MiB in pages of ~{PAGE_BYTES} bytes: {} pages", pages.len());
    for page in &pages {
        let bytes: usize = page.iter().map(|(_, len)| len).sum();
        // A page stops at the first row that reaches the bound: at most one row past it.
        assert!(bytes < PAGE_BYTES + (1 << 20) + 4096, "a page of {bytes} bytes");
    }

    // 200 entries of ~60 KB: pages of up to 1,000 rows are cut at the byte bound too.
    let text = "y".repeat(60_000);
    let entries: Vec<_> = (0..200).map(|i| insight(format!("e{i:03}"), json!(text))).collect();
    crate::harness::insights::import(app.db(), tenant.as_str(), &entries).await;
    let (mut after, mut pages, mut ids) = (None::<String>, 0, Vec::new());
    loop {
        let page =
            export_page(app.db(), &tenant, true, &ExportFilter::default(), after.as_deref(), 1_000).await.unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        let bytes: usize = page.iter().map(|e| e.content.to_string().len()).sum();
        assert!(bytes < PAGE_BYTES + 64_000, "an entry page of {bytes} bytes");
        ids.extend(page.into_iter().map(|e| e.id));
        pages += 1;
    }
    assert_eq!(ids, (0..200).map(|i| format!("e{i:03}")).collect::<Vec<_>>(), "every entry once, in order");
    assert!(pages >= 3, "12 MB of entries in pages of ~{PAGE_BYTES} bytes: {pages} pages");

    // The same messages exported and imported back: the import cuts its batches by bytes
    // too (~4 of these per batch, against the default batch size of 5,000), and every message comes
    // back once, in order, whole.
    let artifact = super::export(&app).await.result_json()["artifactId"].as_str().unwrap().to_string();
    query("DELETE FROM messages").execute(app.db()).await.unwrap();
    query("DELETE FROM conversations").execute(app.db()).await.unwrap();
    let op = super::import(&app, json!({"artifactRef": artifact, "idempotencyKey": "big"})).await;
    assert_eq!(op.state, ContextOperationState::Succeeded, "{op:?}");
    let back = super::page_all(&app, "big").await;
    let ids: Vec<&str> = back.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, (0..12).map(|i| format!("m{i:02}")).collect::<Vec<_>>());
    assert!(back.iter().all(|m| m["content"].as_str().map(str::len) == Some(1 << 20)));
    assert_eq!(op.result_json()["entries"]["skipped"], 200, "the entries were exported, and are still there: {op:?}");
    app.stop().await;
}

/// A recall index syncs its tenant's entries (and vectors) in pages cut by bytes too: 200
/// entries of ~60 KB were one 12 MB read (5,000 of them: 400 MB), and every one still
/// reaches the index.
async fn a_recall_index_syncs_in_pages_bounded_by_bytes(app: TestApp) {
    let tenant = TenantKey::default_tenant();
    let text = "y ".repeat(30_000);
    let mut entries: Vec<_> = (0..200).map(|i| insight(format!("e{i:03}"), json!(text))).collect();
    entries[199].content = json!(format!("{text} zebra"));
    crate::harness::insights::import(app.db(), tenant.as_str(), &entries).await;
    let (mut after, mut pages, mut ids) = (0, 0, Vec::new());
    loop {
        let page = entries_changed_after(app.db(), &tenant, after, 5_000).await.unwrap();
        let bytes: usize = page.rows.iter().map(|row| row.6.len()).sum();
        assert!(bytes < PAGE_BYTES + 64_000, "a sync page of {bytes} bytes");
        after = page.rows.last().map_or(after, |row| row.7);
        ids.extend(page.rows.into_iter().map(|row| row.0));
        pages += 1;
        if !page.more {
            break;
        }
    }
    assert_eq!(ids, (0..200).map(|i| format!("e{i:03}")).collect::<Vec<_>>(), "every entry once, in order");
    assert!(pages >= 3, "12 MB of entries in pages of ~{PAGE_BYTES} bytes: {pages} pages");
    // The index syncs through the same pages: the last entry is found.
    let (status, body) = app.post(CONTEXT_RECALL_PATH, &json!({"query": "zebra"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["items"][0]["entry"]["id"], "e199", "{body}");
    app.stop().await;
}

backend_tests!(large_messages_are_read_in_pages_bounded_by_bytes);
backend_tests!(a_recall_index_syncs_in_pages_bounded_by_bytes);
