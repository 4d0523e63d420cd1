"""`mw-mcp`: an MCP server for one MissionWeave Agent (docs/agents.md). An LLM gets the
tools and resources to do a WorkItem under the protocol's rules; the server holds the
Agent's key and session through the SDK and keeps the lease while the LLM works.

- `cli`: the command line (stdio or streamable HTTP); `server`: the MCPServer, its tools
  chosen by the Agent's roles; `agent`: the SDK client, session and membership;
- `tools_worker`, `tools_coordinator`, `tools_shared` (reads and Conversation posts),
  `resources` (the same reads as URI templates), over `reads` (the documents) and
  `evidence`;
- `lease_keeper`: renews held leases in the background and remembers a lost one;
- `answers`: results as compact JSON, refusals as tool errors `CODE: message`.
"""
