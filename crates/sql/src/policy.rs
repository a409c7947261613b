//! What a statement may do. SQL over the archive only reads unless the caller
//! asks for writes: the API and the web UI never do, the command line only with
//! `--allow-writes`. Two checks, both on parsed structure, never on the text:
//!
//! 1. the statement itself ([`check_read_only`]): a query, `EXPLAIN` of a
//!    query (without `ANALYZE` of anything else), `SHOW TABLES`, `SHOW COLUMNS`
//!    or `DESCRIBE`; every other statement (COPY, CREATE [EXTERNAL] TABLE or
//!    VIEW, INSERT, UPDATE, DELETE, DROP, SET, RESET, ...) is refused;
//! 2. the plan DataFusion made of it ([`read_only_options`]): no DDL, no DML,
//!    no statement (`SET`, transactions), which also catches `SELECT ... INTO`.
//!
//! A query names only the registered tables (`packets`, `flows`,
//! `information_schema`): the session does not resolve file paths as tables.

use datafusion::execution::context::SQLOptions;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;

use crate::SqlError;

/// Refuses `statement` unless it only reads.
pub(crate) fn check_read_only(statement: &DfStatement) -> Result<(), SqlError> {
    match statement {
        DfStatement::Statement(inner) => check_sql_statement(inner),
        DfStatement::Explain(explain) => check_read_only(&explain.statement),
        DfStatement::CreateExternalTable(_) => Err(refused("CREATE EXTERNAL TABLE")),
        DfStatement::CopyTo(_) => Err(refused("COPY")),
        DfStatement::Reset(_) => Err(refused("RESET")),
    }
}

fn check_sql_statement(statement: &Statement) -> Result<(), SqlError> {
    match statement {
        Statement::Query(_)
        | Statement::ShowTables { .. }
        | Statement::ShowColumns { .. }
        | Statement::ExplainTable { .. } => Ok(()),
        Statement::Explain { statement, .. } => check_sql_statement(statement),
        other => Err(refused(&leading_keywords(&other.to_string()))),
    }
}

/// The options DataFusion checks a read-only statement's plan against.
pub(crate) fn read_only_options() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
}

fn refused(statement: &str) -> SqlError {
    SqlError::ReadOnly {
        statement: statement.to_owned(),
    }
}

/// The statement's leading keywords, for the error: `CREATE VIEW`, `INSERT INTO`, `SET`.
fn leading_keywords(text: &str) -> String {
    let words: Vec<&str> = text
        .split_whitespace()
        .take_while(|word| {
            word.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') && !word.is_empty()
        })
        .take(3)
        .collect();
    if words.is_empty() {
        "this statement".to_owned()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_keywords_name_the_statement() {
        assert_eq!(leading_keywords("CREATE VIEW v AS SELECT 1"), "CREATE VIEW");
        assert_eq!(leading_keywords("INSERT INTO t VALUES (1)"), "INSERT INTO");
        assert_eq!(leading_keywords("SET datafusion.x = 1"), "SET");
        assert_eq!(leading_keywords("DROP TABLE packets"), "DROP TABLE");
        assert_eq!(leading_keywords("x"), "this statement");
    }
}
