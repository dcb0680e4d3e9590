"""Agents written with other frameworks, run durably as Tether tools.

`App.add` takes a Pydantic AI agent (`tether.integrations.pydantic_ai`) or an OpenAI
Agents SDK agent (`tether.integrations.openai_agents`) as it takes Tether's own: each
becomes a tool whose run journals every model call and tool call (`journal.Journal`), so
a crash replays what finished and runs only what was in flight. The frameworks are
optional extras, imported only when such an agent is added.
"""
