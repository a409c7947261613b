//! A peer's Arrow IPC stream, checked message by message before Arrow's reader
//! sees it.
//!
//! Arrow's `StreamReader` trusts what a message declares: it allocates a
//! message's metadata and body at the lengths the stream gives (a body of
//! 2^50 bytes aborts the process), and slices the body at the buffer offsets
//! the metadata gives (out of range, it panics). A cluster's answers come
//! from peers, which may lie; so [`BoundedIpc`] reads each message's framing
//! itself, verifies its metadata (a flatbuffer), and passes it on only if its
//! lengths fit the bytes the answer may still hold, its buffers lie within
//! its body, and it is not compressed (a compressed buffer declares its own
//! decompressed length).

use std::io::{self, Read};

use datafusion::arrow::ipc::{MessageHeader, root_as_message};

/// The most bytes of one message's metadata (a schema of a few hundred
/// columns takes some kilobytes).
pub const MAX_METADATA_BYTES: usize = 4 << 20;

/// The IPC stream's continuation marker.
const CONTINUATION: [u8; 4] = [0xff; 4];

/// An Arrow IPC stream of at most a given number of bytes, each message
/// checked before it is read on (see the module's documentation).
#[derive(Debug)]
pub struct BoundedIpc<R> {
    inner: R,
    /// Bytes the stream may still hold.
    left: u64,
    /// The current message's prefix and metadata, checked, not yet read on.
    pending: Vec<u8>,
    at: usize,
    /// Bytes of the current message's body not yet read on.
    body_left: u64,
    /// The end-of-stream marker or the end of the input was reached.
    ended: bool,
}

impl<R: Read> BoundedIpc<R> {
    /// `inner`, refused past `max_bytes`.
    pub fn new(inner: R, max_bytes: u64) -> Self {
        Self {
            inner,
            left: max_bytes,
            pending: Vec::new(),
            at: 0,
            body_left: 0,
            ended: false,
        }
    }

    fn charge(&mut self, bytes: u64, what: &str) -> io::Result<()> {
        if bytes > self.left {
            return Err(invalid(format!(
                "{what} of {bytes} bytes is more than the {} bytes the answer may still hold",
                self.left
            )));
        }
        self.left -= bytes;
        Ok(())
    }

    /// Reads and checks the next message's prefix and metadata into
    /// `pending`; leaves it empty at the end of the input.
    fn next_message(&mut self) -> io::Result<()> {
        self.pending.clear();
        self.at = 0;
        let mut word = [0u8; 4];
        let got = read_up_to(&mut self.inner, &mut word)?;
        if got < word.len() {
            // The end of the input (Arrow ends a stream there too), or a
            // torn prefix, which Arrow's reader reports.
            self.pending.extend_from_slice(&word[..got]);
            self.ended = true;
            return Ok(());
        }
        self.pending.extend_from_slice(&word);
        if word == CONTINUATION {
            self.inner.read_exact(&mut word)?;
            self.pending.extend_from_slice(&word);
        }
        let length = i32::from_le_bytes(word);
        if length == 0 {
            self.ended = true;
            return Ok(());
        }
        let length = usize::try_from(length)
            .ok()
            .filter(|&length| length <= MAX_METADATA_BYTES)
            .ok_or_else(|| {
                invalid(format!(
                    "a message declares {length} bytes of metadata (at most {MAX_METADATA_BYTES})"
                ))
            })?;
        self.charge((self.pending.len() + length) as u64, "a message's metadata")?;
        let start = self.pending.len();
        self.pending.resize(start + length, 0);
        self.inner.read_exact(&mut self.pending[start..])?;
        let message = root_as_message(&self.pending[start..])
            .map_err(|e| invalid(format!("a message's metadata is not valid: {e}")))?;
        let body = u64::try_from(message.bodyLength())
            .map_err(|_| invalid("a message declares a negative body length".to_owned()))?;
        let batch = match message.header_type() {
            MessageHeader::RecordBatch => message.header_as_record_batch(),
            MessageHeader::DictionaryBatch => message
                .header_as_dictionary_batch()
                .and_then(|dictionary| dictionary.data()),
            MessageHeader::Schema => None,
            other => {
                return Err(invalid(format!(
                    "a message of type {other:?} has no place in an answer"
                )));
            }
        };
        if let Some(batch) = batch {
            if batch.compression().is_some() {
                return Err(invalid("a compressed message is not taken".to_owned()));
            }
            for buffer in batch.buffers().into_iter().flatten() {
                let fits = u64::try_from(buffer.offset())
                    .ok()
                    .zip(u64::try_from(buffer.length()).ok())
                    .and_then(|(offset, length)| offset.checked_add(length))
                    .is_some_and(|end| end <= body);
                if !fits {
                    return Err(invalid(format!(
                        "a buffer at {} of {} bytes lies outside its message's body of {body}",
                        buffer.offset(),
                        buffer.length()
                    )));
                }
            }
        }
        self.charge(body, "a message's body")?;
        self.body_left = body;
        Ok(())
    }
}

