from pathlib import Path

from scripts.render_docs import BLOCKS, TARGET, rendered


def test_the_protocol_doc_shows_the_tables_the_code_enforces():
    text = TARGET.read_text()
    assert rendered(text) == text, \
        f"{TARGET.relative_to(TARGET.parent.parent)} is stale: run python scripts/render_docs.py"
    assert "| offered | `work.accept_offer` | queued | Atomic ownership epoch begins |" in text
    assert "| `work.accept_offer` | `worker` |  |" in text
    for name in BLOCKS:
        assert f"<!-- {name}:begin" in text and f"<!-- {name}:end -->" in text


def test_render_docs_writes_into_docs_protocol_md():
    assert Path(__file__).resolve().parent.parent / "docs" / "protocol.md" == TARGET
