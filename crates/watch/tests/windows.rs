//! Sliding windows and window bounds, on lan-hour.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hindsight_sql::SqlSession;
use hindsight_store::arrow::array::{Array, Int64Array};
use hindsight_watch::replay::replay;
use hindsight_watch::{Answer, Bounds, WatchSpec, Watcher, WindowSpec};

fn lan_hour() -> PathBuf {
    Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets it"))
        .join("../../../shared/data/lan-hour-2012.pcap")
}

/// Runs `COUNT(*)` over live_packets with `window`, `bounds`; the count and
/// the rows cut, by window start.
fn counts(window: WindowSpec, bounds: Bounds) -> BTreeMap<i64, (i64, u64)> {
    let spec = WatchSpec {
        name: "count".to_owned(),
        sql: "SELECT count(*) AS n FROM live_packets".to_owned(),
        params: Vec::new(),
        window,
        bounds,
    };
    let mut watcher = Watcher::new(SqlSession::live_only().unwrap(), vec![spec], None).unwrap();
    let mut answers = Vec::<Answer>::new();
    replay(&[lan_hour()], &mut watcher, &mut |answer| {
        answers.push(answer)
    })
    .unwrap();
    answers
        .into_iter()
        .map(|answer| {
            let batches = answer.rows.unwrap();
            let n = batches[0]
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(0);
            (answer.start_ns, (n, answer.cut))
        })
        .collect()
}

#[test]
fn a_sliding_window_is_the_union_of_its_slides() {
    let minute = Duration::from_secs(60);
    let tumbling = counts(WindowSpec::tumbling(5 * minute), Bounds::default());
    let sliding = counts(
        WindowSpec {
            range: 10 * minute,
            slide: 5 * minute,
        },
        Bounds::default(),
    );
    let five = i64::try_from((5 * minute).as_nanos()).unwrap();
    // Every sliding window holds the two tumbling windows it covers.
    assert_eq!(sliding.len(), tumbling.len() + 1);
    for (&start, &(n, cut)) in &sliding {
        let first = tumbling.get(&start).map_or(0, |c| c.0);
        let second = tumbling.get(&(start + five)).map_or(0, |c| c.0);
        assert_eq!(n, first + second, "window at {start}");
        assert_eq!(cut, 0);
    }
    let total: i64 = tumbling.values().map(|c| c.0).sum();
    assert_eq!(total, 62_781);
}

#[test]
fn a_window_past_its_bounds_is_cut_and_says_so() {
    let bounds = Bounds {
        max_rows: 1000,
        ..Bounds::default()
    };
    let cut = counts(WindowSpec::tumbling(Duration::from_secs(600)), bounds);
    for (start, (n, cut)) in &cut {
        assert!(*n <= 1000, "window at {start}: {n} rows");
        assert!(*n + i64::try_from(*cut).unwrap() > 300, "window at {start}");
    }
    assert!(cut.values().any(|(_, cut)| *cut > 9000), "{cut:?}");
}

/// The sum of the first column of each answer of `sql` over lan-hour in one
/// hour-long window.
fn total(sql: &str) -> i64 {
    let spec = WatchSpec {
        name: "total".to_owned(),
        sql: sql.to_owned(),
        params: Vec::new(),
        window: WindowSpec::tumbling(Duration::from_secs(7200)),
        bounds: Bounds::default(),
    };
    let mut watcher = Watcher::new(SqlSession::live_only().unwrap(), vec![spec], None).unwrap();
    let mut sum = 0;
    replay(&[lan_hour()], &mut watcher, &mut |answer| {
        for batch in answer.rows.unwrap() {
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            sum += (0..column.len()).map(|i| column.value(i)).sum::<i64>();
        }
    })
    .unwrap();
    sum
}

#[test]
fn packet_bytes_are_kept_only_for_statements_that_read_them() {
    // A statement that reads `data` gets every packet's stored bytes, one
    // that does not gets the same rows without them.
    let kept = total("SELECT count(*) FROM live_packets WHERE data <> X''");
    assert!(kept > 60_000, "{kept}");
    let star = total("SELECT count(*) FROM (SELECT * FROM live_packets) AS p WHERE p.data <> X''");
    assert_eq!(star, kept);
    assert_eq!(total("SELECT count(*) FROM live_packets"), 62_781);
}

/// A statement that computes for hours in little memory whatever the window
/// holds: the window's packets joined with a long series.
const ENDLESS: &str = "SELECT count(*) AS n FROM live_packets, generate_series(1, 100000000000) \
                       AS s(v) WHERE wire_len + v = 7";

/// The answers of a watch of `sql` over lan-hour in 20-minute windows, with
/// `bounds`, and of a second, cheap watch beside it.
fn endless_answers(bounds: Bounds) -> (Vec<Answer>, Vec<Answer>) {
    let spec = |name: &str, sql: &str, bounds: Bounds| WatchSpec {
        name: name.to_owned(),
        sql: sql.to_owned(),
        params: Vec::new(),
        window: WindowSpec::tumbling(Duration::from_secs(1200)),
        bounds,
    };
    let specs = vec![
        spec("endless", ENDLESS, bounds),
        spec(
            "cheap",
            "SELECT count(*) AS n FROM live_packets",
            Bounds::default(),
        ),
    ];
    let mut watcher = Watcher::new(SqlSession::live_only().unwrap(), specs, None).unwrap();
    let mut answers = Vec::<Answer>::new();
    replay(&[lan_hour()], &mut watcher, &mut |answer| {
        answers.push(answer)
    })
    .unwrap();
    answers
        .into_iter()
        .partition(|answer| answer.watch == "endless")
}

#[test]
fn a_window_past_its_deadline_is_an_error_and_the_other_watches_answer() {
    let bounds = Bounds {
        window_timeout: Duration::from_millis(500),
        ..Bounds::default()
    };
    let (endless, cheap) = endless_answers(bounds);
    assert!(
        endless.len() >= 3 && endless.len() == cheap.len(),
        "one answer a window"
    );
    for answer in &endless {
        let error = answer.rows.as_ref().unwrap_err();
        assert!(error.contains("ran longer than"), "{error}");
    }
    let total: i64 = cheap
        .iter()
        .map(|answer| {
            let batches = answer.rows.as_ref().unwrap();
            batches[0]
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(0)
        })
        .sum();
    assert_eq!(total, 62_781, "the cheap watch answered every window");
}

#[test]
fn a_cancelled_watch_answers_each_window_with_an_error_at_once() {
    let bounds = Bounds::default();
    bounds.cancel.cancel();
    let (endless, cheap) = endless_answers(bounds);
    assert!(endless.len() >= 3 && endless.len() == cheap.len());
    for answer in &endless {
        let error = answer.rows.as_ref().unwrap_err();
        assert!(error.contains("cancelled"), "{error}");
    }
}
