"""Render the §10.2 table from apps/work/lifecycle.py into README.md.

    python scripts/render_docs.py          (tests/test_docs.py checks it is current)
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from apps.work.lifecycle import as_markdown  # noqa: E402

BEGIN, END = "<!-- lifecycle:begin", "<!-- lifecycle:end -->"


def rendered(readme: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r"[^\n]*\n.*?" + re.escape(END), re.S)
    header = readme[readme.index(BEGIN):].split("\n", 1)[0]
    return pattern.sub(lambda _: f"{header}\n{as_markdown()}\n{END}", readme)


if __name__ == "__main__":
    path = ROOT / "README.md"
    path.write_text(rendered(path.read_text()))
