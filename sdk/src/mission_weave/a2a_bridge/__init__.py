"""The A2A bridge (docs/agents.md), on the official a2a-sdk:
- `mw-a2a-worker`: a remote A2A agent works as a MissionWeave Worker;
- `mw-a2a-group`: a Group answers as an A2A agent, each message a `work.propose`."""
