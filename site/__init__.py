"""The Datasette face of an mpsprobe database."""
