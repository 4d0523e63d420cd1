"""`mw-mcp`: an MCP server for one MissionWeave Agent (docs/agents.md). An LLM gets the
tools and resources to do a WorkItem under the protocol's rules; the server holds the
Agent's key and session through the SDK and keeps the lease while the LLM works."""
