//! Admin scope: listing other tenants' operations, pausing, the fleet's status and bulk
//! actions across tenants need an admin credential — the separate admin token or a JWT with
//! `"admin": true`; an ordinary tenant gets 403 there and sees only its own everywhere.

use serde_json::json;

use super::{QUEUES, delete_as};
use crate::harness::jwt::{claims, jwt_mode, mint, tenant_token};
use crate::harness::{Backend, TestApp, assert_api_error};
use context_jobs::contract::CONTEXT_OPERATIONS_PATH as OPS;
use context_ops::config::Role;

const ADMIN_TOKEN: &str = "admin-secret-token";

/// The ids a listing returns.
async fn listed(app: &TestApp, token: &str, query: &str) -> (u16, Vec<String>) {
    let (status, body) = app.get_as(Some(token), &format!("{OPS}?limit=100{query}")).await;
    let ids = body["items"]
        .as_array()
        .map(|items| items.iter().map(|op| op["id"].as_str().unwrap().to_string()).collect::<Vec<_>>());
    (status, ids.unwrap_or_default())
}

async fn admins_see_every_tenant_and_tenants_see_their_own(backend: Backend) {
    let app = TestApp::start_command(backend, Role::Api, |c| {
        jwt_mode(c);
        c.auth.admin_token = Some(ADMIN_TOKEN.to_string().into());
    })
    .await;
    let (a, b) = (tenant_token("a"), tenant_token("b"));
    let mut admin_claims = claims("ops", "p");
    admin_claims["admin"] = json!(true);
    let admin_jwt = mint(&admin_claims);
    let mine = delete_as(&app, Some(&a), "x", json!({})).await;
    let theirs = delete_as(&app, Some(&b), "y", json!({})).await;

    assert_eq!(listed(&app, &a, "").await, (200, vec![mine.clone()]));
    assert_eq!(listed(&app, &a, "&tenant=a/p").await, (200, vec![mine.clone()]));
    for query in ["&tenant=b/p", "&tenant=*"] {
        let (status, body) = app.get_as(Some(&a), &format!("{OPS}?{}", &query[1..])).await;
        assert_api_error(status, &body, 403);
    }
    // A claim that is not a boolean is no credential at all.
    let mut almost = claims("a", "p");
    almost["admin"] = json!("true");
    let (status, body) = app.get_as(Some(&mint(&almost)), &format!("{OPS}?tenant=*")).await;
    assert_api_error(status, &body, 401);

    for admin in [ADMIN_TOKEN, admin_jwt.as_str()] {
        let (status, mut all) = listed(&app, admin, "&tenant=*").await;
        all.sort();
        let mut expected = vec![mine.clone(), theirs.clone()];
        expected.sort();
        assert_eq!((status, all), (200, expected));
        assert_eq!(listed(&app, admin, "&tenant=b/p").await, (200, vec![theirs.clone()]));
        let (status, body) = app.get_as(Some(admin), &format!("{QUEUES}?tenant=*")).await;
        assert_eq!(status, 200, "{body}");
    }
    // Still a wall for one operation: another tenant's id is 404, even by GET.
    let (status, body) = app.get_as(Some(&a), &format!("{OPS}/{theirs}")).await;
    assert_api_error(status, &body, 404);

    // The status: a tenant's own figures, no fleet; an admin's cover everyone, with workers.
    let (_, own) = app.get_as(Some(&a), QUEUES).await;
    assert_eq!(own["scope"], "tenant");
    assert!(own.get("workers").is_none(), "{own}");
    let queued = |status: &serde_json::Value| {
        status["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == "delete").unwrap()["queued"].clone()
    };
    assert_eq!(queued(&own), 1);
    let (_, all) = app.get_as(Some(ADMIN_TOKEN), QUEUES).await;
    assert_eq!((&all["scope"], queued(&all)), (&json!("all"), json!(2)), "{all}");
    assert!(all["workers"].is_array(), "{all}");

    for path in [format!("{QUEUES}/delete/pause"), format!("{QUEUES}/delete/resume")] {
        let (status, body) = app.post_as(Some(&a), &path, &json!({})).await;
        assert_api_error(status, &body, 403);
    }
    let (status, body) = app.post_as(Some(&admin_jwt), &format!("{QUEUES}/delete/pause"), &json!({})).await;
    assert_eq!((status, &body["paused"]), (200, &json!(true)), "{body}");
}

backend_tests!(backend: admins_see_every_tenant_and_tenants_see_their_own);
