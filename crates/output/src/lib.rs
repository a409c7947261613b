//! The role of the output crate is to write answers the one way every surface
//! writes them: packets ([`packets`]), connections ([`connections`]) and SQL rows
//! ([`rows`]) in the [`Format`]s people and tools read (an aligned table, CSV,
//! JSON lines, pcap, pcapng, Parquet), with times ([`time`]) and units as the
//! command line and the API print them; and what a running command says on
//! stderr ([`log`]).

pub mod connections;
pub mod log;
pub mod packets;
pub mod rows;
pub mod time;

use std::path::Path;

/// The output formats. Not every answer has every format: packets have no
/// Parquet (`hindsight sql` exports packet columns as Parquet), connections and
/// SQL rows no capture files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// An aligned, human-readable table.
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line.
    Jsonl,
    /// A pcap file (nanosecond timestamps) of the stored packet bytes.
    Pcap,
    /// A pcapng file of the stored packet bytes: one interface per link type.
    Pcapng,
    /// An Apache Parquet file (zstd), for DuckDB, pandas or Spark.
    Parquet,
    /// hindsight's own stream of packets, every stored field and the packet
    /// bytes (`packets::read_rows_chunk`): what a cluster's nodes answer the
    /// node that asked, which merges them. Not offered on the command line.
    Rows,
}

/// What an answer is made of, for the formats each can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Packets (`query`).
    Packets,
    /// Connection records (`flows`).
    Connections,
    /// SQL rows (`sql`).
    Rows,
}

impl Answer {
    fn name(self) -> &'static str {
        match self {
            Self::Packets => "packets",
            Self::Connections => "connections",
            Self::Rows => "SQL results",
        }
    }

    /// The formats this answer can be written in.
    pub fn formats(self) -> &'static [Format] {
        match self {
            Self::Packets => &[
                Format::Table,
                Format::Csv,
                Format::Jsonl,
                Format::Pcap,
                Format::Pcapng,
                Format::Rows,
            ],
            Self::Connections => &[Format::Table, Format::Csv, Format::Jsonl],
            Self::Rows => &[Format::Table, Format::Csv, Format::Jsonl, Format::Parquet],
        }
    }
}

impl Format {
    /// Every format.
    pub const ALL: [Self; 7] = [
        Self::Table,
        Self::Csv,
        Self::Jsonl,
        Self::Pcap,
        Self::Pcapng,
        Self::Parquet,
        Self::Rows,
    ];

    /// The formats a command line offers: all but `Rows`.
    pub fn offered() -> impl Iterator<Item = Self> {
        Self::ALL.into_iter().filter(|format| *format != Self::Rows)
    }

    /// The format's name, as `--format` and the API's `format=` take it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Table => "table",
            Self::Csv => "csv",
            Self::Jsonl => "jsonl",
            Self::Pcap => "pcap",
            Self::Pcapng => "pcapng",
            Self::Parquet => "parquet",
            Self::Rows => "rows",
        }
    }

    /// The format named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|format| format.name() == name)
    }

    /// Returns true for the capture-file formats, which carry packet bytes.
    pub fn is_capture(self) -> bool {
        matches!(self, Self::Pcap | Self::Pcapng)
    }

    /// Returns true for the formats that carry the stored packet bytes.
    pub fn carries_bytes(self) -> bool {
        matches!(self, Self::Pcap | Self::Pcapng | Self::Rows)
    }

    /// The media type of an HTTP answer in this format.
    pub fn media_type(self) -> &'static str {
        match self {
            Self::Table => "text/plain; charset=utf-8",
            Self::Csv => "text/csv; charset=utf-8",
            Self::Jsonl => "application/x-ndjson",
            Self::Pcap => "application/vnd.tcpdump.pcap",
            Self::Pcapng => "application/x-pcapng",
            Self::Parquet => "application/vnd.apache.parquet",
            Self::Rows => "application/x-hindsight-rows",
        }
    }

    /// The format a file's name asks for by its extension (`.pcap`, `.cap`,
    /// `.pcapng`, `.ntar`, `.csv`, `.jsonl`/`.ndjson`/`.json`, `.parquet`/`.pq`),
    /// if `answer` can be written in it.
    pub fn of_path(path: &Path, answer: Answer) -> Option<Self> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        let format = match extension.as_str() {
            "pcap" | "cap" => Self::Pcap,
            "pcapng" | "ntar" => Self::Pcapng,
            "csv" => Self::Csv,
            "jsonl" | "ndjson" | "json" => Self::Jsonl,
            "parquet" | "pq" => Self::Parquet,
            _ => return None,
        };
        answer.formats().contains(&format).then_some(format)
    }

    /// Checks that `answer` can be written in this format.
    pub fn check(self, answer: Answer) -> Result<Self, String> {
        let formats = answer.formats();
        if formats.contains(&self) {
            return Ok(self);
        }
        let names: Vec<&str> = formats.iter().map(|f| f.name()).collect();
        Err(format!(
            "{} cannot be written as {}: the formats of {} are {}",
            answer.name(),
            self.name(),
            answer.name(),
            names.join(", ")
        ))
    }
}

/// A buffered writer of the file at `path` (created), or of standard output.
pub fn create(path: Option<&Path>) -> std::io::Result<Box<dyn std::io::Write>> {
    use std::io::BufWriter;
    Ok(match path {
        Some(path) => Box::new(BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(path).map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display()))
            })?,
        )),
        None => Box::new(BufWriter::with_capacity(1 << 16, std::io::stdout().lock())),
    })
}

/// Formats a byte count with a binary unit: `1.5 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Formats a rate with an SI suffix: `2.5 M`.
pub fn human_rate(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2} M", per_second / 1e6)
    } else if per_second >= 1e3 {
        format!("{:.1} k", per_second / 1e3)
    } else {
        format!("{per_second:.0} ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024), "5.0 MiB");
        assert_eq!(human_rate(2_500_000.0), "2.50 M");
        assert_eq!(human_rate(1500.0), "1.5 k");
    }

    #[test]
    fn formats_by_name_extension_and_answer() {
        for format in Format::ALL {
            assert_eq!(Format::from_name(format.name()), Some(format));
        }
        let of = |name: &str, answer| Format::of_path(Path::new(name), answer);
        assert_eq!(of("x.PCAP", Answer::Packets), Some(Format::Pcap));
        assert_eq!(of("x.pcapng", Answer::Packets), Some(Format::Pcapng));
        assert_eq!(of("x.parquet", Answer::Packets), None);
        assert_eq!(of("x.parquet", Answer::Rows), Some(Format::Parquet));
        assert_eq!(of("x.pcap", Answer::Rows), None);
        assert_eq!(of("x.ndjson", Answer::Connections), Some(Format::Jsonl));
        assert_eq!(of("x.txt", Answer::Rows), None);
        assert!(Format::Pcap.check(Answer::Connections).is_err());
        let error = Format::Parquet.check(Answer::Packets).unwrap_err();
        assert!(error.contains("table, csv, jsonl, pcap, pcapng"), "{error}");
    }
}
