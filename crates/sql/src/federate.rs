//! SQL over a cluster's nodes: the statement is planned where it was asked,
//! over tables that stand for the nodes' (`RemoteTable`), and the plan is cut
//! where each table's rows can be reduced on the node that holds them: the
//! filters and projections over one scan, and the partial aggregation above
//! them (DataFusion's `AggregateExec` in `Partial` mode, whose state merges:
//! sums, counts, minima, the groups of a `count(DISTINCT ...)`, the inputs of
//! a top-k). Each cut subtree is sent to the nodes that may hold its rows, as
//! DataFusion's own protobuf form of a physical plan; each node puts its own
//! scan in place of the table's stand-in, runs the subtree and answers with an
//! Arrow IPC stream; the rest of the plan (the final aggregation, sorts,
//! limits, joins) runs where the statement was asked, over the union of the
//! nodes' answers.
//!
//! A node runs only what a cut can hold: [`check_fragment`] refuses any other
//! operator, so a peer cannot make it read a file or write one.

use std::io::Read;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, ScalarUDF, TableProviderFilterPushDown};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::LocalLimitExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream, replace_children_if_necessary,
};
use datafusion_proto::logical_plan::DefaultLogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use futures::{SinkExt, StreamExt};
use hindsight_model::Addr16;
use hindsight_store::{Table, TimeRange};
use prost::Message;

use crate::peer_ipc::BoundedIpc;
use crate::prune;

/// The most bytes of a fragment a node decodes.
pub const MAX_FRAGMENT_BYTES: usize = 1 << 20;

/// The most partitions a fragment's repartition may make.
const MAX_PARTITIONS: usize = 64;

/// The nodes of a cluster as the statement's planner sees them.
pub trait Nodes: Send + Sync + std::fmt::Debug {
    /// The nodes that may hold rows of `table` in `time` with, for each of
    /// `addresses`, a source or destination in it (none: any address).
    fn route(
        &self,
        table: Table,
        time: TimeRange,
        addresses: &[Vec<(Addr16, Addr16)>],
    ) -> Vec<String>;

    /// Sends `fragment` to `node`; its answer, an Arrow IPC stream, or why
    /// there is none.
    fn ask(&self, node: &str, fragment: &[u8]) -> Result<Box<dyn Read + Send>, String>;

    /// `node`'s answer is missing or incomplete, for `reason`.
    fn missing(&self, node: &str, reason: String);
}

/// A table of the cluster: its schema, and a scan that says which nodes to
/// ask.
#[derive(Debug)]
pub struct RemoteTable {
    table: Table,
    nodes: Arc<dyn Nodes>,
}

impl RemoteTable {
    /// `table` over `nodes`.
    pub fn new(table: Table, nodes: Arc<dyn Nodes>) -> Self {
        Self { table, nodes }
    }
}

#[async_trait]
impl TableProvider for RemoteTable {
    fn schema(&self) -> SchemaRef {
        self.table.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let addresses = if self.table == Table::Packets || self.table == Table::Flows {
            prune::address_sets(filters)
        } else {
            Vec::new()
        };
        let nodes = self
            .nodes
            .route(self.table, prune::time_range(filters), &addresses);
        Ok(Arc::new(NodeScan::new(
            self.table,
            projection.cloned(),
            filters.to_vec(),
            limit,
            nodes,
        )?))
    }
}

/// The stand-in for one table's scan on each node: what the node's own scan
/// takes (columns, conditions, limit), and, where the statement is planned,
/// the nodes that may hold its rows.
#[derive(Debug)]
pub struct NodeScan {
    table: Table,
    projection: Option<Vec<usize>>,
    filters: Vec<Expr>,
    limit: Option<usize>,
    nodes: Vec<String>,
    properties: Arc<PlanProperties>,
}

impl NodeScan {
    fn new(
        table: Table,
        projection: Option<Vec<usize>>,
        filters: Vec<Expr>,
        limit: Option<usize>,
        nodes: Vec<String>,
    ) -> Result<Self> {
        let schema = match &projection {
            Some(columns) => Arc::new(table.schema().project(columns)?),
            None => table.schema(),
        };
        Ok(Self {
            table,
            projection,
            filters,
            limit,
            nodes,
            properties: Arc::new(properties(schema, 1)),
        })
    }
}

fn properties(schema: SchemaRef, partitions: usize) -> PlanProperties {
    PlanProperties::new(
        EquivalenceProperties::new(schema),
        Partitioning::UnknownPartitioning(partitions),
        EmissionType::Incremental,
        Boundedness::Bounded,
    )
}

