"""The layering rule (docs/architecture.md), checked on every import statement, at any
nesting level, of every module:

- mission_weave.protocol is the bottom: it imports nothing else of ours.
- mission_weave.core (the pure core) imports only itself and the protocol, and nothing of
  the shell (Django, DRF, Channels, Celery) or of apps/.
- mission_weave.sdk (the Agent SDK) imports only itself and the protocol, and no shell.
- The bridges beside it, mission_weave.mcp_server and mission_weave.a2a_bridge, are SDK
  clients: they import the SDK, the protocol and themselves, never the server; and only
  each one imports its optional package (`mcp`, `a2a`), so the SDK installs without them.
- The shell apps are layered, each importing only the core, the protocol, the project
  package and the apps below it in APP_LAYERS; so no two apps import each other.

Each test prints every import that breaks its rule. A core module is also imported in a
fresh interpreter, after which no Django module may be loaded."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Where each distribution's packages live: the server's at the root, the Agent SDK's
# (missionweave-sdk: mission_weave.protocol and mission_weave.sdk) under sdk/src.
SOURCE_ROOTS = (ROOT / "sdk" / "src", ROOT)

# Bottom to top: an app may import the ones before it, never one after it.
APP_LAYERS = ["ledger", "identity", "artifacts", "work", "review", "delivery", "notify",
              "webhooks", "api", "dashboard", "operations", "bench"]
SHELL = frozenset({"django", "rest_framework", "drf_spectacular", "channels", "channels_redis",
                   "daphne", "celery"})
# The project package's own modules (settings, urls, asgi, ...) are shell; these are not.
PURE_PACKAGES = {"mission_weave.protocol": {"mission_weave.protocol"},
                 "mission_weave.core": {"mission_weave.core", "mission_weave.protocol"},
                 "mission_weave.sdk": {"mission_weave.sdk", "mission_weave.protocol"},
                 "mission_weave.mcp_server": {"mission_weave.mcp_server", "mission_weave.sdk",
                                              "mission_weave.protocol"},
                 "mission_weave.a2a_bridge": {"mission_weave.a2a_bridge", "mission_weave.sdk",
                                              "mission_weave.protocol"}}
# The SDK's optional extras (sdk/pyproject.toml), each imported by its bridge alone.
EXTRAS = {"mcp": "mission_weave.mcp_server", "a2a": "mission_weave.a2a_bridge"}


def module_name(path: Path) -> str:
    root = next(root for root in SOURCE_ROOTS if path.is_relative_to(root))
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `path`."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.append((node.lineno, base))
    return found


def sources(folder: str) -> list[Path]:
    """The modules under `folder` (a path from a source root: "apps/work", "mission_weave/sdk")."""
    found = next((root / folder for root in SOURCE_ROOTS if (root / folder).is_dir()), None)
    assert found, f"no folder {folder} under {SOURCE_ROOTS}"
    return sorted(path for path in found.rglob("*.py") if "migrations" not in path.parts)


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def breaks(paths, allowed) -> list[str]:
    """'file:line imports module' for every import of `paths` that `allowed` refuses."""
    return [f"{path.relative_to(ROOT)}:{line} imports {imported}"
            for path in paths for line, imported in imports(path)
            if not allowed(path, imported)]


def first_party(name: str) -> bool:
    return name.split(".")[0] in ("apps", "mission_weave", "tests", "scripts")


@pytest.mark.parametrize("package", sorted(PURE_PACKAGES))
def test_the_pure_packages_import_only_what_lies_below_them(package):
    allowed_packages = PURE_PACKAGES[package]

    def allowed(path, name):
        if name.split(".")[0] in SHELL:
            return False
        return not first_party(name) or any(within(name, p) for p in allowed_packages)

    assert breaks(sources(package.replace(".", "/")), allowed) == []


@pytest.mark.parametrize("package", sorted(PURE_PACKAGES))
def test_an_optional_package_is_imported_only_by_its_bridge(package):
    def allowed(path, name):
        bridge = EXTRAS.get(name.split(".")[0])
        return bridge is None or bridge == package

    assert breaks(sources(package.replace(".", "/")), allowed) == []


@pytest.mark.parametrize("app", APP_LAYERS)
def test_each_app_imports_only_the_apps_below_it(app):
    below = APP_LAYERS[:APP_LAYERS.index(app)]

    def allowed(path, name):
        if not within(name, "apps") or name == "apps":
            return True
        other = name.split(".")[1]
        return other == app or other in below

    assert breaks(sources(f"apps/{app}"), allowed) == []


def test_every_app_has_its_place_in_the_layers():
    apps = {path.parent.name for path in (ROOT / "apps").glob("*/apps.py")}
    assert apps == set(APP_LAYERS)


def test_each_port_has_a_protocol_and_the_ledger_imports_no_app_above_it():
    """The ledger reaches the apps above it only through its ports (apps/ledger/ports.py):
    each port is a typing.Protocol, and the place that holds what is plugged in declares
    each port by its Protocol; no module of the ledger imports another app."""
    from typing import get_type_hints

    from apps.ledger import ports

    declared = get_type_hints(ports.Plugged)
    assert set(declared) == set(ports.PORTS) | {"committed"}
    for name, protocol in ports.PORTS.items():
        assert getattr(protocol, "_is_protocol", False), f"{name}: {protocol} is no Protocol"
        assert declared[name] is protocol, f"Plugged.{name} is not declared as {protocol}"
    assert getattr(ports.Subscriber, "_is_protocol", False)
    assert declared["committed"] == list[ports.Subscriber]

    def allowed(path, name):
        return not within(name, "apps") or name == "apps" or within(name, "apps.ledger")

    assert breaks(sources("apps/ledger"), allowed) == []


# The apps below `work`, which may not reach its tables by any route (an import is caught
# above; SQL naming the table, or a table name handed up through a port, is caught here).
BELOW_WORK = APP_LAYERS[:APP_LAYERS.index("work")]
# What apps/work/work_store.py names its tables by.
WORK_TABLE_NAMES = frozenset({"ITEMS", "MISSIONS", "PROPOSALS"})


def work_tables() -> set[str]:
    from django.apps import apps

    return {model._meta.db_table for model in apps.get_app_config("work").get_models()}


def references_to_work_tables(source: str, where: str, tables: set[str]) -> list[str]:
    """'file:line what' for each string naming one of work's `tables` and each attribute
    named like work_store's table constants (`ports.projections.ITEMS`) in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{where}:{node.lineno} names the table {table}" for table in sorted(tables)
                      if table in node.value.lower()]
        elif isinstance(node, ast.Attribute) and node.attr in WORK_TABLE_NAMES:
            found.append(f"{where}:{node.lineno} reads .{node.attr}")
    return found


