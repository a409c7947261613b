//! Watching captures read from files (`hindsight watch --replay`), and writing
//! the answers as they come.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hindsight_capture::CaptureReader;
use hindsight_output::Format;
use hindsight_store::arrow::array::{ArrayRef, RecordBatch, StringArray, TimestampNanosecondArray};
use hindsight_store::arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use crate::{Answer, Watcher};

/// Errors of a replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A capture could not be read (up to the damage, its packets were watched).
    #[error("{}: {source}", path.display())]
    Capture {
        /// The capture.
        path: PathBuf,
        /// Why.
        #[source]
        source: hindsight_capture::CaptureError,
    },
    /// An answer could not be written.
    #[error("cannot write the answers")]
    Output(#[from] hindsight_output::rows::RowsError),
    /// An answer could not be formed.
    #[error("cannot form an answer")]
    Arrow(#[from] hindsight_store::arrow::error::ArrowError),
    /// The output format cannot carry a stream of answers.
    #[error("answers come as a stream: --format table or jsonl, not {0}")]
    Format(&'static str),
}

/// Writes each answer to `out` as it comes: in JSON lines, one object per row
/// with the watch's name and the window's bounds (`watch`, `window_start`,
/// `window_end`) before the statement's columns; as a table, a heading per
/// window. A window whose statement failed, or that lost rows at its bounds,
/// says so on `warn`.
pub struct AnswerWriter<'a> {
    format: Format,
    out: &'a mut dyn Write,
    warn: &'a mut dyn FnMut(String),
    /// The first error met; later answers are dropped.
    pub error: Option<ReplayError>,
}

impl std::fmt::Debug for AnswerWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerWriter")
            .field("format", &self.format)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<'a> AnswerWriter<'a> {
    /// A writer of `format` (table or JSON lines) to `out`.
    pub fn new(
        format: Format,
        out: &'a mut dyn Write,
        warn: &'a mut dyn FnMut(String),
    ) -> Result<Self, ReplayError> {
        if !matches!(format, Format::Table | Format::Jsonl) {
            return Err(ReplayError::Format(format.name()));
        }
        Ok(Self {
            format,
            out,
            warn,
            error: None,
        })
    }

    /// Writes one answer.
    pub fn write(&mut self, answer: Answer) {
        if self.error.is_some() {
            return;
        }
        let window = format!(
            "{} [{}, {})",
            answer.watch,
            hindsight_output::time::format_nanos(answer.start_ns),
            hindsight_output::time::format_nanos(answer.end_ns)
        );
        if answer.cut > 0 {
            (self.warn)(format!(
                "watch {window}: {} rows past the window's bounds were left out",
                answer.cut
            ));
        }
        let batches = match answer.rows {
            Ok(batches) => batches,
            Err(message) => {
                (self.warn)(format!("watch {window}: {message}"));
                return;
            }
        };
        let result = match self.format {
            Format::Table => writeln!(self.out, "# {window}")
                .map_err(|e| ReplayError::Output(e.into()))
                .and_then(|()| {
                    hindsight_output::rows::write(&batches, Format::Table, self.out)
                        .map_err(ReplayError::from)
                }),
            _ => batches
                .iter()
                .map(|batch| labelled(batch, &answer.watch, answer.start_ns, answer.end_ns))
                .collect::<Result<Vec<_>, _>>()
                .map_err(ReplayError::from)
                .and_then(|batches| {
                    hindsight_output::rows::write(&batches, Format::Jsonl, self.out)
                        .map_err(ReplayError::from)
                }),
        };
        let result =
            result.and_then(|()| self.out.flush().map_err(|e| ReplayError::Output(e.into())));
        if let Err(error) = result {
            self.error = Some(error);
        }
    }
}

/// The rows of an answer as JSON lines, each with `watch`, `window_start` and
/// `window_end` first (as `-F jsonl` prints them); the statement's error if it
/// failed on this window.
pub(crate) fn answer_lines(answer: &Answer) -> Result<Vec<String>, String> {
    let batches = answer.rows.as_ref().map_err(Clone::clone)?;
    let labelled = batches
        .iter()
        .map(|batch| labelled(batch, &answer.watch, answer.start_ns, answer.end_ns))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    hindsight_output::rows::write(&labelled, Format::Jsonl, &mut out).map_err(|e| e.to_string())?;
    let text = String::from_utf8(out).map_err(|e| e.to_string())?;
    Ok(text.lines().map(str::to_owned).collect())
}

/// `batch` with the watch's name and the window's bounds as its first columns.
fn labelled(
    batch: &RecordBatch,
    watch: &str,
    start_ns: i64,
    end_ns: i64,
) -> Result<RecordBatch, hindsight_store::arrow::error::ArrowError> {
    let rows = batch.num_rows();
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
    let mut fields = vec![
        Arc::new(Field::new("watch", DataType::Utf8, false)),
        Arc::new(Field::new("window_start", ts.clone(), false)),
        Arc::new(Field::new("window_end", ts, false)),
    ];
    fields.extend(batch.schema().fields().iter().cloned());
    let bound = |ns: i64| -> ArrayRef {
        Arc::new(TimestampNanosecondArray::from(vec![ns; rows]).with_timezone("UTC"))
    };
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![watch; rows])),
        bound(start_ns),
        bound(end_ns),
    ];
    columns.extend(batch.columns().iter().cloned());
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// Feeds the captures in `paths`, in order, to `watcher`, then ends the stream;
/// hands each answer to `answer` as its window closes. A damaged capture is read
/// up to the damage, and the error says where.
pub fn replay(
    paths: &[PathBuf],
    watcher: &mut Watcher,
    answer: &mut dyn FnMut(Answer),
) -> Result<(), ReplayError> {
    replay_until(paths, watcher, answer, &AtomicBool::new(false))
}

/// As [`replay`], stopping (without answering what is left) once `stop` is
/// set: the reader of the answers went away (`hindsight watch ... | head`).
pub fn replay_until(
    paths: &[PathBuf],
    watcher: &mut Watcher,
    answer: &mut dyn FnMut(Answer),
    stop: &AtomicBool,
) -> Result<(), ReplayError> {
    for path in paths {
        let mut reader = CaptureReader::open(path).map_err(|source| ReplayError::Capture {
            path: path.clone(),
            source,
        })?;
        while let Some(frame) = reader.next_frame() {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            match frame {
                Ok(frame) => watcher.push_frame(&frame, answer),
                Err(source) => {
                    watcher.finish(answer);
                    return Err(ReplayError::Capture {
                        path: path.clone(),
                        source,
                    });
                }
            }
        }
    }
    watcher.finish(answer);
    Ok(())
}
