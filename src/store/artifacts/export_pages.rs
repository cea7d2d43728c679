//! Pages of stored messages for an export: the rows of one page copied into a single text
//! buffer with the spans of their columns, so reading a page costs one allocation, not
//! one per column, and the JSON columns go to the encoder as the text they are stored as.
//!
//! On PostgreSQL a page is read with `COPY (SELECT …) TO STDOUT`, the server's bulk path
//! (text format, parsed here), which streams rows about twice as fast as the row protocol;
//! SQLite reads the same query row by row. Pages the consumer is done with come back
//! ([`SparePages`]) and are filled again, so a long export reuses a few buffers instead of
//! having the allocator map (and the kernel fault in) fresh megabytes per page.

use futures::TryStreamExt as _;
use sqlx::{AssertSqlSafe, Row as _};

use super::export_filter::{self, literal};
use crate::store::spares::Spares;
use crate::store::{Db, Engine, StoreError, StoreResult};
use context_jobs::artifact::StoredColumns;
use context_jobs::contract::ExportFilter;
use context_jobs::ids::TenantKey;

/// Text columns kept per row, in this order.
const CONVERSATION: usize = 0;
const ID: usize = 1;
const ROLE: usize = 2;
const SCOPE: usize = 3;
const CONTENT: usize = 4;
const NAME: usize = 5;
const TOOL_CALL_ID: usize = 6;
const METADATA: usize = 7;

struct PageRow {
    spans: [Option<(u32, u32)>; 8],
    sequence: i64,
    created_at_ms: i64,
}

/// One page of messages in export order.
#[derive(Default)]
pub struct StoredPage {
    text: String,
    rows: Vec<PageRow>,
}

/// One row of a [`StoredPage`], borrowed.
pub struct StoredRow<'a> {
    pub conversation_id: &'a str,
    pub sequence: i64,
    pub columns: StoredColumns<'a>,
}

impl StoredPage {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn rows(&self) -> impl Iterator<Item = StoredRow<'_>> {
        self.rows.iter().map(|row| {
            let text = |i: usize| row.spans[i].map(|(start, end)| &self.text[start as usize..end as usize]);
            StoredRow {
                conversation_id: text(CONVERSATION).unwrap_or_default(),
                sequence: row.sequence,
                columns: StoredColumns {
                    id: text(ID).unwrap_or_default(),
                    scope: text(SCOPE).unwrap_or_default(),
                    role: text(ROLE).unwrap_or_default(),
                    content: text(CONTENT).unwrap_or_default(),
                    name: text(NAME),
                    tool_call_id: text(TOOL_CALL_ID),
                    sequence: row.sequence,
                    created_at_ms: row.created_at_ms,
                    metadata: text(METADATA),
                },
            }
        })
    }

    /// The page emptied, its buffers kept.
    fn cleared(mut self) -> Self {
        self.text.clear();
        self.rows.clear();
        self
    }

    /// `(conversation_id, sequence)` of the last row: where the next page starts.
    pub fn last_position(&self) -> Option<(String, i64)> {
        self.rows().last().map(|r| (r.conversation_id.to_string(), r.sequence))
    }

    fn push(&mut self, fields: [Option<&str>; 8], sequence: i64, created_at_ms: i64) {
        let mut spans = [None; 8];
        for (span, field) in spans.iter_mut().zip(fields) {
            *span = field.map(|f| {
                let start = self.text.len() as u32;
                self.text.push_str(f);
                (start, self.text.len() as u32)
            });
        }
        self.rows.push(PageRow { spans, sequence, created_at_ms });
    }
}

/// Pages handed back by the consumer of [`for_each_page`], for the reader to fill again
/// (it fills one page at a time).
pub type SparePages = Spares<StoredPage, 2>;

/// An empty page to fill: a spare one when there is one.
fn empty_page(spares: &SparePages) -> StoredPage {
    spares.take().map(StoredPage::cleared).unwrap_or_default()
}

/// A page is also cut once its text reaches this many bytes, so a tenant of large messages
/// (up to the 8 MiB an append allows) keeps a page — and the few the reader holds ahead —
/// to a few megabytes, as small messages do (5,000 of ~200 bytes: ~1 MiB). It also keeps a
/// page's text far below the `u32` spans' 4 GiB.
pub const PAGE_BYTES: usize = 4 << 20;

const SELECT: &str = "SELECT conversation_id, id, role, scope, content, name, tool_call_id, metadata, sequence, \
     created_at_ms FROM messages";

