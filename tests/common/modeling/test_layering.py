"""Floors: ``common/modeling`` is the ground floor of the torch code; it never imports the
services (engines are assembled above them, in ``treespec/engine.py``)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
UPPER_FLOORS = ("services", "treespec")


def imported_modules(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in ``path`` (also inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


class TestModelingFloor:
    def test_no_module_imports_the_services(self):
        """No module under common/modeling imports services/ or treespec/, even lazily."""
        offenders = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p) if m.split(".")[0] in UPPER_FLOORS)
                     for p in sorted((ROOT / "common" / "modeling").glob("*.py"))}
        assert {k: v for k, v in offenders.items() if v} == {}

    def test_checker_sees_lazy_imports(self, tmp_path):
        """The checker finds an import hidden inside a function body."""
        src = tmp_path / "m.py"
        src.write_text("def f():\n    from services.scheduler.core import SchedulerCore\n")
        assert "services.scheduler.core" in imported_modules(src)
