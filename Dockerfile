# syntax=docker/dockerfile:1
#
# context-ops: one image for every role (`serve`, `api`, `worker`, `migrate`).
#   docker build -t context-ops .
#   docker run -p 5120:5120 -e AGENT_CONTEXT_SERVICE_TOKEN=s3cret -v context-ops-data:/var/lib/context-ops context-ops
#     embedded mode: SQLite in the /var/lib/context-ops volume. Without a token the service
#     refuses to start on 0.0.0.0 (open mode) unless CONTEXT_OPS_ALLOW_OPEN=true.

# ---- build ---------------------------------------------------------------------------
FROM rust:1.95-bookworm AS builder
WORKDIR /src

# Only what the build reads (the manifest names the bench target, so its file comes too).
COPY Cargo.toml Cargo.lock ./
COPY jobs ./jobs
COPY src ./src
COPY migrations ./migrations
COPY benches ./benches

RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin context-ops \
    && install -m 0755 target/release/context-ops /usr/local/bin/context-ops

# ---- runtime -------------------------------------------------------------------------
FROM debian:bookworm-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 context-ops \
    && useradd --system --uid 10001 --gid context-ops --home-dir /var/lib/context-ops \
        --create-home --shell /usr/sbin/nologin context-ops

COPY --from=builder /usr/local/bin/context-ops /usr/local/bin/context-ops

USER 10001:10001
# The default DATABASE_URL (sqlite:context-ops.sqlite) is relative to this directory.
WORKDIR /var/lib/context-ops

# The embedded database (and anything else the process keeps) lives here.
VOLUME ["/var/lib/context-ops"]

ENV CONTEXT_OPS_BIND=0.0.0.0:5120
# 5120: the API. 9464: the metrics listener when CONTEXT_OPS_METRICS_BIND=0.0.0.0:9464.
EXPOSE 5120 9464

# `context-ops health` asks the process's own /health/ready (no curl in the image).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s CMD ["context-ops", "health"]

ENTRYPOINT ["context-ops"]
CMD ["serve"]
