//! HS256 gateway tokens for services started with [`JWT_SECRET`]: a tenant per test
//! caller, audience `agent-context-infra`.

use std::time::{SystemTime, UNIX_EPOCH};

use context_ops::config::Config;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::{Value, json};

use super::app::{Backend, TestApp};

/// 32 bytes.
pub const JWT_SECRET: &str = "0123456789abcdef0123456789abcdef";

/// A config tweak: accept tokens signed with [`JWT_SECRET`].
pub fn jwt_mode(config: &mut Config) {
    config.auth.jwt_secret = Some(JWT_SECRET.into());
}

/// A service in JWT mode, otherwise with defaults.
pub async fn jwt_app(backend: Backend) -> TestApp {
    TestApp::start_with(backend, jwt_mode).await
}

pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// The claims of a caller in `tenant`/`project`, valid for ten minutes.
pub fn claims(tenant: &str, project: &str) -> Value {
    json!({"aud": "agent-context-infra", "sub": "svc", "tenant_id": tenant, "project_id": project,
           "exp": now_secs() + 600})
}

pub fn mint_with(header: &Header, secret: &str, claims: &Value) -> String {
    jsonwebtoken::encode(header, claims, &EncodingKey::from_secret(secret.as_bytes()).unwrap()).unwrap()
}

pub fn mint(claims: &Value) -> String {
    mint_with(&Header::default(), JWT_SECRET, claims)
}

/// A valid token of tenant `tenant`, project `p`.
pub fn tenant_token(tenant: &str) -> String {
    mint(&claims(tenant, "p"))
}