def test_no_app_below_work_reaches_works_tables():
    """The projections of work (Missions, WorkItems, Proposals) are read and written by
    work and the apps above it; the ledger, identity and artifacts reach them only through
    the projections port's methods, never by table (issue 26: the review once ran SQL on
    work's table through `ports.projections.ITEMS`, which the import rule could not see)."""
    tables = work_tables()
    assert tables >= {"work_workitem", "work_mission", "work_proposal"}
    found = [problem for app in BELOW_WORK for path in sources(f"apps/{app}")
             for problem in references_to_work_tables(path.read_text(),
                                                      str(path.relative_to(ROOT)), tables)]

    assert found == [], "\n".join(found)


def test_the_table_check_sees_sql_and_a_table_handed_through_a_port():
    # Guard the guard.
    source = ('def f(ports, db):\n'
              '    db.fetch("SELECT doc FROM work_workitem WHERE state = %s", ["submitted"])\n'
              '    return f"SELECT 1 FROM {ports.projections.ITEMS}"\n')

    found = references_to_work_tables(source, "sample.py", work_tables())

    assert found == ["sample.py:2 names the table work_workitem", "sample.py:3 reads .ITEMS"]


def test_nothing_below_the_apps_imports_them():
    """The project package's pure parts never reach up into the shell apps (the project
    package's own shell modules, settings and urls, wire the apps together)."""
    pure = [path for package in PURE_PACKAGES for path in sources(package.replace(".", "/"))]
    assert breaks(pure, lambda path, name: not within(name, "apps")) == []


