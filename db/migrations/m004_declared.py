"""Schema 3 -> 4: the tables of what PyTorch declares, beside what we measure.

- `declared`: one predicted status per (torch_version, device, op_id, dtype),
  in the status vocabulary; device 'mps' (common_mps.py + OpInfo dtypesIfMPS)
  or 'cuda' (OpInfo dtypesIfCUDA); `source` names the list or rule.
- `declared_kernels`: every aten function of native_functions.yaml, whether it
  has an MPS kernel (its own or its structured delegate's), and whether it is
  composite.
- `declared_entries`: every entry of common_mps.py's lists as written
  (forward, gradient and error-input lists; macOS-gated ones with their gate).
- `declared_sources`: what was read for each (version, device, source): when,
  from where, and the error when it could not be read.

For a while migration 1 created these tables itself, so databases made then
already hold them (with the same columns): they are kept as they are.
"""


def migrate(db):
    tables = set(db.table_names())
    if "declared" not in tables:
        db["declared"].create({
            "torch_version": str, "device": str, "op_id": str, "dtype": str,
            "status": str, "source": str, "note": str,
        }, pk=("torch_version", "device", "op_id", "dtype"))
        db["declared"].create_index(["op_id", "dtype"])
    if "declared_kernels" not in tables:
        db["declared_kernels"].create({
            "torch_version": str, "aten_name": str, "name": str, "overload": str,
            "has_mps": int, "composite": str, "dispatch_keys": str, "structured_delegate": str,
        }, pk=("torch_version", "aten_name"))
        db["declared_kernels"].create_index(["name"])
    if "declared_entries" not in tables:
        db["declared_entries"].create({
            "torch_version": str, "modifier": str, "list_name": str, "list_key": str,
            "op_id": str, "dtypes": str, "gate": str,
        }, pk=("torch_version", "modifier", "list_name", "list_key"))
    if "declared_sources" not in tables:
        db["declared_sources"].create({
            "torch_version": str, "torch_version_key": str, "device": str, "source": str,
            "origin": str, "recorded": str, "ok": int, "error": str, "n_rows": int,
            "options": str,
        }, pk=("torch_version", "device", "source"))
