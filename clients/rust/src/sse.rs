//! Server-Sent Events, the wire format of `observe`: a line parser that
//! turns bytes as they arrive into `(event, data)` pairs, per the HTML
//! spec's rules that matter here (`event:` and `data:` fields, several
//! `data:` lines joined by `\n`, `:` comments, a blank line ends an event,
//! `\n`, `\r\n` or `\r` end a line).

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEvent {
    /// `message` when the event named none.
    pub name: String,
    pub data: String,
}

/// An event longer than this is refused, so a broken stream cannot grow
/// the buffer without bound.
pub(crate) const MAX_EVENT_BYTES: usize = 1 << 20;

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The last chunk ended with `\r`: a `\n` first in the next one ends
    /// nothing.
    after_cr: bool,
    name: Option<String>,
    data: Option<String>,
    /// Bytes in `name` and `data` so far.
    size: usize,
}

/// The stream broke the format (an event over [`MAX_EVENT_BYTES`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TooLong;

impl Parser {
    /// Feeds a chunk; returns the events it completed, in order.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<Vec<RawEvent>, TooLong> {
        let mut events = Vec::new();
        for &byte in chunk {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.end_line(&line) {
                        events.push(event);
                    }
                }
                _ => {
                    self.line.push(byte);
                    if self.line.len() + self.size > MAX_EVENT_BYTES {
                        return Err(TooLong);
                    }
                }
            }
        }
        Ok(events)
    }

    fn end_line(&mut self, line: &[u8]) -> Option<RawEvent> {
        if line.is_empty() {
            self.size = 0;
            let name = self.name.take();
            return self.data.take().map(|data| RawEvent {
                name: name.unwrap_or_else(|| "message".into()),
                data,
            });
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        self.size += value.len();
        match field {
            "event" => self.name = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> RawEvent {
        RawEvent {
            name: name.into(),
            data: data.into(),
        }
    }

    #[test]
    fn events_split_anywhere_are_reassembled() {
        let wire = b": keep-alive\n\nevent: leader\ndata: {\"a\":1}\n\nevent: leader\r\ndata: x\r\ndata: y\r\n\r\ndata: plain\r\r";
        for split in 0..wire.len() {
            let mut parser = Parser::default();
            let mut got = parser.feed(&wire[..split]).unwrap();
            got.extend(parser.feed(&wire[split..]).unwrap());
            assert_eq!(
                got,
                vec![
                    event("leader", "{\"a\":1}"),
                    event("leader", "x\ny"),
                    event("message", "plain"),
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn an_endless_event_is_refused() {
        let mut parser = Parser::default();
        let chunk = vec![b'x'; 64 * 1024];
        let mut refused = false;
        for _ in 0..(MAX_EVENT_BYTES / chunk.len() + 2) {
            if parser.feed(&chunk).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused);
    }
}
