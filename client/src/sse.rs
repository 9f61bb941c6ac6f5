//! A Server-Sent Events decoder over arbitrary byte chunks: lines may be split anywhere (mid-line,
//! mid-UTF-8, between `\r` and `\n`); events are dispatched at blank lines, as the WHATWG spec
//! says. Comments (`:`) are ignored; `event:` and multi-line `data:` are kept.

/// One event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (`None` means "message").
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental decoder.
#[derive(Default)]
pub struct SseDecoder {
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
    has_data: bool,
    /// A `\r` ended the previous chunk: a `\n` starting the next one belongs to it.
    pending_cr: bool,
}

impl SseDecoder {
    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if chunk.is_empty() {
            return out;
        }
        let mut chunk = chunk;
        if self.pending_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.pending_cr = false;
        for &b in chunk {
            match b {
                b'\n' | b'\r' => {
                    if b == b'\r' {
                        self.pending_cr = true;
                    } else if self.pending_cr {
                        // "\r\n" inside one chunk: the line already ended at '\r'.
                        self.pending_cr = false;
                        continue;
                    }
                    let line = std::mem::take(&mut self.buf);
                    self.line(&String::from_utf8_lossy(&line), &mut out);
                }
                _ => {
                    self.pending_cr = false;
                    self.buf.push(b);
                }
            }
        }
        out
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if self.has_data || self.event.is_some() {
                out.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data).join("\n"),
                });
            }
            self.has_data = false;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                self.data.push(value.to_string());
                self.has_data = true;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STREAM: &str = "event: message_start\ndata: {\"a\":1}\n\n: ping comment\nevent: delta\r\ndata: line one\r\ndata: line two ünïcödé\r\n\r\ndata: [DONE]\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent {
                event: Some("message_start".into()),
                data: "{\"a\":1}".into(),
            },
            SseEvent {
                event: Some("delta".into()),
                data: "line one\nline two ünïcödé".into(),
            },
            SseEvent {
                event: None,
                data: "[DONE]".into(),
            },
        ]
    }

    #[test]
    fn decodes_a_whole_stream() {
        assert_eq!(SseDecoder::default().push(STREAM.as_bytes()), expected());
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_events(cuts in proptest::collection::vec(0usize..STREAM.len(), 0..20)) {
            let bytes = STREAM.as_bytes();
            let mut cuts = cuts;
            cuts.sort();
            cuts.dedup();
            let mut d = SseDecoder::default();
            let mut events = Vec::new();
            let mut start = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                events.extend(d.push(&bytes[start..cut]));
                start = cut;
            }
            prop_assert_eq!(events, expected());
        }
    }
}
