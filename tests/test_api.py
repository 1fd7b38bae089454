"""The Python API: the README's example runs as written, and the API raises one error class."""
import re
from pathlib import Path

import pytest

import mpsprobe

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example():
    text = README.read_text(encoding="utf-8")
    match = re.search(r"<!-- api-example[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert match, "the README has no API example"
    return match.group(1)


def test_the_readme_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(readme_example(), "README.md (API example)", "exec"), namespace)
    out = capsys.readouterr().out
    run, report = namespace["run"], namespace["report"]
    assert run.state == "complete" and run.counts["pass"] == 1
    assert [r["op_id"] for r in run.results()] == ["add"]
    assert {op.aten_op for op in report.ops} >= {"aten::addmm", "aten::relu"}
    assert namespace["summary"]["distinct_ops"] == len({op.aten_op for op in report.ops})
    assert "refused:" in out and "no_such_op" in out


def test_import_is_light():
    import subprocess
    import sys
    code = "import sys, mpsprobe; print('torch' in sys.modules, 'sqlite_utils' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_user_errors_are_mpsprobe_errors(tmp_path):
    not_db = tmp_path / "notes.db"
    not_db.write_text("not a database")
    with pytest.raises(mpsprobe.MpsprobeError, match="not an SQLite database"):
        mpsprobe.open_db(not_db)
    mpsprobe.open_db(tmp_path / "empty.db").conn.close()
    with pytest.raises(mpsprobe.MpsprobeError, match="no probe results"):
        mpsprobe.findings(tmp_path / "empty.db")
