//! A generated-statement fuzzer of hindsight's SQL surfaces (issue 65,
//! acceptance 2): statements from a grammar (deep and wide expressions,
//! nested subqueries, unions, window functions, every function hindsight
//! registers and many of DataFusion's, random literals, and now and then a
//! chain of thousands of operators or a list of thousands of values) are sent
//! to a real `hindsight serve` over lan-hour through `POST /api/v1/sql`, every
//! `--cluster-every`th one also with `"cluster": true` to a cluster of two
//! nodes (so its fragments are cut, sent and run), and every `--cli-every`th one through
//! the `hindsight sql` command. Every answer must be rows or a 4xx/5xx with a
//! JSON message; a server that stops answering ends the run with exit code 1.
//! A 503 with `Retry-After` is waited out and the statement sent again, as a
//! client does (at most 120 times), so that the statements refused while
//! others given up on still compute are run after all.
//! At the end it prints the counts by path and status, the distinct errors
//! (numbers and quoted text folded), and the servers' peak RSS against their
//! memory bound: each server's own process against `max_resident_mib`, and
//! the statement workers it starts (each sampled every 200 ms, the
//! highest) against `worker_memory_mib`, and why any worker died (from the
//! servers' logs, `a.log` and `b.log` in the work directory).
//!
//! Statements are typed (an expression of each type is built from the
//! columns and functions of that type, so most plan and run: about two thirds
//! answer rows), with one expression in ten drawn without regard to types.
//! `--threads` clients send at once (each its own generator, seeded
//! `seed + thread`); each distinct error is printed with the first statement
//! that got it.
//!
//! `--cluster-every K` sends every Kth statement to the cluster too (2: every
//! second one), `--timeout-secs` is the servers' `timeout_secs` (10).
//! `--print FROM..TO` sends nothing and prints, as JSON lines, the statements
//! each thread sends as its FROM-th to TO-th: a thread's statements depend
//! only on its seed, so what a run sent about when a server misbehaved can be
//! replayed one by one.
//!
//! `cargo build --release -p hindsight -p hindsight-bench && target/release/sql_fuzz [--statements N] [--seed S] [--threads T] [--cli-every K] [--cluster-every K] [--timeout-secs S] [--work DIR]`

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use hindsight_bench::{
    ChildrenPeak, Rng, default_source, file_rss_kib, hindsight_binary, peak_rss_kib, run_quiet,
};

/// The servers' bound on one statement's memory, MiB.
const MEMORY_MIB: u64 = 256;
/// The servers' resident bound (`max_resident_mib`): the three statements'
/// budget plus 256 MiB for the caches and the rest. A peak RSS past it (less
/// the pages of the binary and libraries, which it does not count) fails
/// the run.
const RESIDENT_MIB: u64 = 1024;
/// The servers' statement workers' memory limit (`worker_memory_mib`): the
/// kernel refuses a worker's allocation past it.
const WORKER_MIB: u64 = 1024;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 100_000)]
    statements: u64,
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    threads: u64,
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    cli_every: u64,
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    cluster_every: u64,
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_secs: u64,
    #[arg(long)]
    work: Option<PathBuf>,
    /// Print the statements FROM..TO of each thread instead of running them.
    #[arg(long, value_name = "FROM..TO")]
    print: Option<String>,
}

/// The columns of a table, by name and a coarse type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Int,
    Float,
    Text,
    Bytes,
    Addr,
    Time,
    Bool,
    Other,
}

fn columns(schema: &hindsight_store::arrow::datatypes::Schema) -> Vec<(String, Kind)> {
    use hindsight_store::arrow::datatypes::DataType as T;
    schema
        .fields()
        .iter()
        .map(|field| {
            let kind = match field.data_type() {
                T::Int8
                | T::Int16
                | T::Int32
                | T::Int64
                | T::UInt8
                | T::UInt16
                | T::UInt32
                | T::UInt64 => Kind::Int,
                T::Float32 | T::Float64 => Kind::Float,
                T::Utf8 | T::LargeUtf8 | T::Utf8View => Kind::Text,
                T::FixedSizeBinary(16) => Kind::Addr,
                T::Binary | T::LargeBinary | T::FixedSizeBinary(_) | T::BinaryView => Kind::Bytes,
                T::Timestamp(..) => Kind::Time,
                T::Boolean => Kind::Bool,
                _ => Kind::Other,
            };
            (field.name().clone(), kind)
        })
        .collect()
}

/// The grammar's state: a generator, the tables' columns.
struct Grammar {
    rng: Rng,
    packets: Vec<(String, Kind)>,
    flows: Vec<(String, Kind)>,
}

