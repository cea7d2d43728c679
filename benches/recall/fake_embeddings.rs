//! An OpenAI-compatible `/v1/embeddings` server on 127.0.0.1 for the recall benchmark's
//! `BENCH_RECALL_EMBEDDER=openai` runs: it answers with the hashing embedder's vectors,
//! so the only difference from the built-in embedder is the HTTP and JSON round trip — a
//! stand-in for a remote model, and far faster than one.

use axum::Json;
use axum::routing::post;
use context_jobs::embed::hashing_embed;
use serde_json::{Value, json};

async fn embeddings(Json(body): Json<Value>) -> Json<Value> {
    let dim = body["dimensions"].as_u64().unwrap_or(256) as usize;
    let inputs = body["input"].as_array().cloned().unwrap_or_default();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": hashing_embed(t.as_str().unwrap_or(""), dim)}))
        .collect();
    Json(json!({"object": "list", "data": data, "model": body["model"]}))
}

/// Start the server; its base URL.
pub async fn start() -> anyhow::Result<String> {
    let app = axum::Router::new().route("/v1/embeddings", post(embeddings));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}"))
}
