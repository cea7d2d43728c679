//! Messages for quick inspection: `append FILE.jsonl` (batched like the API's limits),
//! `recent`, `search`.

use std::io::BufRead as _;

use super::args::{AppendArgs, RecentArgs, SearchArgs};
use super::exit::{CliError, CliResult, Exit};
use super::{Ctx, output};
use context_jobs::contract::{
    AppendMessagesRequest, AppendResponse, ConversationRecord, ConversationScope, MAX_APPEND_BYTES,
    MAX_APPEND_MESSAGES, MESSAGES_APPEND_PATH, MESSAGES_RECENT_PATH, MESSAGES_SEARCH_PATH, MessagesResponse,
    RecentMessagesRequest, SearchMessagesRequest,
};

pub async fn append(ctx: &Ctx, args: &AppendArgs) -> CliResult<Exit> {
    if args.batch == 0 || args.batch > MAX_APPEND_MESSAGES {
        return Err(CliError::Usage(format!("--batch must be 1..={MAX_APPEND_MESSAGES}")));
    }
    let name = args.file.display().to_string();
    let reader: Box<dyn std::io::BufRead> = if name == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(&args.file).map_err(CliError::io(format!("cannot open {name}")))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut total = AppendResponse::default();
    let mut batch = Vec::new();
    // Bytes of the batch as sent (the service's limit is on the request body).
    let mut batch_bytes = 0;
    for (n, line) in reader.lines().enumerate() {
        let line = line.map_err(CliError::io(format!("cannot read {name}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: ConversationRecord = serde_json::from_str(&line)
            .map_err(|e| CliError::Usage(format!("{name}:{}: not a ConversationRecord: {e}", n + 1)))?;
        // Counted as it is sent, not as the line read: the record gains the fields the
        // line left out (`sequence`, `createdAtMs`: ~30 bytes each, 15 KB over 500).
        let sent = serde_json::to_vec(&record).map_or(line.len(), |bytes| bytes.len());
        if batch.len() == args.batch || (!batch.is_empty() && batch_bytes + sent + ENVELOPE_BYTES > MAX_APPEND_BYTES) {
            send(ctx, std::mem::take(&mut batch), &mut total).await?;
            batch_bytes = 0;
        }
        batch_bytes += sent + 1;
        batch.push(record);
    }
    if !batch.is_empty() {
        send(ctx, batch, &mut total).await?;
    }
    if ctx.json {
        output::json(&total);
    } else {
        println!("appended {}, skipped {} (already stored)", total.appended, total.skipped);
    }
    Ok(Exit::Ok)
}

/// `{"messages":[` and `]}` around a batch's records.
const ENVELOPE_BYTES: usize = 16;

async fn send(ctx: &Ctx, messages: Vec<ConversationRecord>, total: &mut AppendResponse) -> CliResult<()> {
    let reply: AppendResponse = ctx.client.post(MESSAGES_APPEND_PATH, &AppendMessagesRequest { messages }).await?;
    total.appended += reply.appended;
    total.skipped += reply.skipped;
    Ok(())
}

fn show(ctx: &Ctx, reply: &MessagesResponse) {
    if ctx.json { output::json(reply) } else { output::messages(&reply.items) }
}

pub async fn recent(ctx: &Ctx, args: &RecentArgs) -> CliResult<Exit> {
    let request = RecentMessagesRequest {
        scope: ConversationScope::conversation(args.conversation.clone()),
        limit: args.limit,
        roles: args.roles.clone(),
    };
    let reply: MessagesResponse = ctx.client.post(MESSAGES_RECENT_PATH, &request).await?;
    show(ctx, &reply);
    Ok(Exit::Ok)
}

pub async fn search(ctx: &Ctx, args: &SearchArgs) -> CliResult<Exit> {
    let request = SearchMessagesRequest {
        scope: ConversationScope::conversation(args.conversation.clone()),
        query: Some(args.query.clone()),
        role: args.role.clone(),
        limit: args.limit,
    };
    let reply: MessagesResponse = ctx.client.post(MESSAGES_SEARCH_PATH, &request).await?;
    show(ctx, &reply);
    Ok(Exit::Ok)
}