const FUNCTIONS_1: &[&str] = &[
    "ip_str",
    "length",
    "upper",
    "lower",
    "abs",
    "md5",
    "sha256",
    "trim",
    "reverse",
    "ascii",
    "octet_length",
    "ip_home",
    "to_hex",
    "sqrt",
    "ln",
    "floor",
    "ceil",
    "isnan",
    "btrim",
    "character_length",
    "initcap",
];
const FUNCTIONS_2: &[&str] = &[
    "repeat",
    "lpad",
    "rpad",
    "ip_prefix",
    "ip_in",
    "left",
    "right",
    "strpos",
    "coalesce",
    "nullif",
    "round",
    "power",
    "split_part_2",
    "regexp_like",
    "starts_with",
    "concat",
    "date_trunc",
    "time_bucket",
    "log",
    "gcd",
    "substr",
];
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "approx_distinct",
    "string_agg",
    "array_agg",
    "stddev",
    "bool_and",
    "first_value",
    "median",
];
const WINDOWS: &[&str] = &[
    "row_number()",
    "rank()",
    "dense_rank()",
    "lag",
    "lead",
    "ntile(4)",
];
const BINARY: &[&str] = &[
    "+",
    "-",
    "*",
    "/",
    "%",
    "||",
    "=",
    "<>",
    "<",
    ">",
    "<=",
    ">=",
    "AND",
    "OR",
    "LIKE",
    "IS DISTINCT FROM",
    "&",
    "|",
    "<<",
];
const TYPES: &[&str] = &[
    "INT",
    "BIGINT",
    "DOUBLE",
    "VARCHAR",
    "BOOLEAN",
    "TIMESTAMP",
    "DATE",
    "BYTEA",
    "SMALLINT",
];

