"""One vocabulary: no status word is spelt anywhere but mpsprobe/vocabulary.py.

Every string constant in the package's source (probe/, ops/, db/, site/),
docstrings aside, every template and every stylesheet is scanned: a constant
that is a status word, or that quotes one (SQL's 'pass', a template's "skip"),
or a status's CSS class or colour (st-pass, --st-pass), fails the test.
Code takes statuses from the vocabulary (PASS, FALLBACK, …, STATUSES).
"""
import ast
import re
from pathlib import Path

from mpsprobe import vocabulary
from mpsprobe.vocabulary import STATUSES

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("probe", "ops", "db", "site")
WORD = "|".join(STATUSES)
QUOTED = re.compile(rf"""['"]({WORD})['"]""")
CSS_CLASS = re.compile(rf"\bst-({WORD})\b")

# The same spelling with another meaning, each with its reason.
NOT_STATUSES = {
    ("ops/declared/common_mps.py", "skip"): "PyTorch's unittest.skip decorator, as the lists name it",
    ("ops/declared/reading.py", "error"): "the JSON key of a reading's read error",
    ("probe/cli/output.py", "error"): "the JSON key of a reading's read error",
    ("probe/api.py", "error"): "the JSON key of a release's download or read error (declared --versions)",
    ("db/writer.py", "error"): "the declared_sources.error column",
    ("db/migrations/m004_declared.py", "error"): "the declared_sources.error column",
    ("site/guard.py", "error"): "the JSON key of Datasette's error responses",
}


def _docstrings(tree):
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def status_literals():
    """(file, line, word) for every status word spelt outside the vocabulary."""
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == Path(vocabulary.__file__).resolve():
                continue
            name = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                    continue
                if id(node) in docs:
                    continue
                words = {node.value} & set(STATUSES) | set(QUOTED.findall(node.value))
                found += [(name, node.lineno, w) for w in words if (name, w) not in NOT_STATUSES]
        for path in sorted(p for ext in ("*.html", "*.css") for p in (ROOT / folder).rglob(ext)):
            name = path.relative_to(ROOT).as_posix()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                words = set(QUOTED.findall(line)) | set(CSS_CLASS.findall(line))
                found += [(name, number, w) for w in words]
    return found


def test_no_status_word_outside_the_vocabulary():
    assert status_literals() == []


def test_the_scan_would_see_one(tmp_path, monkeypatch):
    module = tmp_path / "probe" / "bad.py"
    module.parent.mkdir()
    module.write_text('"""A docstring may say pass."""\nSTATUS = "pass"\nSQL = "WHERE status = \'crash\'"\n')
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "x.css").write_text(".st-skip { color: var(--st-error); }\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert sorted(w for _, _, w in status_literals()) == ["crash", "error", "pass", "skip"]


def test_every_status_has_its_words():
    for name in STATUSES:
        status = vocabulary.STATUS[name]
        assert status.symbol and status.label and status.meaning
        assert re.fullmatch(r"#[0-9a-f]{6}", status.colour) and re.fullmatch(r"#[0-9a-f]{6}", status.background)
    assert vocabulary.worst([vocabulary.PASS, vocabulary.CRASH, vocabulary.SKIP]) == vocabulary.CRASH
    for answer in vocabulary.ANSWERS:
        assert vocabulary.ANSWER[answer].symbol and vocabulary.ANSWER[answer].label