impl DisplayAs for NodeScan {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "NodeScan: table={}", self.table.name())?;
        if !self.filters.is_empty() {
            let filters: Vec<String> = self.filters.iter().map(ToString::to_string).collect();
            write!(f, ", filters=[{}]", filters.join(", "))?;
        }
        if let Some(limit) = self.limit {
            write!(f, ", limit={limit}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for NodeScan {
    fn name(&self) -> &str {
        "NodeScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(&self, _: usize, _: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        Err(DataFusionError::Internal(
            "a node's scan runs on the node: the plan was not cut".to_owned(),
        ))
    }
}

/// A cut subtree, run on each of its nodes: one partition per node.
#[derive(Debug)]
pub struct NodesExec {
    fragment: Arc<dyn ExecutionPlan>,
    bytes: Arc<Vec<u8>>,
    nodes: Vec<String>,
    cluster: Arc<dyn Nodes>,
    properties: Arc<PlanProperties>,
    /// The most bytes one node's answer may hold.
    max_answer_bytes: u64,
}

impl DisplayAs for NodesExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let plan = datafusion::physical_plan::displayable(self.fragment.as_ref())
            .one_line()
            .to_string();
        write!(
            f,
            "NodesExec: nodes=[{}], on each: {}",
            self.nodes.join(", "),
            plan.trim_end()
        )
    }
}

impl ExecutionPlan for NodesExec {
    fn name(&self) -> &str {
        "NodesExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let Some(node) = self.nodes.get(partition).cloned() else {
            // No node may hold rows: one empty partition.
            let empty = futures::stream::empty::<Result<RecordBatch>>();
            return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, empty)));
        };
        let (mut tx, rx) = futures::channel::mpsc::channel::<RecordBatch>(2);
        let (bytes, cluster) = (Arc::clone(&self.bytes), Arc::clone(&self.cluster));
        let expected = Arc::clone(&schema);
        let max_bytes = self.max_answer_bytes;
        std::thread::Builder::new()
            .name(format!("sql-{node}"))
            .spawn(move || {
                let failure = match cluster.ask(&node, &bytes) {
                    Ok(body) => {
                        let body = BoundedIpc::new(body, max_bytes);
                        // A reader that panics on what a peer sent must not
                        // end the answer as if it were whole.
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            stream_answer(body, &expected, &mut tx)
                        }))
                        .unwrap_or_else(|_| Err("its answer could not be read".to_owned()))
                        .err()
                    }
                    Err(reason) => Some(reason),
                };
                if let Some(reason) = failure {
                    cluster.missing(&node, reason);
                }
            })
            .map_err(|e| DataFusionError::External(e.into()))?;
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            rx.map(Ok::<_, DataFusionError>),
        )))
    }
}

/// Hands the batches of one node's answer to `tx`; why it broke off, if it did.
fn stream_answer(
    body: BoundedIpc<Box<dyn Read + Send>>,
    expected: &SchemaRef,
    tx: &mut futures::channel::mpsc::Sender<RecordBatch>,
) -> Result<(), String> {
    let reader = datafusion::arrow::ipc::reader::StreamReader::try_new(body, None)
        .map_err(|e| format!("its answer is not an Arrow stream: {e}"))?;
    let mut rows = 0usize;
    for batch in reader {
        let batch = batch.map_err(|e| format!("its answer broke off after {rows} rows: {e}"))?;
        let types = |schema: &SchemaRef| -> Vec<_> {
            schema
                .fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect()
        };
        if types(&batch.schema()) != types(expected) {
            return Err("its answer has other columns than the statement's".to_owned());
        }
        // The answer's batches carry the node's field metadata; the plan's
        // schema is the one the statement's operators expect.
        // A batch of no columns (a count over a fragment that reads none)
        // carries its rows as a count.
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        let batch = RecordBatch::try_new_with_options(
            Arc::clone(expected),
            batch.columns().to_vec(),
            &options,
        )
        .map_err(|e| format!("its answer does not fit the statement: {e}"))?;
        rows += batch.num_rows();
        if futures::executor::block_on(tx.send(batch)).is_err() {
            // The statement has what it wanted.
            return Ok(());
        }
    }
    Ok(())
}