impl Grammar {
    fn pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items[self.rng.below(items.len() as u64) as usize]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.rng.below(100) < percent
    }

    fn number(&mut self) -> String {
        match self.rng.below(8) {
            0 => "0".to_owned(),
            1 => "-1".to_owned(),
            2 => "2147483647".to_owned(),
            3 => "9223372036854775807".to_owned(),
            4 => format!("{}.{}", self.rng.below(1000), self.rng.below(1000)),
            5 => "1e308".to_owned(),
            _ => self.rng.below(100_000).to_string(),
        }
    }

    fn text(&mut self) -> String {
        let len = self.rng.below(24) as usize;
        let mut text = String::from("'");
        for _ in 0..len {
            let c = match self.rng.below(12) {
                0 => "''".to_owned(),
                1 => "%".to_owned(),
                2 => "\\".to_owned(),
                3 => "é".to_owned(),
                4 => ".".to_owned(),
                _ => char::from(b'a' + self.rng.below(26) as u8).to_string(),
            };
            text.push_str(&c);
        }
        text.push('\'');
        text
    }

    fn literal(&mut self) -> String {
        match self.rng.below(12) {
            0 => "NULL".to_owned(),
            1 => "TRUE".to_owned(),
            2 => self.text(),
            3 => format!(
                "ip('{}.{}.{}.{}')",
                self.rng.below(300),
                self.rng.below(256),
                self.rng.below(256),
                self.rng.below(256)
            ),
            4 => "ip('2001:db8::1')".to_owned(),
            5 => "TIMESTAMP '2012-11-23T17:10:00Z'".to_owned(),
            6 => format!("INTERVAL '{} seconds'", self.rng.below(100_000)),
            7 => "ip('not an address')".to_owned(),
            _ => self.number(),
        }
    }

    fn column(&mut self, table: &str) -> String {
        let columns = if table == "flows" {
            &self.flows
        } else {
            &self.packets
        };
        let (name, _) = &columns[self.rng.below(columns.len() as u64) as usize];
        name.clone()
    }

    fn expr(&mut self, table: &str, depth: u32) -> String {
        if depth == 0 {
            return if self.chance(50) {
                self.column(table)
            } else {
                self.literal()
            };
        }
        let d = depth - 1;
        match self.rng.below(16) {
            0 | 1 => self.column(table),
            2 => self.literal(),
            3..=5 => {
                let op = self.pick(BINARY);
                format!("({} {op} {})", self.expr(table, d), self.expr(table, d))
            }
            6 => format!("NOT ({})", self.expr(table, d)),
            7 => {
                let f = self.pick(FUNCTIONS_1);
                format!("{f}({})", self.expr(table, d))
            }
            8 => {
                let f = self.pick(FUNCTIONS_2);
                if f == "split_part_2" {
                    format!("split_part({}, '.', 2)", self.expr(table, d))
                } else if f == "date_trunc" {
                    format!("date_trunc('minute', {})", self.expr(table, d))
                } else if f == "time_bucket" {
                    format!("time_bucket(INTERVAL '1 minute', {})", self.expr(table, d))
                } else {
                    format!("{f}({}, {})", self.expr(table, d), self.expr(table, d))
                }
            }
            9 => format!(
                "CASE WHEN {} THEN {} ELSE {} END",
                self.expr(table, d),
                self.expr(table, d),
                self.expr(table, d)
            ),
            10 => {
                let ty = self.pick(TYPES);
                format!("CAST({} AS {ty})", self.expr(table, d))
            }
            11 => {
                let n = self.rng.below(6) + 1;
                let items: Vec<String> = (0..n).map(|_| self.literal()).collect();
                format!("({} IN ({}))", self.expr(table, d), items.join(", "))
            }
            12 => format!(
                "({} IN (SELECT {} FROM {table} LIMIT {}))",
                self.expr(table, d),
                self.column(table),
                self.rng.below(100)
            ),
            13 => format!(
                "({} BETWEEN {} AND {})",
                self.expr(table, d),
                self.literal(),
                self.literal()
            ),
            14 => format!(
                "EXISTS (SELECT 1 FROM {table} WHERE {} LIMIT 1)",
                self.expr(table, d)
            ),
            _ => format!("({})", self.expr(table, d)),
        }
    }

    /// A column of `kind` of `table`, if it has one.
    fn column_of(&mut self, table: &str, kind: Kind) -> Option<String> {
        let columns = if table == "flows" {
            &self.flows
        } else {
            &self.packets
        };
        let of: Vec<&String> = columns
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(name, _)| name)
            .collect();
        if of.is_empty() {
            return None;
        }
        Some(of[self.rng.below(of.len() as u64) as usize].clone())
    }

    /// A literal of `kind`.
    fn literal_of(&mut self, kind: Kind) -> String {
        match kind {
            Kind::Int => match self.rng.below(6) {
                0 => "NULL".to_owned(),
                1 => "2147483647".to_owned(),
                2 => "-1".to_owned(),
                _ => self.rng.below(70_000).to_string(),
            },
            Kind::Float => format!("{}.{}", self.rng.below(1000), self.rng.below(1000)),
            Kind::Text => self.text(),
            Kind::Bool => ["TRUE", "FALSE", "NULL"][self.rng.below(3) as usize].to_owned(),
            Kind::Time => format!(
                "TIMESTAMP '2012-11-23T{:02}:{:02}:00Z'",
                16 + self.rng.below(3),
                self.rng.below(60)
            ),
            Kind::Addr => match self.rng.below(4) {
                0 => "ip('2001:db8::1')".to_owned(),
                _ => format!(
                    "ip('10.{}.{}.{}')",
                    self.rng.below(256),
                    self.rng.below(256),
                    self.rng.below(256)
                ),
            },
            Kind::Bytes | Kind::Other => "NULL".to_owned(),
        }
    }

    /// An expression of `kind` over `table`, nested `depth` deep: the
    /// statements a user writes, which mostly plan and run.
    fn value(&mut self, kind: Kind, table: &str, depth: u32) -> String {
        if depth == 0 || self.chance(30) {
            return match self.column_of(table, kind) {
                Some(column) if self.chance(70) => column,
                _ => self.literal_of(kind),
            };
        }
        let d = depth - 1;
        let (int, text, time, addr) = (Kind::Int, Kind::Text, Kind::Time, Kind::Addr);
        match kind {
            Kind::Int => match self.rng.below(10) {
                0 => {
                    let op = self.pick(&["+", "-", "*", "/", "%", "&", "|"]);
                    format!(
                        "({} {op} {})",
                        self.value(int, table, d),
                        self.value(int, table, d)
                    )
                }
                1 => {
                    let f = self.pick(&["length", "octet_length", "ascii", "character_length"]);
                    format!("{f}({})", self.value(text, table, d))
                }
                2 => format!("strpos({}, {})", self.value(text, table, d), self.text()),
                3 => format!("abs({})", self.value(int, table, d)),
                4 => format!(
                    "gcd({}, {})",
                    self.value(int, table, d),
                    self.value(int, table, d)
                ),
                5 => format!(
                    "CASE WHEN {} THEN {} ELSE {} END",
                    self.value(Kind::Bool, table, d),
                    self.value(int, table, d),
                    self.value(int, table, d)
                ),
                6 => format!(
                    "coalesce({}, {})",
                    self.value(int, table, d),
                    self.literal_of(int)
                ),
                7 => format!("date_part('minute', {})", self.value(time, table, d)),
                8 => format!("CAST({} AS BIGINT)", self.value(Kind::Float, table, d)),
                _ => format!(
                    "(SELECT count(*) FROM {table} WHERE {})",
                    self.value(Kind::Bool, table, d)
                ),
            },
            Kind::Float => match self.rng.below(5) {
                0 => format!("sqrt(abs({}))", self.value(int, table, d)),
                1 => format!("round({}, 2)", self.value(Kind::Float, table, d)),
                2 => format!("ln(1 + abs({}))", self.value(int, table, d)),
                3 => format!("power({}, 2)", self.value(Kind::Float, table, d)),
                _ => format!("({} / 3.0)", self.value(int, table, d)),
            },
            Kind::Text => match self.rng.below(12) {
                0 => {
                    let f = self.pick(&[
                        "upper", "lower", "trim", "reverse", "initcap", "btrim", "md5",
                    ]);
                    format!("{f}({})", self.value(text, table, d))
                }
                1 => format!("ip_str({})", self.value(addr, table, d)),
                2 => format!(
                    "({} || {})",
                    self.value(text, table, d),
                    self.value(text, table, d)
                ),
                3 => format!(
                    "concat({}, {})",
                    self.value(text, table, d),
                    self.value(int, table, d)
                ),
                4 => format!(
                    "repeat({}, {})",
                    self.value(text, table, d),
                    self.rng.below(50)
                ),
                5 => format!(
                    "lpad({}, {}, '.')",
                    self.value(text, table, d),
                    self.rng.below(80)
                ),
                6 => format!(
                    "left({}, {})",
                    self.value(text, table, d),
                    self.rng.below(10)
                ),
                7 => format!("split_part({}, '.', 2)", self.value(text, table, d)),
                8 => format!("to_hex({})", self.value(int, table, d)),
                9 => format!("CAST({} AS VARCHAR)", self.value(int, table, d)),
                10 => format!("substr({}, 2, 5)", self.value(text, table, d)),
                _ => format!("coalesce({}, 'none')", self.value(text, table, d)),
            },
            Kind::Bool => match self.rng.below(12) {
                0 | 1 => {
                    let op = self.pick(&["=", "<>", "<", ">", "<=", ">="]);
                    format!(
                        "({} {op} {})",
                        self.value(int, table, d),
                        self.value(int, table, d)
                    )
                }
                2 => format!(
                    "({} = {})",
                    self.value(addr, table, d),
                    self.value(addr, table, d)
                ),
                3 => {
                    let op = self.pick(&["AND", "OR"]);
                    format!(
                        "({} {op} {})",
                        self.value(Kind::Bool, table, d),
                        self.value(Kind::Bool, table, d)
                    )
                }
                4 => format!("NOT ({})", self.value(Kind::Bool, table, d)),
                5 => format!(
                    "({} LIKE '%{}%')",
                    self.value(text, table, d),
                    char::from(b'a' + self.rng.below(26) as u8)
                ),
                6 => format!(
                    "ip_in({}, '10.{}.0.0/{}')",
                    self.value(addr, table, d),
                    self.rng.below(256),
                    8 + self.rng.below(25)
                ),
                7 => {
                    let n = self.rng.below(8) + 1;
                    let items: Vec<String> = (0..n).map(|_| self.literal_of(int)).collect();
                    format!("({} IN ({}))", self.value(int, table, d), items.join(", "))
                }
                8 => format!(
                    "({} BETWEEN {} AND {})",
                    self.value(time, table, d),
                    self.literal_of(time),
                    self.literal_of(time)
                ),
                9 => format!("({} IS NULL)", self.value(int, table, d)),
                10 => format!("regexp_like({}, '^[a-z]+\\.')", self.value(text, table, d)),
                _ => format!(
                    "EXISTS (SELECT 1 FROM {table} WHERE {} LIMIT 1)",
                    self.value(Kind::Bool, table, d)
                ),
            },
            Kind::Time => match self.rng.below(3) {
                0 => format!("date_trunc('minute', {})", self.value(time, table, d)),
                1 => format!(
                    "time_bucket(INTERVAL '{} seconds', {})",
                    1 + self.rng.below(600),
                    self.value(time, table, d)
                ),
                _ => format!(
                    "({} + INTERVAL '{} seconds')",
                    self.value(time, table, d),
                    self.rng.below(3600)
                ),
            },
            Kind::Addr => match self.rng.below(2) {
                0 => format!(
                    "ip_prefix({}, {})",
                    self.value(addr, table, d),
                    8 + self.rng.below(25)
                ),
                _ => format!("coalesce({}, ip('0.0.0.0'))", self.value(addr, table, d)),
            },
            Kind::Bytes | Kind::Other => self.literal_of(kind),
        }
    }

    /// Any expression: typed (most), or free-form (which often does not plan).
    fn any(&mut self, table: &str, depth: u32) -> String {
        if self.chance(10) {
            return self.expr(table, depth);
        }
        let kinds = [
            Kind::Int,
            Kind::Int,
            Kind::Text,
            Kind::Bool,
            Kind::Time,
            Kind::Addr,
            Kind::Float,
        ];
        let kind = kinds[self.rng.below(kinds.len() as u64) as usize];
        self.value(kind, table, depth)
    }

    /// A condition: typed (most), or free-form.
    fn condition(&mut self, table: &str, depth: u32) -> String {
        if self.chance(10) {
            self.expr(table, depth)
        } else {
            self.value(Kind::Bool, table, depth)
        }
    }

    /// A chain of `terms` terms joined by one operator, or a list of
    /// `terms` values: what a generated indicator list looks like.
    fn long(&mut self, table: &str) -> String {
        let terms = [10, 100, 1000, 4000, 5000, 20_000][self.rng.below(6) as usize];
        let column = self.column(table);
        match self.rng.below(4) {
            0 => {
                let parts: Vec<String> = (0..terms).map(|i| format!("{column} = {i}")).collect();
                parts.join(" OR ")
            }
            1 => {
                let parts: Vec<String> = (0..terms).map(|i| i.to_string()).collect();
                format!("{column} IN ({})", parts.join(", "))
            }
            2 => {
                let parts: Vec<String> = (0..terms).map(|_| "1".to_owned()).collect();
                format!("({}) > 0", parts.join(" + "))
            }
            _ => {
                let depth = self.rng.below(80) as usize;
                format!(
                    "{}{column} IS NOT NULL{}",
                    "(".repeat(depth),
                    ")".repeat(depth)
                )
            }
        }
    }

    fn select(&mut self, depth: u32) -> String {
        let table = if self.chance(60) { "packets" } else { "flows" };
        let mut sql = String::from("SELECT ");
        let grouped = self.chance(30);
        let items = self.rng.below(4) + 1;
        let mut group = Vec::new();
        for i in 0..items {
            if i > 0 {
                sql.push_str(", ");
            }
            if grouped && i == 0 {
                let column = self.column(table);
                group.push(column.clone());
                sql.push_str(&column);
            } else if grouped {
                let f = self.pick(AGGREGATES);
                let arg = match f {
                    "sum" | "avg" | "stddev" | "median" if !self.chance(10) => {
                        self.value(Kind::Int, table, 1)
                    }
                    "bool_and" if !self.chance(10) => self.value(Kind::Bool, table, 1),
                    _ => self.any(table, 1),
                };
                match f {
                    "string_agg" => write!(sql, "string_agg(CAST({arg} AS VARCHAR), ',')"),
                    "count" if self.chance(50) => write!(sql, "count(DISTINCT {arg})"),
                    _ => write!(sql, "{f}({arg})"),
                }
                .ok();
            } else if self.chance(15) {
                let w = self.pick(WINDOWS);
                let call = if w.ends_with(')') {
                    w.to_owned()
                } else {
                    format!("{w}({})", self.column(table))
                };
                write!(
                    sql,
                    "{call} OVER (PARTITION BY {} ORDER BY {})",
                    self.column(table),
                    self.column(table)
                )
                .ok();
            } else {
                let depth = self.rng.below(5) as u32;
                let item = self.any(table, depth);
                sql.push_str(&item);
            }
            write!(sql, " AS c{i}").ok();
        }
        if depth > 0 && self.chance(20) {
            // Over a subquery, whose columns are c0 and on.
            let inner = self.select(depth - 1);
            let outer = ["count(*)", "count(DISTINCT c0)", "max(c0)", "min(c0)", "c0"]
                [self.rng.below(5) as usize];
            let tail = if outer == "c0" { " LIMIT 100" } else { "" };
            return format!("SELECT {outer} AS c0 FROM ({inner}) AS t{tail}");
        }
        write!(sql, " FROM {table}").ok();
        if self.chance(70) {
            let condition = if self.chance(4) {
                self.long(table)
            } else {
                let depth = self.rng.below(4) as u32;
                self.condition(table, depth)
            };
            write!(sql, " WHERE {condition}").ok();
        }
        if grouped {
            write!(sql, " GROUP BY {}", group.join(", ")).ok();
        }
        if self.chance(40) {
            write!(sql, " ORDER BY 1").ok();
        }
        write!(sql, " LIMIT {}", self.rng.below(1000)).ok();
        sql
    }

    fn statement(&mut self) -> String {
        match self.rng.below(20) {
            0 => {
                let n = [2, 10, 100, 2000, 5000][self.rng.below(5) as usize];
                let parts: Vec<String> = (0..n).map(|i| format!("SELECT {i} AS n")).collect();
                format!("SELECT count(*) FROM ({})", parts.join(" UNION ALL "))
            }
            1 => format!("WITH a AS ({}) SELECT * FROM a LIMIT 10", self.select(1)),
            2 => {
                let depth = self.rng.below(8) as u32;
                format!("SELECT {}", self.expr("packets", depth))
            }
            3 => format!(
                "SELECT count(*) FROM packets p JOIN flows f ON p.src_addr = f.src_addr WHERE {} LIMIT 10",
                self.condition("packets", 1)
                    .replace("src_addr", "p.src_addr")
            ),
            _ => self.select(2),
        }
    }
}

