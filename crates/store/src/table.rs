//! The tables of an archive. Each has its own directory of segments; all share
//! the catalog (entries name their table) and one sequence of segment ids.

use arrow::datatypes::SchemaRef;

/// A table of the archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// One row per captured packet (`schema`).
    Packets,
    /// One row per connection record (`flows`).
    Flows,
}

impl Table {
    /// Every table.
    pub const ALL: [Self; 2] = [Self::Packets, Self::Flows];

    /// Returns the table's name, which is also its segment directory and the
    /// `table` of its catalog entries.
    pub fn name(self) -> &'static str {
        match self {
            Self::Packets => "packets",
            Self::Flows => "flows",
        }
    }

    /// Returns the table named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Returns the table's Arrow schema.
    pub fn schema(self) -> SchemaRef {
        match self {
            Self::Packets => crate::schema::packets_schema(),
            Self::Flows => crate::flows::flows_schema(),
        }
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