impl<R: Read> Read for BoundedIpc<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.at < self.pending.len() {
                let n = buf.len().min(self.pending.len() - self.at);
                buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            if self.body_left > 0 {
                let want = buf
                    .len()
                    .min(usize::try_from(self.body_left).unwrap_or(usize::MAX));
                let n = self.inner.read(&mut buf[..want])?;
                self.body_left -= n as u64;
                return Ok(n);
            }
            if self.ended || buf.is_empty() {
                return Ok(0);
            }
            self.next_message()?;
        }
    }
}

/// Fills as much of `buf` as `reader` gives before its end.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn invalid(reason: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::ipc::reader::StreamReader;
    use datafusion::arrow::ipc::writer::StreamWriter;

    use super::*;

    fn stream() -> (Vec<u8>, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values(0..1000)),
                Arc::new(StringArray::from_iter(
                    (0..1000).map(|i| (i % 3 != 0).then(|| format!("row {i}"))),
                )),
            ],
        )
        .unwrap();
        let mut bytes = Vec::new();
        let mut writer = StreamWriter::try_new(&mut bytes, &schema).unwrap();
        writer.write(&batch).unwrap();
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
        drop(writer);
        (bytes, batch)
    }

    fn read(bytes: &[u8], max: u64) -> Result<Vec<RecordBatch>, String> {
        let reader =
            StreamReader::try_new(BoundedIpc::new(bytes, max), None).map_err(|e| e.to_string())?;
        reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_honest_stream_reads_as_it_was_written() {
        let (bytes, batch) = stream();
        assert_eq!(
            read(&bytes, bytes.len() as u64).unwrap(),
            vec![batch.clone(), batch]
        );
        let refused = read(&bytes, bytes.len() as u64 - 100).unwrap_err();
        assert!(refused.contains("may still hold"), "{refused}");
    }

    /// The offset of the first record batch's metadata and its body length's
    /// place in the stream.
    fn lie_about_body(bytes: &mut [u8], body: i64) {
        // Schema message first: skip it.
        let schema_len = i32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
        let at = 8 + schema_len;
        let meta_len = i32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let meta = &bytes[at + 8..at + 8 + meta_len];
        let real = root_as_message(meta).unwrap().bodyLength();
        // The body length is a little-endian i64 in the flatbuffer's table.
        let place = meta
            .windows(8)
            .position(|w| w == real.to_le_bytes())
            .expect("the body length is in the metadata");
        bytes[at + 8 + place..at + 16 + place].copy_from_slice(&body.to_le_bytes());
    }

    #[test]
    fn a_declared_body_past_the_bound_is_refused_before_it_is_allocated() {
        let (mut bytes, _) = stream();
        lie_about_body(&mut bytes, 1 << 50);
        let refused = read(&bytes, 1 << 30).unwrap_err();
        assert!(refused.contains("1125899906842624 bytes"), "{refused}");
        lie_about_body(&mut bytes, -1);
        assert!(read(&bytes, 1 << 30).unwrap_err().contains("negative"));
    }

    #[test]
    fn a_buffer_outside_its_body_is_refused_not_sliced() {
        let (mut bytes, _) = stream();
        lie_about_body(&mut bytes, 8);
        let refused = read(&bytes, 1 << 30).unwrap_err();
        assert!(refused.contains("outside its message's body"), "{refused}");
    }

    #[test]
    fn garbage_and_torn_streams_fail_without_panicking() {
        let (bytes, _) = stream();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..2000 {
            let mut copy = bytes.clone();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let cut = (state as usize) % copy.len();
            if round % 2 == 0 {
                copy.truncate(cut);
            } else {
                copy[cut] ^= (state >> 32) as u8 | 1;
            }
            let _ = read(&copy, 1 << 20);
        }
        let metadata = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(
            read(&metadata, 1 << 30)
                .unwrap_err()
                .contains("bytes of metadata")
        );
    }
}