/// An error message with numbers and quoted text folded, to count kinds.
fn kind_of(message: &str) -> String {
    let mut out = String::new();
    let mut quoted = None;
    let mut last_digit = false;
    for c in message.chars().take(160) {
        if let Some(q) = quoted {
            if c == q {
                quoted = None;
            }
            continue;
        }
        match c {
            '\'' | '"' | '`' => {
                quoted = Some(c);
                out.push('…');
            }
            '\n' | '\r' | '\t' => out.push(' '),
            '0'..='9' => {
                if !last_digit {
                    out.push('N');
                }
                last_digit = true;
                continue;
            }
            _ => out.push(c),
        }
        last_digit = false;
    }
    out
}

/// Serve with `config` (TOML, besides the archive) on `port`.
fn start(
    hindsight: &Path,
    dir: &Path,
    name: &str,
    config: &str,
    port: u16,
) -> (std::process::Child, String) {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).expect("write the configuration");
    // Its log, where a statement worker that died says why.
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("create the log");
    let mut child = Command::new(hindsight)
        .args(["serve", "--config"])
        .arg(&path)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start hindsight serve");
    let base = format!("http://127.0.0.1:{port}");
    let agent = agent();
    let started = Instant::now();
    while agent.get(format!("{base}/api/v1/health")).call().is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{name} did not start"
        );
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{name} exited: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, base)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// The value of a counter or gauge of `base`'s `/metrics`, if it has it.
fn metric(base: &str, token: &str, name: &str) -> Option<u64> {
    let text = agent()
        .get(format!("{base}/metrics"))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[derive(Default)]
struct Tally {
    sent: u64,
    /// 503s with `Retry-After` waited out and the statement sent again.
    waited: u64,
    by_status: BTreeMap<String, u64>,
    /// By kind: the count, and the first statement that got it.
    errors: BTreeMap<String, (u64, String)>,
}

impl Tally {
    fn merge(&mut self, other: Self) {
        self.sent += other.sent;
        self.waited += other.waited;
        for (status, n) in other.by_status {
            *self.by_status.entry(status).or_default() += n;
        }
        for (kind, (n, sql)) in other.errors {
            self.errors.entry(kind).or_insert((0, sql)).0 += n;
        }
    }

    fn add(&mut self, status: &str, error: Option<&str>, sql: &str) {
        self.sent += 1;

        *self.by_status.entry(status.to_owned()).or_default() += 1;
        if let Some(error) = error {
            self.errors
                .entry(kind_of(error))
                .or_insert_with(|| (0, sql.chars().take(300).collect()))
                .0 += 1;
        }
    }
}

impl Grammar {
    /// The generator a thread seeded `seed` uses.
    fn seeded(seed: u64) -> Self {
        let schema = |s: hindsight_store::arrow::datatypes::SchemaRef| columns(&s);
        Grammar {
            rng: Rng::seeded(seed),
            packets: schema(hindsight_store::schema::packets_schema()),
            flows: schema(hindsight_store::flows::flows_schema()),
        }
    }
}

/// Prints, as JSON lines, the statements each of `threads` threads seeded
/// from `seed` sends as its `from`th to its `to`th (from 0): to replay
/// statements a run sent about when a server misbehaved. A thread's
/// statements do not depend on the answers, only on its seed.
fn print_statements(seed: u64, threads: u64, from: u64, to: u64) {
    let mut out = std::io::stdout().lock();
    for thread in 0..threads {
        let mut grammar = Grammar::seeded(seed.wrapping_add(thread));
        for n in 0..to {
            let sql = grammar.statement();
            if n >= from {
                let line = serde_json::json!({"thread": thread, "n": n, "sql": sql});
                writeln!(out, "{line}").expect("stdout");
            }
        }
    }
}

/// What the fuzz threads share.
struct Run<'a> {
    hindsight: &'a Path,
    archive: &'a Path,
    base: &'a str,
    token: &'a str,
    cli_every: u64,
    cluster_every: u64,
    statements: u64,
    done: &'a std::sync::atomic::AtomicU64,
    stop: &'a std::sync::atomic::AtomicBool,
}

