"""static/vendor holds front-end libraries copied from their npm packages: each with its
licence, at the version static/vendor/README.md records, and used by the dashboard."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "static" / "vendor"
ROW = re.compile(r"^\| `([^`]+)/` \| `([^`]+)` \| ([0-9.]+) \| `dist/([^`]+)`", re.M)


def rows() -> list:
    return ROW.findall((VENDOR / "README.md").read_text())


def test_every_vendored_library_is_listed_with_its_licence_and_version():
    listed = rows()
    folders = sorted(p.name for p in VENDOR.iterdir() if p.is_dir())

    assert sorted(folder for folder, *_ in listed) == folders
    for folder, package, version, file in listed:
        code = (VENDOR / folder / file).read_text()
        assert (VENDOR / folder / "LICENSE").read_text().strip(), folder
        if package == "htmx.org":  # the one that states its version in the code
            assert f'version:"{version}"' in code


def test_the_dashboard_loads_each_vendored_file():
    base = (ROOT / "templates" / "dashboard" / "base.html").read_text()

    for folder, _, _, file in rows():
        assert f"vendor/{folder}/{file}" in base
