//! Apache DataFusion Ballista over hindsight's archive, for questions larger
//! than one recorder: months of packet headers and connection records from
//! every node, in the segments each node copies to S3-compatible storage
//! (`[archive] object_store`).
//!
//! Ballista is DataFusion's own distributed engine, on the same DataFusion as
//! `hindsight sql`, so a statement means the same thing on both and hindsight's
//! SQL functions (`ip`, `ip_str`, `ip_prefix`, `ip_in`, `time_bucket`, and the
//! `flow_uid` behind `flows.uid`) run on its executors. What is here is only
//! what joins the two: Ballista's scheduler and executor processes with those
//! functions and S3 support, bound to loopback, and a client that names the
//! archive's tables over the copies. The engine is Ballista's.

use std::net::IpAddr;
use std::sync::Arc;

use ballista::prelude::SessionContextExt;
use ballista_core::object_store::{session_config_with_s3_support, session_state_with_s3_support};
use ballista_core::registry::BallistaFunctionRegistry;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SessionState;
use datafusion::prelude::{SessionConfig, SessionContext};

/// Ballista's functions and hindsight's, for an executor.
pub fn function_registry() -> BallistaFunctionRegistry {
    let mut registry = BallistaFunctionRegistry::default();
    for udf in hindsight_sql::scalar_functions() {
        let udf = Arc::new(udf);
        for name in std::iter::once(udf.name()).chain(udf.aliases().iter().map(String::as_str)) {
            registry
                .scalar_functions
                .insert(name.to_string(), Arc::clone(&udf));
        }
    }
    registry
}

/// A session state with S3 support and hindsight's functions: what the
/// scheduler plans with, and what the client starts from.
pub fn session_state(config: SessionConfig) -> Result<SessionState> {
    let context = SessionContext::new_with_state(session_state_with_s3_support(config)?);
    for udf in hindsight_sql::scalar_functions() {
        context.register_udf(udf);
    }
    Ok(context.state())
}

/// Refuses an address to listen on that is not loopback: Ballista's
/// scheduler and executors have no authentication, so they serve this
/// machine only (across machines, through a tunnel that authenticates).
pub fn check_loopback(host: &str) -> Result<()> {
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(())
    } else {
        Err(DataFusionError::Configuration(format!(
            "--bind-host {host}: Ballista's scheduler and executors have no authentication, \
             so hindsight-ballista listens on loopback only (127.0.0.1, ::1 or localhost); \
             reach other machines through an authenticating tunnel (SSH, WireGuard)"
        )))
    }
}

/// Where the client finds the archive and how it reaches the object store.
#[derive(Clone, Debug)]
pub struct Archives {
    /// Each node's `[archive] object_store` URL, `s3://bucket/prefix`.
    pub urls: Vec<String>,
    /// The S3 endpoint, for a store other than AWS (`http://127.0.0.1:8333`).
    pub endpoint: Option<String>,
    /// The region (default: from `AWS_REGION`, else `us-east-1`).
    pub region: Option<String>,
}

/// A client of the Ballista scheduler at `scheduler` (`df://host:port`) with
/// the archive's `packets` and `flows` tables over the segments copied under
/// each of `archives.urls`, and hindsight's functions. Credentials are each
/// process's own `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`: the
/// session's settings, which travel to the scheduler and executors, carry
/// only the endpoint and region.
pub async fn client(scheduler: &str, archives: &Archives) -> Result<SessionContext> {
    if archives.urls.is_empty() {
        return Err(DataFusionError::Configuration(
            "no archive: give --archive s3://bucket/prefix, the [archive] object_store \
             of each node to read"
                .into(),
        ));
    }
    let mut config = session_config_with_s3_support();
    if let Some(endpoint) = &archives.endpoint {
        config = config.set_str("s3.endpoint", endpoint);
        if endpoint.starts_with("http://") {
            config = config.set_str("s3.allow_http", "true");
        }
    }
    if let Some(region) = &archives.region {
        config = config.set_str("s3.region", region);
    }
    let context = SessionContext::remote_with_state(scheduler, session_state(config)?).await?;
    // Ballista's state for a remote scheduler keeps its own functions only.
    for udf in hindsight_sql::scalar_functions() {
        context.register_udf(udf);
    }
    let packets = listing(
        archives,
        "packets",
        hindsight_store::schema::packets_schema(),
    )?;
    context.register_table("packets", packets)?;
    let flows = listing(archives, "flows", hindsight_store::flows::flows_schema())?;
    context.register_table("flows", hindsight_sql::with_uid("flows", flows)?)?;
    Ok(context)
}

/// The segments of `table` under every archive, with the schema hindsight
/// writes (no file is read to learn it).
fn listing(archives: &Archives, table: &str, schema: SchemaRef) -> Result<Arc<ListingTable>> {
    let urls = archives
        .urls
        .iter()
        .map(|url| {
            let url = url.trim_end_matches('/');
            if !url.starts_with("s3://") {
                return Err(DataFusionError::Configuration(format!(
                    "--archive {url}: give the s3://bucket/prefix an archive copies its \
                     segments to"
                )));
            }
            ListingTableUrl::parse(format!("{url}/{table}/"))
        })
        .collect::<Result<Vec<_>>>()?;
    let options =
        ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema);
    Ok(Arc::new(ListingTable::try_new(config)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_is_listened_on() {
        for host in ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"] {
            assert!(check_loopback(host).is_ok(), "{host}");
        }
        for host in ["0.0.0.0", "::", "192.0.2.1", "example.com", ""] {
            let error = check_loopback(host).unwrap_err().to_string();
            assert!(error.contains("loopback only"), "{host}: {error}");
        }
    }

    #[test]
    fn executors_know_hindsights_functions() {
        let registry = function_registry();
        for name in [
            "ip",
            "ip_str",
            "ip_prefix",
            "ip_in",
            "flow_uid",
            "time_bucket",
            "sum",
        ] {
            let known = registry.scalar_functions.contains_key(name)
                || registry.aggregate_functions.contains_key(name);
            assert!(known, "{name}");
        }
    }
}