impl Run<'_> {
    /// Sends statements until `statements` are sent (by all threads) or a
    /// server stops answering: its tallies (API, cluster, CLI) and why it
    /// stopped early, if it did.
    fn worker(&self, seed: u64) -> (Tally, Tally, Tally, Option<String>) {
        use std::sync::atomic::Ordering;
        let agent = agent();
        let mut grammar = Grammar::seeded(seed);
        let (mut api, mut federated, mut cli) =
            (Tally::default(), Tally::default(), Tally::default());
        while !self.stop.load(Ordering::Relaxed) {
            let i = self.done.fetch_add(1, Ordering::Relaxed);
            if i >= self.statements {
                break;
            }
            let sql = grammar.statement();
            match ask(&agent, self.base, &sql, false, self.token) {
                Ok((status, error, waited)) => {
                    api.add(&status, error.as_deref(), &sql);
                    api.waited += waited;
                }
                Err(why) => {
                    self.stop.store(true, Ordering::Relaxed);
                    let why = format!("the server did not answer {sql:?}: {why}");
                    return (api, federated, cli, Some(why));
                }
            }
            if i.is_multiple_of(self.cluster_every) {
                match ask(&agent, self.base, &sql, true, self.token) {
                    Ok((status, error, waited)) => {
                        federated.add(&status, error.as_deref(), &sql);
                        federated.waited += waited;
                    }
                    Err(why) => {
                        self.stop.store(true, Ordering::Relaxed);
                        let why = format!("the cluster did not answer {sql:?}: {why}");
                        return (api, federated, cli, Some(why));
                    }
                }
            }
            if i.is_multiple_of(self.cli_every) {
                let mut child = Command::new(self.hindsight)
                    .args([
                        "sql",
                        "-",
                        "--sealed-only",
                        "--max-rows",
                        "1000",
                        "--archive",
                    ])
                    .arg(self.archive)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("run hindsight sql");
                let mut stdin = child.stdin.take().expect("piped");
                let text = sql.clone();
                let writer = std::thread::spawn(move || {
                    let _ = stdin.write_all(text.as_bytes());
                });
                let output = child.wait_with_output().expect("hindsight sql");
                let _ = writer.join();
                let stderr = String::from_utf8_lossy(&output.stderr);
                match output.status.code() {
                    Some(0) => cli.add("exit 0", None, &sql),
                    Some(code @ (1 | 3)) => cli.add(&format!("exit {code}"), Some(&stderr), &sql),
                    _ => {
                        self.stop.store(true, Ordering::Relaxed);
                        let why = format!(
                            "hindsight sql died on {sql:?}: {:?}: {stderr}",
                            output.status
                        );
                        return (api, federated, cli, Some(why));
                    }
                }
            }
        }
        (api, federated, cli, None)
    }
}