/// The tenant's messages in export order — conversation id, then sequence — after the
/// position `(conversation_id, sequence)`, handed to `deliver` in pages of `page_rows`
/// (or fewer, reaching [`PAGE_BYTES`]) until it returns `false` or the messages end.
///
/// PostgreSQL: one `COPY … TO STDOUT` streams them all; the server keeps producing while
/// pages are handed over, and waits (TCP backpressure) when `deliver` does. A consumer that
/// stops early closes the connection rather than leave unread COPY data in the pool.
/// SQLite: one query per page (a read transaction held for a whole export would keep the
/// WAL from being checkpointed).
pub async fn for_each_page<F, Fut>(
    db: &Db,
    tenant: &TenantKey,
    filter: &ExportFilter,
    after: Option<(&str, i64)>,
    page_rows: usize,
    spares: &SparePages,
    mut deliver: F,
) -> StoreResult<()>
where
    F: FnMut(StoredPage) -> Fut,
    Fut: Future<Output = bool>,
{
    let (after_conversation, after_sequence) = after.unwrap_or(("", i64::MIN));
    let page_rows = page_rows.max(1);
    let and = export_filter::predicate(db.engine(), tenant, filter);
    match db {
        Db::Postgres(pool) => {
            // COPY takes no parameters: the three values are written as escaped literals.
            let sql = format!(
                "COPY ({SELECT} WHERE tenant = {} AND (conversation_id, sequence) > ({}, {after_sequence}){and} \
                 ORDER BY conversation_id ASC, sequence ASC) TO STDOUT",
                literal(Engine::Postgres, tenant.as_str()),
                literal(Engine::Postgres, after_conversation),
            );
            let mut conn = pool.acquire().await?;
            let mut stream = conn.copy_out_raw(&sql).await?;
            let mut builder = CopyPage::default();
            while let Some(data) = stream.try_next().await? {
                builder.feed(&data)?;
                let full = builder.rows.len() >= page_rows || builder.text.len() >= PAGE_BYTES;
                if full && !deliver(builder.take_page(empty_page(spares))?).await {
                    drop(stream);
                    conn.close_on_drop();
                    return Ok(());
                }
            }
            let last = builder.take_page(StoredPage::default())?;
            if !builder.partial.is_empty() {
                return Err(StoreError::Other(anyhow::anyhow!("the COPY data ended inside a row")));
            }
            if !last.is_empty() {
                deliver(last).await;
            }
            Ok(())
        }
        Db::Sqlite(pool) => {
            let sql = format!(
                "{SELECT} WHERE tenant = $1 AND (conversation_id, sequence) > ($2, $3){and} \
                 ORDER BY conversation_id ASC, sequence ASC LIMIT {page_rows}"
            );
            let mut position = (after_conversation.to_string(), after_sequence);
            loop {
                let mut page = empty_page(spares);
                let mut rows = sqlx::query(AssertSqlSafe(sql.as_str()))
                    .bind(tenant.as_str())
                    .bind(position.0.as_str())
                    .bind(position.1)
                    .fetch(pool);
                let mut bytes_full = false;
                while let Some(row) = rows.try_next().await? {
                    let mut fields: [Option<&str>; 8] = [None; 8];
                    for (i, field) in fields.iter_mut().enumerate() {
                        *field = row.try_get(i)?;
                    }
                    page.push(fields, row.try_get(8)?, row.try_get(9)?);
                    if page.text.len() >= PAGE_BYTES {
                        bytes_full = true; // the next page starts after this row
                        break;
                    }
                }
                drop(rows);
                let Some(last) = page.last_position() else { return Ok(()) };
                let full = page.len() >= page_rows || bytes_full;
                if !deliver(page).await || !full {
                    return Ok(());
                }
                position = last;
            }
        }
    }
}

/// Builds a [`StoredPage`] from `COPY … TO STDOUT` text-format data: rows end with `\n`,
/// fields are separated by tabs, `\N` is NULL, and backslash escapes stand for the
/// characters the format reserves.
#[derive(Default)]
struct CopyPage {
    text: Vec<u8>,
    rows: Vec<PageRow>,
    /// A row split across two messages (the server sends one row per message, but the
    /// protocol does not promise it).
    partial: Vec<u8>,
}

