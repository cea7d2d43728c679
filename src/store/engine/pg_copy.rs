//! PostgreSQL's binary `COPY` format, written into a buffer: the bulk path for rows that
//! need no conflict handling (new vectors, new messages). `COPY` inserts a page's worth of
//! tuples per WAL record where `INSERT … SELECT` logs one per row.
//!
//! Rows are streamed to the open `COPY` in pieces of [`COPY_PIECE`] bytes ([`CopyBinary::send_full`]):
//! the payload buffer, and the connection's write buffer it is copied into, stay reused
//! heap blocks below glibc's 128 KiB mapping threshold (`src/main.rs` fixes it). Built whole,
//! an import batch's payload (hundreds of KiB) was a fresh mapping faulted in page by page,
//! and so was the write buffer.

use sqlx::PgConnection;
use sqlx::postgres::PgCopyIn;

/// The bytes sent to the server at a time.
pub const COPY_PIECE: usize = 32 * 1024;

/// One `COPY … FROM STDIN (FORMAT binary)` payload.
pub struct CopyBinary {
    buf: Vec<u8>,
}

impl CopyBinary {
    /// A payload with its header; `capacity` is a guess of the bytes to come.
    pub fn new(capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(capacity + 21);
        buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        buf.extend_from_slice(&0i32.to_be_bytes()); // flags
        buf.extend_from_slice(&0i32.to_be_bytes()); // header extension length
        Self { buf }
    }

    /// A payload streamed with [`Self::send_full`]: room for a piece and the row that
    /// crosses its end, so the buffer is allocated once.
    pub fn streamed() -> Self {
        Self::new(COPY_PIECE + 4096)
    }

    /// Start a row of `fields` columns; the fields follow in table order.
    pub fn row(&mut self, fields: i16) -> &mut Self {
        self.buf.extend_from_slice(&fields.to_be_bytes());
        self
    }

    /// A `text` or `bytea` field.
    pub fn bytes(&mut self, value: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(&(value.len() as i32).to_be_bytes());
        self.buf.extend_from_slice(value);
        self
    }

    /// A nullable `text` field.
    pub fn opt_bytes(&mut self, value: Option<&[u8]>) -> &mut Self {
        match value {
            Some(value) => self.bytes(value),
            None => {
                self.buf.extend_from_slice(&(-1i32).to_be_bytes());
                self
            }
        }
    }

    /// A `bigint` field.
    pub fn int8(&mut self, value: i64) -> &mut Self {
        self.bytes(&value.to_be_bytes())
    }

    /// An `integer` field.
    pub fn int4(&mut self, value: i32) -> &mut Self {
        self.bytes(&value.to_be_bytes())
    }

    /// The length of a field whose `len` bytes the caller sends itself, after
    /// [`Self::take`]: a large value goes to the connection from where it lies.
    pub fn field_len(&mut self, len: usize) -> &mut Self {
        self.buf.extend_from_slice(&(len as i32).to_be_bytes());
        self
    }

    /// What has been written so far, to send now; the payload goes on empty.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// Send what has been written once it reaches [`COPY_PIECE`], keeping the buffer.
    pub async fn send_full(&mut self, sink: &mut PgCopyIn<&mut PgConnection>) -> Result<(), sqlx::Error> {
        if self.buf.len() >= COPY_PIECE {
            sink.send(self.buf.as_slice()).await?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Send the rest with the trailer and end the `COPY`: the rows it wrote.
    pub async fn send_rest(self, mut sink: PgCopyIn<&mut PgConnection>) -> Result<u64, sqlx::Error> {
        sink.send(self.finish()).await?;
        sink.finish().await
    }

    /// The payload with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(&(-1i16).to_be_bytes());
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_binary_copy_layout() {
        let mut copy = CopyBinary::new(0);
        copy.row(4).bytes(b"ab").int8(-2).int4(7).opt_bytes(None);
        let out = copy.finish();
        assert_eq!(&out[..11], b"PGCOPY\n\xff\r\n\0");
        assert_eq!(&out[11..19], &[0; 8]);
        let mut row = vec![0, 4, 0, 0, 0, 2, b'a', b'b', 0, 0, 0, 8];
        row.extend_from_slice(&(-2i64).to_be_bytes());
        // int4 7, then NULL (length -1), then the trailer (-1 as int16).
        row.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(&out[19..], row.as_slice());
    }

    #[test]
    fn a_field_sent_apart_keeps_the_layout() {
        let mut whole = CopyBinary::new(0);
        whole.row(2).int8(1).bytes(b"payload");
        let whole = whole.finish();
        let mut parts = CopyBinary::new(0);
        parts.row(2).int8(1).field_len(7);
        let mut sent = parts.take();
        sent.extend_from_slice(b"payload");
        sent.extend_from_slice(&parts.finish());
        assert_eq!(sent, whole);
    }
}
