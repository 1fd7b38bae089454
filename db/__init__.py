"""The SQLite store: schema, writes, views and queries."""
