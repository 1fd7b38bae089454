"""Where things live: SQL is the store's (db/) and the site's canned queries';
the engine, model check, CLI and catalogue ask db/ (its query layer and writer)."""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SQL = re.compile(r"\b(SELECT\s[\s\S]+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|"
                 r"CREATE\s+(TABLE|VIEW|INDEX|TRIGGER)|BEGIN\s+IMMEDIATE|PRAGMA\s+\w+)")


def sql_outside_the_store(root, folders=("probe", "ops")):
    """(file, line) of every string constant in `folders` that is SQL."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.JoinedStr):     # an f-string: its text, the fields as {}
                    text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    text = node.value
                else:
                    continue
                if SQL.search(text):
                    found.append((path.relative_to(root).as_posix(), node.lineno))
    return sorted(set(found))


def test_sql_is_the_stores():
    assert sql_outside_the_store(ROOT) == []


def test_the_scan_would_see_some(tmp_path):
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "x.py").write_text('Q = "SELECT id FROM runs"\nB = "BEGIN IMMEDIATE"\n'
                                             'T = "select the op, then run"\n'
                                             'F = f"SELECT {cols} FROM {table}"\n')
    assert sql_outside_the_store(tmp_path) == [("probe/x.py", 1), ("probe/x.py", 2), ("probe/x.py", 4)]
