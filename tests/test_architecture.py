"""The functional core imports no Django (DESIGN: "Functional core, imperative shell").

Two checks per module: its import statements, parsed with `ast` (first-party imports must
stay inside the pure core, third-party ones must not be the shell), and a real import in a
fresh interpreter, after which no Django module may be loaded."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PURE_FILES = sorted(
    list((ROOT / "mission_weave" / "core").rglob("*.py"))
    + [ROOT / "apps" / "dashboard" / "graph.py"]
    + list((ROOT / "mission_weave" / "protocol").rglob("*.py"))
    + list((ROOT / "mission_weave" / "sdk").rglob("*.py")))

# The imperative shell (DESIGN.md): none of it may be imported by the core.
SHELL = frozenset({"django", "rest_framework", "drf_spectacular", "channels", "channels_redis",
                   "daphne", "celery"})
FIRST_PARTY = frozenset({"apps", "mission_weave", "tests"})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


PURE_MODULES = {module_name(path) for path in PURE_FILES}
# Importing a pure module also runs its packages' __init__ files.
PURE_PACKAGES = {name.rsplit(".", depth)[0] for name in PURE_MODULES
                 for depth in range(1, name.count(".") + 1)}


def imported_modules(path: Path) -> set:
    """Absolute names of every module `path` imports, at any nesting level."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from pkg import name` may name a submodule: count both.
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return found


def ids(paths):
    return [str(path.relative_to(ROOT)) for path in paths]


def test_the_core_is_where_the_design_says():
    assert {"mission_weave.core.lifecycle", "mission_weave.core.state",
            "mission_weave.core.commands", "mission_weave.core.fencing",
            "mission_weave.core.dag", "mission_weave.core.schemas", "mission_weave.core.chain",
            "mission_weave.protocol.errors"} <= PURE_MODULES


@pytest.mark.parametrize("path", PURE_FILES, ids=ids(PURE_FILES))
def test_core_module_imports_nothing_of_the_shell(path):
    imported = imported_modules(path)

    shell = sorted(name for name in imported if name.split(".")[0] in SHELL)
    first_party = {name for name in imported if name.split(".")[0] in FIRST_PARTY}
    # A first-party name is pure if it is a pure module or package, or an attribute of one
    # (`from .state import ACTIVE` yields "apps.work.state.ACTIVE").
    impure = sorted(name for name in first_party
                    if name not in PURE_MODULES | PURE_PACKAGES
                    and name.rpartition(".")[0] not in PURE_MODULES)
    assert shell == []
    assert impure == []


IMPORT_CHECK = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in set(sys.argv[2:]))))
"""


@pytest.mark.parametrize("module", sorted(PURE_MODULES))
def test_core_module_imports_without_loading_django(module):
    env = {key: value for key, value in os.environ.items()
           if key != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)

    result = subprocess.run([sys.executable, "-c", IMPORT_CHECK, module, *sorted(SHELL)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_the_ast_check_resolves_relative_imports_into_the_shell():
    # Guard the guard: store.py is shell (`from . import models`), lifecycle.py is not.
    core = ROOT / "mission_weave" / "core"
    assert "apps.work.models" in imported_modules(ROOT / "apps" / "work" / "store.py")
    assert "mission_weave.core.state" in imported_modules(core / "lifecycle.py")
    assert "apps.work.models" not in imported_modules(core / "lifecycle.py")


def test_the_import_check_sees_django_when_it_is_loaded():
    result = subprocess.run([sys.executable, "-c", IMPORT_CHECK, "django.utils.timezone",
                             *sorted(SHELL)], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)

    assert "django.utils.timezone" in json.loads(result.stdout)
