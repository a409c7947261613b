//! What a statement worker (see `hindsight_serve::worker`) is sent besides
//! a statement, as bytes: a live writer's unsealed tail (each piece with the
//! segment it goes into, its rows as an Arrow IPC stream), a watch's window
//! (its parameters and live tables), and the batches it answers.
//!
//! The layout: the number of packet pieces, then each as its segment id, its
//! length and its IPC stream; then the connection pieces the same way (their
//! records as a `flows` batch). Integers are 64-bit little-endian. The bytes
//! come from the process that spawned the reader, but are read as any other
//! input: lengths are checked against what is left, and each stream goes
//! through [`BoundedIpc`].

use std::io::{Read, Write};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::error::DataFusionError;
use datafusion::scalar::ScalarValue;
use hindsight_model::SegmentId;
use hindsight_store::TailView;
use hindsight_store::flows::{FlowBatchBuilder, flow_records};
use prost::Message;

use crate::SqlError;
use crate::peer_ipc::BoundedIpc;

/// `view` as bytes.
pub fn encode_tail(view: &TailView) -> Result<Vec<u8>, SqlError> {
    let mut out = Vec::new();
    write_tail(view, &mut out)?;
    Ok(out)
}

/// Writes `view` to `out` a piece at a time: at most one piece's bytes are
/// held besides the tail itself.
pub fn write_tail(view: &TailView, out: &mut dyn Write) -> Result<(), SqlError> {
    out.write_all(&(view.packets.len() as u64).to_le_bytes())?;
    for (id, batch) in &view.packets {
        write_piece(out, *id, batch)?;
    }
    out.write_all(&(view.flows.len() as u64).to_le_bytes())?;
    for (id, records) in &view.flows {
        let mut builder = FlowBatchBuilder::new();
        for record in records.iter() {
            builder.append(record);
        }
        write_piece(out, *id, &builder.finish())?;
    }
    Ok(())
}

fn write_piece(out: &mut dyn Write, id: SegmentId, batch: &RecordBatch) -> Result<(), SqlError> {
    let mut stream = Vec::new();
    let mut writer = StreamWriter::try_new(&mut stream, &batch.schema())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    out.write_all(&id.0.to_le_bytes())?;
    out.write_all(&(stream.len() as u64).to_le_bytes())?;
    out.write_all(&stream)?;
    Ok(())
}

/// Reads the tail [`write_tail`] wrote from `input`, a piece at a time,
/// refused past `max_bytes` in all.
pub fn read_tail(input: &mut dyn Read, max_bytes: u64) -> Result<TailView, SqlError> {
    Input {
        inner: input,
        left: max_bytes,
    }
    .tail()
}

/// What a server sends its worker, read as any other input: every length
/// within what it may still hold.
struct Input<'a> {
    inner: &'a mut dyn Read,
    left: u64,
}

impl Input<'_> {
    /// A length and that many bytes.
    fn bytes(&mut self) -> Result<Vec<u8>, SqlError> {
        let length = self.u64()?;
        self.exactly(length)
    }

    fn exactly(&mut self, length: u64) -> Result<Vec<u8>, SqlError> {
        if length > self.left {
            return Err(malformed("longer than it may be"));
        }
        self.left -= length;
        let mut bytes = Vec::new();
        (&mut *self.inner).take(length).read_to_end(&mut bytes)?;
        if bytes.len() as u64 != length {
            return Err(malformed("it ends inside a piece"));
        }
        Ok(bytes)
    }

    fn u64(&mut self) -> Result<u64, SqlError> {
        let bytes = self.exactly(8)?;
        Ok(u64::from_le_bytes(
            bytes.try_into().map_err(|_| malformed("a number"))?,
        ))
    }

    /// A count of pieces, each of which takes at least 16 bytes.
    fn count(&mut self) -> Result<u64, SqlError> {
        let count = self.u64()?;
        if count > self.left / 16 {
            return Err(malformed("more pieces than bytes"));
        }
        Ok(count)
    }

    fn piece(&mut self) -> Result<(SegmentId, Vec<RecordBatch>), SqlError> {
        let id = SegmentId(self.u64()?);
        let stream = self.bytes()?;
        let reader =
            StreamReader::try_new(BoundedIpc::new(&stream[..], stream.len() as u64), None)?;
        Ok((id, reader.collect::<Result<Vec<_>, _>>()?))
    }

    fn batches(&mut self) -> Result<Vec<RecordBatch>, SqlError> {
        let mut batches = Vec::new();
        for _ in 0..self.count()? {
            batches.extend(self.piece()?.1);
        }
        Ok(batches)
    }

    fn tail(&mut self) -> Result<TailView, SqlError> {
        let mut view = TailView::default();
        for _ in 0..self.count()? {
            let (id, batches) = self.piece()?;
            view.packets
                .extend(batches.into_iter().map(|batch| (id, batch)));
        }
        for _ in 0..self.count()? {
            let (id, batches) = self.piece()?;
            let mut records = Vec::new();
            for batch in &batches {
                records.extend(flow_records(batch).ok_or_else(|| malformed("a flows piece"))?);
            }
            view.flows.push((id, Arc::from(records)));
        }
        Ok(view)
    }
}

