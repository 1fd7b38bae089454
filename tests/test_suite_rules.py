"""The suite's own rules: fixtures come from conftest.py through pytest, and no
test module imports conftest or another test module (each file runs alone)."""
import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imports_of_tests(folder):
    """(file, line, module) for every import of conftest or of a test_* module."""
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            found += [(path.name, node.lineno, n) for n in names
                      if n.split(".")[-1] == "conftest" or n.split(".")[-1].startswith("test_")]
    return found


def test_no_test_module_imports_conftest_or_another_test():
    assert imports_of_tests(TESTS) == []


def test_the_scan_would_see_one(tmp_path):
    (tmp_path / "test_a.py").write_text("from conftest import X\nimport test_b\nimport json\n")
    assert imports_of_tests(tmp_path) == [("test_a.py", 1, "conftest"), ("test_a.py", 2, "test_b")]