impl CopyPage {
    fn feed(&mut self, mut data: &[u8]) -> StoreResult<()> {
        // The server sends one row per message: take it whole when it is one.
        if self.partial.is_empty() && data.last() == Some(&b'\n') {
            return self.row(&data[..data.len() - 1]);
        }
        while let Some(end) = memchr::memchr(b'\n', data) {
            if self.partial.is_empty() {
                self.row(&data[..end])?;
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&data[..end]);
                self.row(&line)?;
            }
            data = &data[end + 1..];
        }
        self.partial.extend_from_slice(data);
        Ok(())
    }

    /// One row: ten tab-separated fields, unescaped into the page text in one pass.
    fn row(&mut self, line: &[u8]) -> StoreResult<()> {
        let bad = || StoreError::Other(anyhow::anyhow!("unexpected COPY row from the messages export query"));
        let mut spans = [None; 8];
        let mut numbers = [0i64; 2];
        let mut rest = line;
        for column in 0..10 {
            let last = column == 9;
            if rest.starts_with(b"\\N") && (rest.len() == 2 || rest[2] == b'\t') {
                // NULL: the whole field is `\N`.
                if column >= 8 || (last && rest.len() != 2) {
                    return Err(bad());
                }
                rest = &rest[rest.len().min(3)..];
                continue;
            }
            let start = self.text.len();
            // Copy the runs between tabs and backslashes, undoing each escape as it comes.
            let ended_by_tab = loop {
                match memchr::memchr2(b'\t', b'\\', rest) {
                    Some(at) if rest[at] == b'\\' => {
                        self.text.extend_from_slice(&rest[..at]);
                        rest = unescape_one(&mut self.text, &rest[at + 1..]);
                    }
                    Some(at) => {
                        self.text.extend_from_slice(&rest[..at]);
                        rest = &rest[at + 1..];
                        break true;
                    }
                    None => {
                        self.text.extend_from_slice(rest);
                        rest = &[];
                        break false;
                    }
                }
            };
            if ended_by_tab == last {
                return Err(bad());
            }
            if column < 8 {
                spans[column] = Some((start as u32, self.text.len() as u32));
            } else {
                let digits = std::str::from_utf8(&self.text[start..]).ok();
                numbers[column - 8] = digits.and_then(|d| d.parse().ok()).ok_or_else(bad)?;
                self.text.truncate(start);
            }
        }
        self.rows.push(PageRow { spans, sequence: numbers[0], created_at_ms: numbers[1] });
        Ok(())
    }

    /// The rows so far as a page; a partial row stays for the next, which is built in the
    /// buffers of `next` (an empty page).
    fn take_page(&mut self, next: StoredPage) -> StoreResult<StoredPage> {
        let text = String::from_utf8(std::mem::replace(&mut self.text, next.text.into_bytes()))
            .map_err(|e| StoreError::Other(anyhow::anyhow!("COPY data is not UTF-8: {e}")))?;
        Ok(StoredPage { text, rows: std::mem::replace(&mut self.rows, next.rows) })
    }
}

/// Undo one COPY text-format escape; `after` follows the backslash. Returns the rest.
fn unescape_one<'a>(out: &mut Vec<u8>, after: &'a [u8]) -> &'a [u8] {
    let Some(&c) = after.first() else { return after };
    let octal = |d: &&u8| (b'0'..=b'7').contains(*d);
    match c {
        b'b' => out.push(0x08),
        b'f' => out.push(0x0c),
        b'n' => out.push(b'\n'),
        b'r' => out.push(b'\r'),
        b't' => out.push(b'\t'),
        b'v' => out.push(0x0b),
        b'0'..=b'7' => {
            let digits = after.iter().take(3).take_while(octal).count();
            out.push(after[..digits].iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0')) as u8);
            return &after[digits..];
        }
        b'x' => {
            let digits = after[1..].iter().take(2).take_while(|d| d.is_ascii_hexdigit()).count();
            let hex = std::str::from_utf8(&after[1..1 + digits]).unwrap_or("");
            out.push(u8::from_str_radix(hex, 16).unwrap_or(b'x'));
            return &after[1 + digits..];
        }
        other => out.push(other),
    }
    &after[1..]
}

/// Append `field` with its COPY text-format escapes undone.
#[cfg(test)]
fn unescape_into(out: &mut Vec<u8>, mut field: &[u8]) {
    while let Some(at) = memchr::memchr(b'\\', field) {
        out.extend_from_slice(&field[..at]);
        field = unescape_one(out, &field[at + 1..]);
    }
    out.extend_from_slice(field);
}

#[cfg(test)]
#[path = "export_pages_tests.rs"]
mod tests;