/// At most how often one statement is sent again after a 503 with
/// `Retry-After`.
const MAX_WAITS: u64 = 120;

/// Sends `sql` to `base`, as a client does: after a 503 with `Retry-After`
/// (statements given up on still compute, the server is past its resident
/// bound, the queue is full) it waits as told, up to 5 s, and sends it again,
/// at most [`MAX_WAITS`] times. The status and error of the last answer and
/// how many times it waited, or why the server did not answer.
fn ask(
    agent: &ureq::Agent,
    base: &str,
    sql: &str,
    cluster: bool,
    token: &str,
) -> Result<(String, Option<String>, u64), String> {
    let body = serde_json::json!({"sql": sql, "cluster": cluster, "max_rows": 1000}).to_string();
    let mut waited = 0;
    loop {
        let mut request = agent
            .post(format!("{base}/api/v1/sql"))
            .header("Content-Type", "application/json");
        if !token.is_empty() {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let mut response = request.send(body.as_bytes()).map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let bytes = response
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_vec()
            .map_err(|e| e.to_string())?;
        if status == 200 {
            return Ok(("200".to_owned(), None, waited));
        }
        let error = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .ok_or_else(|| {
                format!(
                    "{status} without a JSON error: {}",
                    String::from_utf8_lossy(&bytes)
                )
            })?;
        match retry_after {
            Some(seconds) if status == 503 && waited < MAX_WAITS => {
                waited += 1;
                std::thread::sleep(Duration::from_secs(seconds.clamp(1, 5)));
            }
            _ => return Ok((status.to_string(), Some(error), waited)),
        }
    }
}

fn main() {
    let Args {
        statements,
        seed,
        cli_every,
        threads,
        cluster_every,
        timeout_secs,
        work,
        print,
    } = Args::parse();
    if let Some(range) = print {
        let bounds = range
            .split_once("..")
            .and_then(|(from, to)| Some((from.parse().ok()?, to.parse().ok()?)));
        let Some((from, to)) = bounds else {
            eprintln!("sql_fuzz: --print takes FROM..TO, statement numbers of each thread");
            std::process::exit(2);
        };
        print_statements(seed, threads, from, to);
        return;
    }
    let hindsight = hindsight_binary();
    let temp = tempfile::tempdir().expect("a work directory");
    let dir = work.unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&dir).expect("the work directory");
    let archive = dir.join("archive");
    if !archive.exists() {
        run_quiet(
            Command::new(&hindsight)
                .args(["ingest", "--quiet", "--archive"])
                .arg(&archive)
                .arg(default_source()),
        );
    }
    // Node a answers alone and, with "cluster": true, asks itself and b
    // (the same archive, read by a second process).
    const TOKEN: &str = "sql-fuzz-cluster-token-0123456789";
    let node_token = |name: &str| format!("{name}-node-token-0123456789");
    let token_sha256 = hindsight_cluster::config::token_sha256;
    let (port_a, port_b) = (free_port(), free_port());
    let cluster = |name: &str| {
        format!(
            "archive = {:?}\n[api]\nmax_memory_mib = {MEMORY_MIB}\nmax_resident_mib = {RESIDENT_MIB}\n\
             worker_memory_mib = {WORKER_MIB}\n\
             timeout_secs = {timeout_secs}\n\
             max_body_bytes = 1048576\nmax_queued = 1024\n[cluster]\nname = \"{name}\"\n\
             token = \"{TOKEN}\"\nnode_token = \"{}\"\nindex = [\"a\"]\nsync_secs = 1\n\
             deadline_secs = 20\n\
             [[cluster.node]]\nname = \"a\"\nurl = \"http://127.0.0.1:{port_a}\"\ntoken_sha256 = \"{}\"\n\
             [[cluster.node]]\nname = \"b\"\nurl = \"http://127.0.0.1:{port_b}\"\ntoken_sha256 = \"{}\"\n",
            archive.to_str().expect("a UTF-8 path"),
            node_token(name),
            token_sha256(&node_token("a")),
            token_sha256(&node_token("b")),
        )
    };
    let (mut node_a, base) = start(&hindsight, &dir, "a", &cluster("a"), port_a);
    let (mut node_b, base_b) = start(&hindsight, &dir, "b", &cluster("b"), port_b);
    let started = Instant::now();
    let done = std::sync::atomic::AtomicU64::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let nodes = [("a", node_a.id()), ("b", node_b.id())];
    let run = Run {
        hindsight: &hindsight,
        archive: &archive,
        base: &base,
        token: TOKEN,
        cli_every,
        cluster_every,
        statements,
        done: &done,
        stop: &stop,
    };
    // The highest peak of a statement worker seen, less its file pages.
    let workers_peak = ChildrenPeak::start(&[node_a.id(), node_b.id()]);
    // Each thread its own generator (seed + thread) and tallies.
    let results: Vec<(Tally, Tally, Tally, Option<String>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let run = &run;
                scope.spawn(move || run.worker(seed.wrapping_add(t)))
            })
            .collect();
        // Watch the servers and report progress until the workers end.
        let mut reported = 0;
        while !workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(200));
            for (name, pid) in nodes {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    stop.store(true, std::sync::atomic::Ordering::Relaxed);
                    eprintln!("sql_fuzz: node {name} is gone");
                }
            }
            let n = done.load(std::sync::atomic::Ordering::Relaxed);
            if n / 1000 > reported {
                reported = n / 1000;
                eprintln!(
                    "sql_fuzz: {n} statements, {:.0} s, node a peak RSS {} MiB",
                    started.elapsed().as_secs_f64(),
                    peak_rss_kib(node_a.id()) >> 10
                );
            }
        }
        workers
            .into_iter()
            .map(|w| w.join().expect("a fuzz thread"))
            .collect()
    });
    let (mut api, mut federated, mut cli) = (Tally::default(), Tally::default(), Tally::default());
    let mut failure = None;
    for (a, f, c, why) in results {
        api.merge(a);
        federated.merge(f);
        cli.merge(c);
        failure = failure.or(why);
    }
    for (name, node) in [("a", &mut node_a), ("b", &mut node_b)] {
        if let Ok(Some(status)) = node.try_wait() {
            failure = Some(format!("node {name} exited ({status})"));
        }
    }
    // The bound counts anonymous memory; the peak holds the pages of the
    // binary and its libraries as well, which only grow as more code runs.
    let (peak_a, peak_b) = (peak_rss_kib(node_a.id()), peak_rss_kib(node_b.id()));
    let (file_a, file_b) = (file_rss_kib(node_a.id()), file_rss_kib(node_b.id()));
    for (name, peak, file) in [("a", peak_a, file_a), ("b", peak_b, file_b)] {
        if peak.saturating_sub(file) >> 10 > RESIDENT_MIB {
            failure.get_or_insert(format!(
                "node {name}'s peak RSS {} MiB less its {} MiB of file pages passed its \
                 max_resident_mib {RESIDENT_MIB}",
                peak >> 10,
                file >> 10
            ));
        }
    }
    let worker_peak = workers_peak.peak_mib();
    if worker_peak > WORKER_MIB {
        failure.get_or_insert(format!(
            "a statement worker's peak RSS less its file pages, {worker_peak} MiB, passed its \
             worker_memory_mib {WORKER_MIB}"
        ));
    }
    let cancelled = metric(&base, TOKEN, "hindsight_sql_cancelled_for_memory_total");
    let worker_count = |name| {
        [&base, &base_b]
            .iter()
            .map(|base| metric(base, TOKEN, name).unwrap_or(0))
            .sum::<u64>()
    };
    let (started_workers, died_workers) = (
        worker_count("hindsight_statement_workers_started_total"),
        worker_count("hindsight_statement_workers_died_total"),
    );
    println!(
        "# sql_fuzz: seed {seed}, {threads} threads, {:.0} s; servers' max_memory_mib = {MEMORY_MIB} per statement, {} for all at once (max_scans 2 + 1)",
        started.elapsed().as_secs_f64(),
        MEMORY_MIB * 3
    );
    for (path, tally) in [
        ("POST /api/v1/sql", &api),
        ("POST /api/v1/sql cluster", &federated),
        ("hindsight sql", &cli),
    ] {
        println!(
            "{path}: {} statements, {:?}; {} waits on a 503's Retry-After",
            tally.sent, tally.by_status, tally.waited
        );
    }
    let mut errors: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for tally in [&api, &federated, &cli] {
        for (kind, (n, sql)) in &tally.errors {
            let entry = errors
                .entry(kind.clone())
                .or_insert_with(|| (0, sql.clone()));
            entry.0 += n;
        }
    }
    println!("distinct errors: {}", errors.len());
    let mut by_count: Vec<_> = errors.into_iter().collect();
    by_count.sort_by_key(|kind| std::cmp::Reverse(kind.1.0));
    for (kind, (n, sql)) in by_count.iter().take(40) {
        println!("  {n:>7}  {kind}\n           e.g. {sql}");
    }
    println!(
        "peak RSS: node a {} MiB ({} MiB of them file pages), node b {} MiB ({}), against \
         max_resident_mib {RESIDENT_MIB}; node a cancelled {} statements for memory",
        peak_a >> 10,
        file_a >> 10,
        peak_b >> 10,
        file_b >> 10,
        cancelled.map_or_else(|| "?".to_owned(), |n| n.to_string())
    );
    println!(
        "statement workers: {started_workers} started, {died_workers} died running a statement; \
         highest peak RSS seen {worker_peak} MiB less file pages, against worker_memory_mib \
         {WORKER_MIB}"
    );
    let _ = node_a.kill();
    let _ = node_b.kill();
    // Why workers died, from the servers' logs, by kind.
    let mut deaths: BTreeMap<String, u64> = BTreeMap::new();
    for name in ["a", "b"] {
        let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        for line in log.lines() {
            if let Some((_, why)) = line.split_once("a statement worker died ") {
                *deaths.entry(kind_of(why)).or_default() += 1;
            }
        }
    }
    for (why, n) in &deaths {
        println!(
            "  {n:>7}  worker died {}",
            why.chars().take(300).collect::<String>()
        );
    }
    if let Some(failure) = failure {
        eprintln!("sql_fuzz: FAILED: {failure}");
        std::process::exit(1);
    }
}