/// What `read` takes of `bytes`, which must be all of them.
fn whole<T>(
    bytes: &[u8],
    read: impl FnOnce(&mut Input<'_>) -> Result<T, SqlError>,
) -> Result<T, SqlError> {
    let mut rest = bytes;
    let value = read(&mut Input {
        inner: &mut rest,
        left: bytes.len() as u64,
    })?;
    if !rest.is_empty() {
        return Err(malformed("bytes after the last piece"));
    }
    Ok(value)
}

/// `batches` as bytes: their count, then each as a length and an IPC stream.
pub fn encode_batches(batches: &[RecordBatch]) -> Result<Vec<u8>, SqlError> {
    let mut out = Vec::new();
    out.extend_from_slice(&(batches.len() as u64).to_le_bytes());
    for batch in batches {
        write_piece(&mut out, SegmentId(0), batch)?;
    }
    Ok(out)
}

/// The batches [`encode_batches`] wrote.
pub fn decode_batches(bytes: &[u8]) -> Result<Vec<RecordBatch>, SqlError> {
    whole(bytes, |input| input.batches())
}

/// A watch's window as bytes: its named parameters (each a name and
/// DataFusion's protobuf form of the value), then the packet and the
/// connection batches of its live tables ([`encode_batches`]).
pub fn encode_window(
    params: &[(&str, ScalarValue)],
    packets: &[RecordBatch],
    flows: &[RecordBatch],
) -> Result<Vec<u8>, SqlError> {
    let mut out = Vec::new();
    out.extend_from_slice(&(params.len() as u64).to_le_bytes());
    for (name, value) in params {
        let value = datafusion_proto::protobuf::ScalarValue::try_from(value)
            .map_err(|e| SqlError::DataFusion(DataFusionError::External(Box::new(e))))?
            .encode_to_vec();
        for bytes in [name.as_bytes(), &value] {
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }
    for batches in [packets, flows] {
        out.extend_from_slice(&encode_batches(batches)?);
    }
    Ok(out)
}

/// A watch's window: its parameters, packets and connections.
pub type Window = (
    Vec<(String, ScalarValue)>,
    Vec<RecordBatch>,
    Vec<RecordBatch>,
);

/// The window [`encode_window`] wrote.
pub fn decode_window(bytes: &[u8]) -> Result<Window, SqlError> {
    whole(bytes, |input| {
        let mut params = Vec::new();
        for _ in 0..input.count()? {
            let name =
                String::from_utf8(input.bytes()?).map_err(|_| malformed("a parameter's name"))?;
            let value = datafusion_proto::protobuf::ScalarValue::decode(&input.bytes()?[..])
                .map_err(|_| malformed("a parameter's value"))?;
            let value =
                ScalarValue::try_from(&value).map_err(|_| malformed("a parameter's value"))?;
            params.push((name, value));
        }
        let packets = input.batches()?;
        let flows = input.batches()?;
        Ok((params, packets, flows))
    })
}

/// The tail [`encode_tail`] wrote.
pub fn decode_tail(bytes: &[u8]) -> Result<TailView, SqlError> {
    whole(bytes, |input| input.tail())
}

fn malformed(what: &str) -> SqlError {
    SqlError::Output(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("what the server sent its statement worker is malformed: {what}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hindsight_model::FlowRecord;

    #[test]
    fn a_tail_comes_back_as_it_went() {
        let packets = hindsight_store::schema::packets_schema();
        let empty = RecordBatch::new_empty(packets);
        let record = FlowRecord {
            packets_out: 3,
            bytes_out: 180,
            ..FlowRecord::default()
        };
        let view = TailView {
            packets: vec![(SegmentId(7), empty.clone()), (SegmentId(8), empty)],
            flows: vec![(SegmentId(9), Arc::from(vec![record.clone(), record]))],
        };
        let bytes = encode_tail(&view).unwrap();
        let back = decode_tail(&bytes).unwrap();
        assert_eq!(back.packets.len(), 2);
        assert_eq!(back.packets[1].0, SegmentId(8));
        assert_eq!(back.packets[0].1.schema(), view.packets[0].1.schema());
        assert_eq!(back.flows.len(), 1);
        assert_eq!(back.flows[0].0, SegmentId(9));
        assert_eq!(&*back.flows[0].1, &*view.flows[0].1);
        // Cut anywhere, it is refused, never read past its end.
        for end in 0..bytes.len() {
            assert!(decode_tail(&bytes[..end]).is_err(), "cut at {end}");
        }
    }

    #[test]
    fn a_window_comes_back_as_it_went() {
        let packets = RecordBatch::new_empty(hindsight_store::schema::packets_schema());
        let params = [
            (
                "window_start",
                ScalarValue::TimestampNanosecond(Some(7), None),
            ),
            ("threshold", ScalarValue::Int64(Some(-3))),
            ("name", ScalarValue::Utf8(Some("dns".to_owned()))),
        ];
        let bytes = encode_window(&params, &[packets.clone(), packets], &[]).unwrap();
        let (back, packets, flows) = decode_window(&bytes).unwrap();
        assert_eq!(back.len(), 3);
        for ((name, value), (name_back, value_back)) in params.iter().zip(&back) {
            assert_eq!(name, name_back);
            assert_eq!(value, value_back);
        }
        assert_eq!((packets.len(), flows.len()), (2, 0));
        for end in 0..bytes.len() {
            assert!(decode_window(&bytes[..end]).is_err(), "cut at {end}");
        }
    }
}
