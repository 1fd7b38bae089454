"""The one query layer over the store: run selection, history, findings, blame."""
