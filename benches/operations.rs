//! Operations engine figures, each beside a baseline measured in the same run.
//!
//! `cargo bench --bench operations` (release mode; PostgreSQL + Redis)
//!
//! (a) `BENCH_OPERATIONS` (default 5,000) deletes of empty conversations submitted over
//!     HTTP by 8 clients, until all succeeded — beside the bare apalis-redis loop (our queue
//!     module, no database) on the same Redis; beside PostgreSQL's floor (each operation's
//!     insert, claim and finish as three plain statements, 8 connections, no service); and
//!     the machine's CPU time per item on each side (steal excluded: steadier than rates
//!     on a shared host).
//! (b) A delete of `BENCH_DELETE_MESSAGES` (default 1,000,000) messages beside one
//!     `DELETE … WHERE conversation_id = …` on an identical copy.
//! (c) Submit → succeeded of one empty operation at a time, `BENCH_LATENCY_SAMPLES`
//!     (default 500): p50/p99 beside the bare queue's push → handled round trip.
//! (d) Fairness: tenant B's delete behind `BENCH_FAIRNESS_BACKLOG` (default 10,000) of
//!     tenant A's — resume → B done, beside resume → A's backlog drained (FIFO's wait);
//!     and how long A's backlog took to submit into the pause (machine CPU per submission).
//! (e) SIGKILL recovery with the default settings (the real binary, `BENCH_RECOVERY_MESSAGES`
//!     default 1,000,000: batches grow while quick, so a smaller delete can end before the
//!     kill) beside the default lease.
//!
//! Environment: `BENCH_POSTGRES_URL` (server URL, default `postgres://postgres@127.0.0.1:5432`),
//! `BENCH_POSTGRES_PARAMS` (connection parameters, default `sslmode=disable`; see
//! `common::fresh_schema`), `BENCH_REDIS_URL` (default `redis://127.0.0.1:6379`),
//! `BENCH_ONLY` (letters, e.g. `cd`).

#[path = "operations/common.rs"]
mod common;
#[path = "operations/delete.rs"]
mod delete;
#[path = "operations/fairness.rs"]
mod fairness;
#[path = "operations/latency.rs"]
mod latency;
#[path = "shared/machine_cpu.rs"]
mod machine_cpu;
#[path = "operations/recovery.rs"]
mod recovery;
#[path = "operations/throughput.rs"]
mod throughput;

use common::env_or;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let server = env_or("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432");
    let redis = env_or("BENCH_REDIS_URL", "redis://127.0.0.1:6379");
    let only = env_or("BENCH_ONLY", "abcde");
    let run = |figure: char| only.contains(figure);

    if run('a') {
        let n: usize = env_or("BENCH_OPERATIONS", "5000").parse()?;
        let bare = throughput::bare_queue(&redis, &server, n).await?;
        let floor = throughput::postgres_floor(&server, n).await?;
        let ours = throughput::engine(&redis, &server, n).await?;
        println!("(a) {n} operations, PostgreSQL + Redis, 8 clients");
        println!("    bare apalis-redis loop : {:>10.0} jobs/s", bare.per_sec);
        println!(
            "    PostgreSQL floor       : {:>10.0} ops/s   ÷ bare {:.2} (insert, claim, finish alone)",
            floor.per_sec,
            floor.per_sec / bare.per_sec
        );
        println!(
            "    context-ops operations : {:>10.0} ops/s   ratio {:.2} (goal >= 0.5), ÷ floor {:.2}",
            ours.per_sec,
            ours.per_sec / bare.per_sec,
            ours.per_sec / floor.per_sec
        );
        if let (Some(bare), Some(floor), Some(ours)) = (bare.cpu_ms, floor.cpu_ms, ours.cpu_ms) {
            println!(
                "    machine CPU per item   : bare {bare:.2} ms, floor {floor:.2} ms, ours {ours:.2} ms   ratio {:.2} (steal excluded)",
                bare / ours
            );
        }
    }
    if run('b') {
        let m: i64 = env_or("BENCH_DELETE_MESSAGES", "1000000").parse()?;
        let (ours, server_side, baseline) = delete::delete(&redis, &server, m).await?;
        println!("(b) delete of {m} messages, PostgreSQL");
        println!("    one DELETE statement   : {baseline:>10.2} s ({:.0} rows/s)", m as f64 / baseline);
        println!(
            "    delete operation       : {server_side:>10.2} s ({:.0} rows/s)   ratio {:.2} (goal >= 0.8), server-side",
            m as f64 / server_side,
            baseline / server_side
        );
        println!("    as the client saw it   : {ours:>10.2} s   ratio {:.2}", baseline / ours);
    }
    if run('c') {
        let n: usize = env_or("BENCH_LATENCY_SAMPLES", "500").parse()?;
        let bare = latency::bare_round_trip(&redis, &server, n).await?;
        let ours = latency::submit_to_done(&redis, &server, n).await?;
        println!("(c) one at a time, {n} samples, PostgreSQL + Redis");
        println!("    bare push -> handled   : p50 {:>7.2} ms   p99 {:>7.2} ms", bare.p50_ms, bare.p99_ms);
        println!(
            "    submit -> succeeded    : p50 {:>7.2} ms   p99 {:>7.2} ms   (goal p50 <= 10, p99 <= 50; {:.1}x / {:.1}x the bare queue)",
            ours.p50_ms,
            ours.p99_ms,
            ours.p50_ms / bare.p50_ms,
            ours.p99_ms / bare.p99_ms
        );
    }
    if run('d') {
        let n: usize = env_or("BENCH_FAIRNESS_BACKLOG", "10000").parse()?;
        let f = fairness::behind_backlog(&redis, &server, n).await?;
        println!("(d) tenant B's delete behind {n} of tenant A's, PostgreSQL + Redis");
        let cpu = f.submit_cpu_ms.map_or(String::new(), |ms| format!(", machine CPU {ms:.2} ms each"));
        println!("    (A's backlog submitted into the pause in {:.2} s{cpu})", f.backlog_submitted.as_secs_f64());
        println!("    resume -> A drained    : {:>10.2} s   (FIFO: B would finish here)", f.a_drained.as_secs_f64());
        println!(
            "    resume -> B started    : {:>10.3} s   ratio {:.4} of the drain (goal: within 1 s)",
            f.b_started.as_secs_f64(),
            f.b_started.as_secs_f64() / f.a_drained.as_secs_f64()
        );
        println!("    resume -> B succeeded  : {:>10.3} s", f.b_done.as_secs_f64());
    }
    if run('e') {
        let n: i64 = env_or("BENCH_RECOVERY_MESSAGES", "1000000").parse()?;
        let recovered = recovery::after_sigkill(&redis, &server, n).await?;
        let lease = recovery::default_lease();
        println!("(e) SIGKILL mid-delete ({n} messages), defaults, standby process up, PostgreSQL + Redis");
        println!(
            "    default lease          : {:>10.2} s   (recovery waited this before owner liveness)",
            lease.as_secs_f64()
        );
        println!(
            "    SIGKILL -> running     : {:>10.2} s   ratio {:.2} of the lease (goal <= 5 s)",
            recovered.as_secs_f64(),
            recovered.as_secs_f64() / lease.as_secs_f64()
        );
    }
    common::drop_namespaces(&redis).await
}
