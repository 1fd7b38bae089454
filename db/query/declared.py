"""What the store holds of PyTorch's declarations: which versions, which rows."""
from mpsprobe.versions import same_release, sort_key  # noqa: F401 (same_release: for callers)
from . import present, rows


def declared_device(run_device):
    """Which declaration a run on `run_device` is compared with (None: none fits)."""
    device = (run_device or "").split(":", 1)[0]
    if device in ("mps", "fake-mps"):
        return "mps"
    if device == "cuda":
        return "cuda"
    return None


def versions(conn, device):
    """Torch versions with declared rows for `device`, oldest first."""
    if "declared" not in present(conn):
        return []
    # A walk over the primary key (torch_version, device, …), one step per version:
    # DISTINCT read every row of a 14-release history (a tenth of a second a call).
    found = [r["v"] for r in rows(conn, """
        WITH RECURSIVE walk(v) AS (
            SELECT min(torch_version) FROM declared
            UNION ALL
            SELECT (SELECT min(torch_version) FROM declared WHERE torch_version > walk.v)
            FROM walk WHERE walk.v IS NOT NULL)
        SELECT v FROM walk
        WHERE v IS NOT NULL AND EXISTS (SELECT 1 FROM declared WHERE torch_version = v AND device = ?)""",
                                      [device])]
    return sorted(found, key=sort_key)


def kernel_versions(conn):
    """Torch versions with a reading of native_functions.yaml, oldest first."""
    if "declared_kernels" not in present(conn):
        return []
    found = [r["torch_version"] for r in rows(
        conn, "SELECT DISTINCT torch_version FROM declared_kernels")]
    return sorted(found, key=sort_key)


def version_for(conn, device, torch_version):
    """The declared version of `device` that stands for a run of `torch_version`, or None."""
    return same_release(versions(conn, device), torch_version)


def choices(conn):
    """Every (torch version, device) with declared rows, newest version first."""
    if "declared" not in present(conn):
        return []
    found = rows(conn, "SELECT torch_version, device, count(*) AS n FROM declared "
                       "GROUP BY torch_version, device")
    found.sort(key=lambda r: r["device"])
    found.sort(key=lambda r: sort_key(r["torch_version"]), reverse=True)
    return found


def matrix(conn, torch_version, device, op_like=""):
    if "declared" not in present(conn):
        return []
    return rows(conn, """
        SELECT op_id, dtype, status, source, note FROM declared
        WHERE torch_version = ? AND device = ? AND (? = '' OR op_id LIKE ?)""",
                [torch_version, device, op_like, op_like])


def for_op(conn, op_id):
    """Every declared row of one op, newest torch version first. (The store has
    declared tables from schema 4 on; a database served as it is may lack them.)"""
    if "declared" not in present(conn):
        return []
    found = rows(conn, "SELECT torch_version, device, dtype, status, source, note FROM declared "
                       "WHERE op_id = ?", [op_id])
    found.sort(key=lambda r: (r["device"], r["dtype"]))
    found.sort(key=lambda r: sort_key(r["torch_version"]), reverse=True)
    return found
