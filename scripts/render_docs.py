"""Render the tables docs/protocol.md takes from the code, between their markers:

    <!-- lifecycle:begin ... -->     the §10.2 table            core/lifecycle.py TABLE
    <!-- within-state:begin ... -->  commands that keep a state  core/lifecycle.py WITHIN_STATE
    <!-- roles:begin ... -->         who may send each command,  core/commands COMMANDS
                                     and what it acts on

(core/ is mission_weave/core/.)

    python scripts/render_docs.py          (tests/test_docs.py checks they are current)

Each block is `<!-- NAME:begin (any note) -->`, the generated table, `<!-- NAME:end -->`;
the note on the begin line is kept as written.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mission_weave.core import commands, lifecycle  # noqa: E402
from mission_weave.core.commands import targets  # noqa: E402

TARGET = ROOT / "docs" / "protocol.md"


def within_state_table() -> str:
    """lifecycle.WITHIN_STATE in the layout of lifecycle.as_markdown()."""
    lines = ["| Current state | Command | Next state | Notes |", "| --- | --- | --- | --- |"]
    for r in lifecycle.WITHIN_STATE:
        sources = ", ".join(s for s in lifecycle.STATES if s in r.sources)
        targets = "unchanged" if r.targets == {"same"} else \
            " or ".join(s for s in lifecycle.STATES if s in r.targets)
        lines.append(f"| {sources} | `{r.trigger}` | {targets} | {r.note} |")
    return "\n".join(lines)


def roles_table() -> str:
    """Every command type the server knows, with the Group roles that may send it and the
    object it acts on, whose Mission's rules apply."""
    lines = ["| Command | Roles that may send it | Only from | Acts on |",
             "| --- | --- | --- | --- |"]
    for command_type, spec in commands.COMMANDS.items():
        who = "any member" if spec.roles == commands.ANY_ROLE else \
            ", ".join(f"`{r}`" for r in sorted(spec.roles))
        only = "a human (`user:<name>`)" if command_type in commands.HUMAN_ONLY else ""
        lines.append(f"| `{command_type}` | {who} | {only} | {targets.NAMED_BY[spec.target]} |")
    return "\n".join(lines)


BLOCKS = {
    "lifecycle": lifecycle.as_markdown,
    "within-state": within_state_table,
    "roles": roles_table,
}


def rendered(text: str) -> str:
    """`text` with every generated block brought up to date. Each block of BLOCKS must be
    there exactly once: a document that lost its markers is an error, not "current"."""
    for name, render in BLOCKS.items():
        begin, end = f"<!-- {name}:begin", f"<!-- {name}:end -->"
        if text.count(begin) != 1 or text.count(end) != 1:
            raise ValueError(f"expected one {begin} ... {end} block")
        pattern = re.compile(re.escape(begin) + r"[^\n]*\n.*?" + re.escape(end), re.S)
        header = text[text.index(begin):].split("\n", 1)[0]
        text = pattern.sub(lambda _, h=header, r=render, e=end: f"{h}\n{r()}\n{e}", text)
    return text


if __name__ == "__main__":
    TARGET.write_text(rendered(TARGET.read_text()))