/// The physical optimizer rule that cuts a plan over [`RemoteTable`]s into
/// fragments for the nodes ([`NodesExec`]); it runs after DataFusion's own.
#[derive(Debug)]
pub struct Federate {
    cluster: Arc<dyn Nodes>,
    max_answer_bytes: u64,
}

impl Federate {
    /// Cuts plans over `cluster`'s tables; each node's answer to a fragment
    /// may hold at most `max_answer_bytes`.
    pub fn new(cluster: Arc<dyn Nodes>, max_answer_bytes: u64) -> Self {
        Self {
            cluster,
            max_answer_bytes,
        }
    }

    fn cut(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(nodes) = shippable(&plan, true) {
            let bytes = encode_fragment(&plan)?;
            let partitions = nodes.len().max(1);
            // The operator above was planned for the subtree's partitions: one
            // stays one (a global limit, a nested loop join's left side take
            // no more), however many nodes answer.
            let single = plan.properties().partitioning.partition_count() == 1 && partitions > 1;
            let nodes: Arc<dyn ExecutionPlan> = Arc::new(NodesExec {
                properties: Arc::new(properties(plan.schema(), partitions)),
                fragment: plan,
                bytes: Arc::new(bytes),
                nodes,
                cluster: Arc::clone(&self.cluster),
                max_answer_bytes: self.max_answer_bytes,
            });
            return Ok(if single {
                Arc::new(CoalescePartitionsExec::new(nodes))
            } else {
                nodes
            });
        }
        let children = plan
            .children()
            .into_iter()
            .map(|child| self.cut(Arc::clone(child)))
            .collect::<Result<Vec<_>>>()?;
        if children.is_empty() {
            return Ok(plan);
        }
        replace_children_if_necessary(plan, children)
    }
}

impl PhysicalOptimizerRule for Federate {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.cut(plan)
    }

    fn name(&self) -> &str {
        "federate"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether `plan` is an operator a node may run for the statement (`top`:
/// the cut's root, where a partial aggregation or a local limit may stand).
fn allowed(plan: &Arc<dyn ExecutionPlan>, top: bool) -> bool {
    let plan = plan.as_ref();
    if plan.is::<FilterExec>() || plan.is::<ProjectionExec>() || plan.is::<CooperativeExec>() {
        return true;
    }
    if let Some(repartition) = plan.downcast_ref::<RepartitionExec>() {
        // A hash repartition places rows for the operator above it; that
        // operator runs where the statement was asked.
        return matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(n) if *n <= MAX_PARTITIONS)
            && !repartition.preserve_order();
    }
    if top && plan.is::<LocalLimitExec>() {
        return true;
    }
    if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        return top && *aggregate.mode() == AggregateMode::Partial;
    }
    false
}

/// The nodes of the one table `plan` scans, if `plan` is a subtree a node can
/// run whole: a chain of allowed operators down to a [`NodeScan`].
fn shippable(plan: &Arc<dyn ExecutionPlan>, top: bool) -> Option<Vec<String>> {
    if let Some(scan) = plan.as_ref().downcast_ref::<NodeScan>() {
        return Some(scan.nodes.clone());
    }
    if !allowed(plan, top) {
        return None;
    }
    let [child] = plan.children()[..] else {
        return None;
    };
    // Below a partial aggregation or a limit, only operators on single rows.
    let below_top =
        top && !plan.as_ref().is::<AggregateExec>() && !plan.as_ref().is::<LocalLimitExec>();
    shippable(child, below_top)
}

/// The protobuf form of a fragment.
fn encode_fragment(plan: &Arc<dyn ExecutionPlan>) -> Result<Vec<u8>> {
    let bytes = datafusion_proto::bytes::physical_plan_to_bytes_with_extension_codec(
        Arc::clone(plan),
        &FragmentCodec,
    )?;
    Ok(bytes.to_vec())
}

/// Decodes a fragment sent by another node and checks that it holds only what
/// a cut can hold; its scans are still [`NodeScan`]s ([`localize`] replaces them).
pub fn decode_fragment(bytes: &[u8], context: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
    if bytes.len() > MAX_FRAGMENT_BYTES {
        return Err(DataFusionError::Plan(format!(
            "the fragment is {} bytes, more than {MAX_FRAGMENT_BYTES}",
            bytes.len()
        )));
    }
    // DataFusion's decoder panics on some damaged plans (an aggregation's
    // column index past its input's columns): a damaged fragment is an error.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec(
            bytes,
            context,
            &FragmentCodec,
        )
    }));
    let plan = match decoded {
        Ok(plan) => plan?,
        Err(_) => {
            return Err(DataFusionError::Plan(
                "the fragment is damaged: DataFusion's decoder failed on it".to_owned(),
            ));
        }
    };
    if shippable(&plan, true).is_none() {
        return Err(DataFusionError::Plan(format!(
            "the fragment is not one this node runs (filters, projections and a partial \
             aggregation over one table): {}",
            datafusion::physical_plan::displayable(plan.as_ref()).one_line()
        )));
    }
    Ok(plan)
}

