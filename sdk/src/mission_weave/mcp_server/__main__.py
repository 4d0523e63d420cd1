"""`python -m mission_weave.mcp_server`: the same as `mw-mcp`."""

from .cli import main

main()
