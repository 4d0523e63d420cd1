from pathlib import Path

from scripts.render_docs import rendered

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_shows_the_lifecycle_table_the_code_enforces():
    text = README.read_text()
    assert rendered(text) == text, "README is stale: run python scripts/render_docs.py"
    assert "| offered | `work.accept_offer` | queued | Atomic ownership epoch begins |" in text
