//! Who is calling, and which tenant that makes them. Three modes: open (no secret: one
//! default tenant, warned about loudly at startup), a static bearer token, and HS256 JWTs
//! issued by a gateway (audience `agent-context-infra`, tenant/project/subject claims).
//! Both secrets may be configured at once; a request passes with either.

use std::fmt;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::app::AppState;
use crate::error::AppError;
use context_jobs::contract::{AUDIENCE, AuthorizedScope, validate_resource_id};

/// The tenant key every row and query is scoped by: `"{tenantId}/{projectId}"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantKey(String);

impl TenantKey {
    pub fn new(tenant_id: &str, project_id: &str) -> Self {
        Self(format!("{tenant_id}/{project_id}"))
    }
    /// The single tenant of open and static-token mode.
    pub fn default_tenant() -> Self {
        Self::new("default", "default")
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// For values read back from the database.
    pub fn from_stored(s: String) -> Self {
        Self(s)
    }
}

impl fmt::Display for TenantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A verified caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub scope: AuthorizedScope,
    pub tenant: TenantKey,
}

#[derive(Deserialize)]
struct Claims {
    #[serde(alias = "tenantId")]
    tenant_id: String,
    #[serde(alias = "projectId")]
    project_id: String,
    sub: String,
}

pub struct Authenticator {
    token: Option<String>,
    jwt: Option<(DecodingKey, Validation)>,
}

impl Authenticator {
    pub fn new(token: Option<String>, jwt_secret: Option<&str>) -> anyhow::Result<Self> {
        let jwt = match jwt_secret {
            None => None,
            Some(secret) => {
                let mut validation = Validation::new(Algorithm::HS256);
                validation.set_audience(&[AUDIENCE]);
                validation.set_required_spec_claims(&["exp", "aud", "sub"]);
                let key = DecodingKey::from_secret(secret.as_bytes())
                    .map_err(|e| anyhow::anyhow!("invalid CONTEXT_OPS_JWT_SECRET: {e}"))?;
                Some((key, validation))
            }
        };
        Ok(Self { token, jwt })
    }

    pub fn is_open(&self) -> bool {
        self.token.is_none() && self.jwt.is_none()
    }

    pub fn mode(&self) -> &'static str {
        match (&self.token, &self.jwt) {
            (None, None) => "open",
            (Some(_), None) => "static-token",
            (None, Some(_)) => "jwt",
            (Some(_), Some(_)) => "static-token+jwt",
        }
    }

    /// Verify an `Authorization` header value.
    pub fn verify(&self, header: Option<&str>) -> Result<Caller, AppError> {
        if self.is_open() {
            return Ok(default_caller("open"));
        }
        let presented = header
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| AppError::Unauthorized("missing bearer credentials".into()))?;
        if let Some(token) = &self.token
            && constant_time_eq(token.as_bytes(), presented.as_bytes())
        {
            return Ok(default_caller("service-token"));
        }
        if let Some((key, validation)) = &self.jwt
            && let Ok(data) = jsonwebtoken::decode::<Claims>(presented, key, validation)
        {
            let c = data.claims;
            for (what, v) in [("tenant_id", &c.tenant_id), ("project_id", &c.project_id)] {
                validate_resource_id(what, v)
                    .map_err(|e| AppError::Unauthorized(format!("invalid credentials: {e}")))?;
                if v.contains('/') {
                    return Err(AppError::Unauthorized(format!("invalid credentials: {what} must not contain '/'")));
                }
            }
            // `default/default` is the open/static-token tenant; a JWT may not claim it.
            if TenantKey::new(&c.tenant_id, &c.project_id) == TenantKey::default_tenant() {
                return Err(AppError::Unauthorized("invalid credentials: tenant default/default is reserved".into()));
            }
            return Ok(Caller {
                tenant: TenantKey::new(&c.tenant_id, &c.project_id),
                scope: AuthorizedScope { tenant_id: c.tenant_id, project_id: c.project_id, subject: c.sub },
            });
        }
        Err(AppError::Unauthorized("invalid bearer credentials".into()))
    }
}

fn default_caller(subject: &str) -> Caller {
    Caller {
        scope: AuthorizedScope { tenant_id: "default".into(), project_id: "default".into(), subject: subject.into() },
        tenant: TenantKey::default_tenant(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let header = parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        state.auth.verify(header)
    }
}

pub type SharedAuth = Arc<Authenticator>;
