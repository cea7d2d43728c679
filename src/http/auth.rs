//! Who is calling, and which tenant that makes them. Three modes: open (no secret: one
//! default tenant, warned about loudly at startup), a static bearer token, and HS256 JWTs
//! issued by a gateway (audience `agent-context-infra`, tenant/project/subject claims).
//! Both secrets may be configured at once; a request passes with either.
//!
//! Admin powers (pausing a kind, bulk actions, other tenants' operations) need an admin
//! credential: the separate admin token (`CONTEXT_OPS_ADMIN_TOKEN`, tenant
//! `default/default`), or a JWT with the claim `"admin": true`. Open mode has no
//! credentials at all, so everything is allowed there (local use only).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use secrecy::{ExposeSecret as _, SecretString};
use subtle::ConstantTimeEq as _;

use super::AppState;
use super::error::AppError;
use crate::config::AuthConfig;
use context_jobs::contract::{AUDIENCE, AuthorizedScope, validate_resource_id};
use context_jobs::ids::TenantKey;

/// A verified caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub scope: AuthorizedScope,
    pub tenant: TenantKey,
    /// Holds an admin credential.
    pub admin: bool,
}

impl Caller {
    /// `403` unless the caller holds an admin credential.
    pub fn require_admin(&self) -> Result<(), AppError> {
        if self.admin { Ok(()) } else { Err(AppError::Forbidden("this needs an admin credential".into())) }
    }

    /// Whose operations a request names (`tenant=`): the caller's own by default; another
    /// tenant (`tenantId/projectId`) or every tenant (`*`, answered `None`) needs an admin.
    pub fn scope(&self, tenant: Option<&str>) -> Result<Option<TenantKey>, AppError> {
        match tenant {
            None => Ok(Some(self.tenant.clone())),
            Some(t) if t == self.tenant.as_str() => Ok(Some(self.tenant.clone())),
            Some(t) => {
                self.require_admin()?;
                if t == "*" { Ok(None) } else { parse_tenant(t).map(Some) }
            }
        }
    }
}

/// A tenant named on the wire: `tenantId/projectId`, each a valid resource id.
pub fn parse_tenant(t: &str) -> Result<TenantKey, AppError> {
    let (tenant_id, project_id) =
        t.split_once('/').ok_or_else(|| AppError::BadRequest("tenant must be tenantId/projectId".into()))?;
    validate_resource_id("tenant", tenant_id).map_err(AppError::BadRequest)?;
    validate_resource_id("project", project_id).map_err(AppError::BadRequest)?;
    Ok(TenantKey::new(tenant_id, project_id))
}

#[derive(Deserialize)]
struct Claims {
    #[serde(alias = "tenantId")]
    tenant_id: String,
    #[serde(alias = "projectId")]
    project_id: String,
    sub: String,
    #[serde(default)]
    admin: bool,
}

pub struct Authenticator {
    token: Option<SecretString>,
    admin_token: Option<SecretString>,
    jwt: Option<(DecodingKey, Validation)>,
}

impl Authenticator {
    pub fn new(config: &AuthConfig) -> anyhow::Result<Self> {
        let token = config.service_token.clone();
        let admin_token = config.admin_token.clone();
        let jwt = match config.jwt_secret.as_ref().map(|s| s.expose_secret()) {
            None => None,
            Some(secret) => {
                let mut validation = Validation::new(Algorithm::HS256);
                validation.set_audience(&[AUDIENCE]);
                validation.set_required_spec_claims(&["exp", "aud", "sub"]);
                // `nbf`, when present, is checked with the same leeway as `exp`.
                validation.validate_nbf = true;
                let key = DecodingKey::from_secret(secret.as_bytes())
                    .map_err(|e| anyhow::anyhow!("invalid CONTEXT_OPS_JWT_SECRET: {e}"))?;
                Some((key, validation))
            }
        };
        Ok(Self { token, admin_token, jwt })
    }

    pub fn is_open(&self) -> bool {
        self.token.is_none() && self.jwt.is_none() && self.admin_token.is_none()
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
            return Ok(default_caller("open", true));
        }
        let presented = header
            .and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| AppError::Unauthorized("missing bearer credentials".into()))?;
        let matches = |t: &Option<SecretString>| {
            t.as_ref().is_some_and(|t| bool::from(t.expose_secret().as_bytes().ct_eq(presented.as_bytes())))
        };
        if matches(&self.admin_token) {
            return Ok(default_caller("admin-token", true));
        }
        if matches(&self.token) {
            return Ok(default_caller("service-token", false));
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
            context_jobs::contract::nul::check_text("sub", &c.sub)
                .map_err(|e| AppError::Unauthorized(format!("invalid credentials: {e}")))?;
            // `default/default` is the open/static-token tenant; a JWT may not claim it.
            if TenantKey::new(&c.tenant_id, &c.project_id) == TenantKey::default_tenant() {
                return Err(AppError::Unauthorized("invalid credentials: tenant default/default is reserved".into()));
            }
            return Ok(Caller {
                tenant: TenantKey::new(&c.tenant_id, &c.project_id),
                admin: c.admin,
                scope: AuthorizedScope { tenant_id: c.tenant_id, project_id: c.project_id, subject: c.sub },
            });
        }
        Err(AppError::Unauthorized("invalid bearer credentials".into()))
    }
}

fn default_caller(subject: &str, admin: bool) -> Caller {
    Caller {
        scope: AuthorizedScope { tenant_id: "default".into(), project_id: "default".into(), subject: subject.into() },
        tenant: TenantKey::default_tenant(),
        admin,
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let header = parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        state.auth.verify(header)
    }
}