# What the runtime patches: daphne's and twisted's insides. Only runtime/ reaches them.
SERVER_INTERNALS = ("daphne", "twisted", "autobahn")


def test_the_runtime_stands_below_the_apps_and_alone_patches_the_server():
    """mission_weave/runtime wraps Django in the server process: it needs nothing of the
    apps or the core, and no module outside it imports daphne, twisted or autobahn."""
    runtime = sources("mission_weave/runtime")
    assert breaks(runtime, lambda path, name: not (
        within(name, "apps") or within(name, "mission_weave.core"))) == []
    others = [path for folder in ("apps", "mission_weave", "mission_weave/sdk")
              for path in sources(folder) if "runtime" not in path.parts]
    assert breaks(others, lambda path, name: name.split(".")[0] not in SERVER_INTERNALS) == []


IMPORT_CHECK = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in set(sys.argv[2:]))))
"""
CORE_MODULES = sorted(module_name(path) for path in sources("mission_weave/core"))


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_imports_without_loading_django(module):
    env = {key: value for key, value in os.environ.items()
           if key != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)

    result = subprocess.run([sys.executable, "-c", IMPORT_CHECK, module, *sorted(SHELL)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_the_import_reader_resolves_relative_imports():
    # Guard the guard: work_store.py reaches the shell relatively (`from . import models`).
    found = {name for _line, name in imports(ROOT / "apps" / "work" / "work_store.py")}
    assert "apps.work" in found or "apps.work.models" in found
    assert any(within(name, "mission_weave.core") for name in found)


def test_the_import_check_sees_django_when_it_is_loaded():
    result = subprocess.run([sys.executable, "-c", IMPORT_CHECK, "django.utils.timezone",
                             *sorted(SHELL)], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)

    assert "django.utils.timezone" in json.loads(result.stdout)


# --- the pure core touches no clock, randomness, environment or file ---------------------------
# DESIGN.md: "Time enters `decide` as an argument"; the core is plain functions over plain
# data. Modules that reach the outside world may not be imported there, and calls that
# read the clock or a file may not be made (whatever module they come from).
IMPURE_MODULES = frozenset({"os", "sys", "time", "random", "secrets", "uuid", "socket",
                            "subprocess", "shutil", "tempfile", "io", "threading", "asyncio"})
IMPURE_CALLS = frozenset({"now", "utcnow", "today", "getenv", "open", "read_text",
                          "read_bytes", "write_text", "write_bytes", "urandom"})
# Package data read once, at import, never while deciding: (file, call).
IMPURE_ALLOWED = {("mission_weave/core/schemas.py", "read_text")}


def impurities(path: Path) -> list[str]:
    """'file:line what' for each impure import or call in `path` (a core module)."""
    where = str(path.relative_to(ROOT))
    found = [f"{where}:{line} imports {name}" for line, name in imports(path)
             if name.split(".")[0] in IMPURE_MODULES]
    return found + impure_calls(path.read_text(), where)


def impure_calls(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in IMPURE_CALLS and (where, name) not in IMPURE_ALLOWED:
                found.append(f"{where}:{node.lineno} calls {name}()")
    return found


def test_the_core_reads_no_clock_randomness_environment_or_file():
    found = [problem for path in sources("mission_weave/core") for problem in impurities(path)]

    assert found == [], "\n".join(found)


def test_the_purity_check_sees_clock_environment_and_file_reads():
    # Guard the guard (the imports are checked by the same reader as the layering rule).
    source = ("from datetime import datetime\n\n\ndef f(path):\n"
              "    return datetime.now(), __import__('os').getenv('X'), open(path).read()\n")

    found = impure_calls(source, "sample.py")

    assert found == ["sample.py:5 calls now()", "sample.py:5 calls getenv()",
                     "sample.py:5 calls open()"]
