//! `hindsight watch`: its arguments and run are `hindsight_watch::command`.

pub use hindsight_watch::command::{Args, run};
