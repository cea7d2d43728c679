//! Reading Server-Sent Events (the WHATWG `text/event-stream` format) from the bytes of a
//! response, as they arrive: the CLI follows operations with it, and the tests read the
//! service's streams with it. Hand-written: `eventsource-stream` would bring `nom` (a
//! parser-combinator library, new to this build) for the forty lines below.

/// One thing a stream said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A message: its fields as the block ending in a blank line gave them.
    Message(Message),
    /// A comment line (`: heartbeat`), without the colon and one leading space.
    Comment(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// `event:` (absent: the default type, `message`).
    pub event: Option<String>,
    /// `id:`: the resume token this message carries.
    pub id: Option<String>,
    /// `data:` lines joined with `\n`; `None` when the message had none (an `id:` alone).
    pub data: Option<String>,
    /// `retry:`, milliseconds.
    pub retry: Option<u64>,
}

/// An incremental parser: feed it bytes as they come, get the frames they complete.
#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes of a line not yet ended.
    partial: Vec<u8>,
    current: Message,
    /// Whether `current` has any field (a blank line after nothing dispatches nothing).
    started: bool,
}

impl Parser {
    pub fn new() -> Self {
        Self::default()
    }

    /// The frames completed by `bytes`. Lines end in `\n` (a `\r` before it is dropped);
    /// invalid UTF-8 is replaced, as the format says.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Frame> {
        let mut frames = Vec::new();
        self.partial.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(end) = memchr::memchr(b'\n', &self.partial[start..]).map(|i| start + i) {
            let mut line = &self.partial[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            if let Some(frame) = self.line(&line) {
                frames.push(frame);
            }
            start = end + 1;
        }
        self.partial.drain(..start);
        frames
    }

    fn line(&mut self, line: &str) -> Option<Frame> {
        if line.is_empty() {
            if !std::mem::take(&mut self.started) {
                return None;
            }
            let mut message = std::mem::take(&mut self.current);
            if let Some(data) = message.data.as_mut() {
                data.pop();
            }
            return Some(Frame::Message(message));
        }
        if let Some(comment) = line.strip_prefix(':') {
            return Some(Frame::Comment(comment.strip_prefix(' ').unwrap_or(comment).to_string()));
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.current.event = Some(value.to_string()),
            "data" => {
                // Each line and a newline; the last newline goes at dispatch.
                let data = self.current.data.get_or_insert_with(String::new);
                data.push_str(value);
                data.push('\n');
            }
            "id" if !value.contains('\0') => self.current.id = Some(value.to_string()),
            "retry" => self.current.retry = value.parse().ok().or(self.current.retry),
            // Unknown fields are ignored, as the format says.
            _ => return None,
        }
        self.started = true;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: Option<&str>, data: Option<&str>) -> Frame {
        Frame::Message(Message { id: id.map(Into::into), data: data.map(Into::into), ..Default::default() })
    }

    #[test]
    fn messages_comments_and_ids_across_chunk_boundaries() {
        let mut p = Parser::new();
        let stream = b": heartbeat\n\nid: 3\ndata: {\"a\":1}\n\nid: czow\n\nevent: end\r\ndata: x\r\ndata: y\r\n\r\n";
        let mut frames = Vec::new();
        for chunk in stream.chunks(5) {
            frames.extend(p.feed(chunk));
        }
        assert_eq!(
            frames,
            vec![
                Frame::Comment("heartbeat".into()),
                msg(Some("3"), Some("{\"a\":1}")),
                msg(Some("czow"), None),
                Frame::Message(Message { event: Some("end".into()), data: Some("x\ny".into()), ..Default::default() }),
            ]
        );
    }

    #[test]
    fn odd_lines_follow_the_format() {
        let mut p = Parser::new();
        let frames = p.feed(b"data\ndata:\ndata:  two spaces\nretry: 250\nunknown: x\nid: a\0b\n\n\n");
        assert_eq!(
            frames,
            vec![Frame::Message(Message {
                data: Some("\n\n two spaces".into()),
                retry: Some(250),
                ..Default::default()
            })]
        );
        assert!(p.feed(b"data: unfinished").is_empty(), "no frame before its blank line");
    }
}
