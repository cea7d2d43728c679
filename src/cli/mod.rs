//! `context-ops op …`: the command-line client of a running service, in the service's own
//! binary (one build, one release artifact, the same contract DTOs on both sides of the
//! wire). It talks HTTP only, like any client: `--url`, a bearer credential from flags or
//! the variables the service itself reads, `--json` for scripts, progress bars for people,
//! and exit codes a script can branch on ([`exit::Exit`]; `docs/cli.md`).
//!
//! - [`args`]: the command line; [`client`]: HTTP and errors; [`exit`]: exit codes;
//! - [`submit`] and [`ops`]: operations; [`follow`]: waiting on the event stream with a
//!   long-poll fallback; [`progress`]: bars; [`sse`]: the event-stream parser;
//! - [`transfer`]: artifact download and upload; [`messages`]: append, recent, search;
//!   [`output`]: what is printed.

pub mod args;
pub mod client;
pub mod exit;
pub mod follow;
pub mod messages;
pub mod ops;
pub mod output;
pub mod progress;
pub mod sse;
pub mod submit;
pub mod transfer;

use std::process::ExitCode;

use args::{OpArgs, OpCommand, SubmitCommon};
use client::Client;
use exit::{CliResult, Exit};

/// What every command runs with.
pub struct Ctx {
    pub client: Client,
    pub json: bool,
}

/// Run one `op` command; print a failure as one line on stderr.
pub async fn run(args: OpArgs) -> ExitCode {
    match dispatch(args).await {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("context-ops: {e}");
            e.exit().into()
        }
    }
}

async fn dispatch(args: OpArgs) -> CliResult<Exit> {
    let ctx = Ctx { client: Client::new(&args.connection.url, args.connection.credential())?, json: args.json };
    match args.command {
        OpCommand::Submit(kind) => submit::run(&ctx, *kind).await,
        OpCommand::Get(a) => ops::get(&ctx, &a.id).await,
        OpCommand::Wait(a) => ops::wait(&ctx, &a.id, a.timeout).await,
        OpCommand::List(a) => ops::list(&ctx, &a).await,
        OpCommand::Cancel(a) => ops::cancel(&ctx, &a.id).await,
        OpCommand::Retry(a) => ops::retry(&ctx, &a).await,
        OpCommand::Forget(a) => ops::forget(&ctx, &a.id).await,
        OpCommand::Download(a) => transfer::download(&ctx, &a).await,
        OpCommand::Upload(a) => transfer::upload(&ctx, &a).await,
        OpCommand::Import(a) => {
            let source = args::ImportSource {
                artifact: None,
                file: Some(a.file),
                prefix: a.prefix,
                map: a.map,
                chunk_size: a.chunk_size,
            };
            let common = SubmitCommon { idempotency_key: a.idempotency_key, ..SubmitCommon::default() };
            let id = submit::import(&ctx, &source, &common).await?;
            ops::wait(&ctx, &id, a.wait_timeout).await
        }
        OpCommand::Append(a) => messages::append(&ctx, &a).await,
        OpCommand::Recent(a) => messages::recent(&ctx, &a).await,
        OpCommand::Search(a) => messages::search(&ctx, &a).await,
    }
}
