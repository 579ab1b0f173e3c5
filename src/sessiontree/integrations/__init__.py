"""Python agent frameworks writing to a session store: each framework's own session
protocol, implemented on sessiontree's storage (files or PostgreSQL).

- `sessiontree.integrations.claude_agent_sdk.SessionTreeStore`: the Claude Agent SDK's
  `SessionStore` (extra `claude-agent-sdk`), sessions in Claude Code's own layout.
- `sessiontree.integrations.openai_agents.SessionTreeSession`: the OpenAI Agents SDK's
  `Session` (extra `openai-agents`), each session a v3 session tree.
- `sessiontree.integrations.langgraph.SessionTreeSaver`: LangGraph's checkpointer (extra
  `langgraph`), a thread a session, a checkpoint an entry, a fork a branch.

Each module imports its framework; without it, importing the module raises
ImportError naming the extra to install. This package itself imports nothing.
"""

from __future__ import annotations

__all__: list[str] = []