/// `plan` with each [`NodeScan`] replaced by the scan of `provider` for its
/// table.
pub async fn localize(
    plan: Arc<dyn ExecutionPlan>,
    state: &dyn Session,
    provider: &(dyn Fn(Table) -> Option<Arc<dyn TableProvider>> + Sync),
) -> Result<Arc<dyn ExecutionPlan>> {
    if let Some(scan) = plan.as_ref().downcast_ref::<NodeScan>() {
        let Some(table) = provider(scan.table) else {
            return Err(DataFusionError::Plan(format!(
                "this node has no table {}",
                scan.table.name()
            )));
        };
        return table
            .scan(state, scan.projection.as_ref(), &scan.filters, scan.limit)
            .await;
    }
    let mut children = Vec::new();
    for child in plan.children() {
        children.push(Box::pin(localize(Arc::clone(child), state, provider)).await?);
    }
    if children.is_empty() {
        return Ok(plan);
    }
    replace_children_if_necessary(plan, children)
}

/// Runs a localized fragment, all its partitions in one stream.
pub fn execute_fragment(
    plan: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
) -> Result<SendableRecordBatchStream> {
    let plan: Arc<dyn ExecutionPlan> = if plan.properties().partitioning.partition_count() > 1 {
        Arc::new(CoalescePartitionsExec::new(plan))
    } else {
        plan
    };
    plan.execute(0, context)
}

/// How a [`NodeScan`] travels: its table, columns, conditions (DataFusion's
/// protobuf form of logical expressions, hex) and limit.
#[derive(serde::Serialize, serde::Deserialize)]
struct ScanForm {
    table: String,
    projection: Option<Vec<usize>>,
    filters: String,
    limit: Option<usize>,
}

#[derive(Debug)]
struct FragmentCodec;

impl PhysicalExtensionCodec for FragmentCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let form: ScanForm = serde_json::from_slice(buf)
            .map_err(|e| DataFusionError::Plan(format!("a scan of the fragment: {e}")))?;
        if !inputs.is_empty() {
            return Err(DataFusionError::Plan("a scan has no inputs".to_owned()));
        }
        let table = Table::from_name(&form.table)
            .ok_or_else(|| DataFusionError::Plan(format!("no table {:?}", form.table)))?;
        let bytes = hex_decode(&form.filters)
            .ok_or_else(|| DataFusionError::Plan("a scan's conditions are not hex".to_owned()))?;
        let list = datafusion_proto::protobuf::LogicalExprList::decode(bytes.as_slice())
            .map_err(|e| DataFusionError::Plan(format!("a scan's conditions: {e}")))?;
        let filters = datafusion_proto::logical_plan::from_proto::parse_exprs(
            &list.expr,
            ctx,
            &DefaultLogicalExtensionCodec {},
        )?;
        Ok(Arc::new(NodeScan::new(
            table,
            form.projection,
            filters,
            form.limit,
            Vec::new(),
        )?))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(scan) = node.as_ref().downcast_ref::<NodeScan>() else {
            return Err(DataFusionError::NotImplemented(format!(
                "{} cannot be sent to a node",
                node.name()
            )));
        };
        let list = datafusion_proto::protobuf::LogicalExprList {
            expr: datafusion_proto::logical_plan::to_proto::serialize_exprs(
                &scan.filters,
                &DefaultLogicalExtensionCodec {},
            )?,
        };
        let form = ScanForm {
            table: scan.table.name().to_owned(),
            projection: scan.projection.clone(),
            filters: hex_encode(&list.encode_to_vec()),
            limit: scan.limit,
        };
        serde_json::to_writer(buf, &form).map_err(|e| DataFusionError::External(e.into()))
    }

    fn try_decode_udf(&self, name: &str, _buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        // The one function of the tables that no session registers by name.
        match name {
            "flow_uid" => Ok(Arc::new(crate::functions::flow_uid())),
            _ => Err(DataFusionError::Plan(format!("no function {name}"))),
        }
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
