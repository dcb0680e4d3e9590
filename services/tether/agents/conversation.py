"""An agent's conversation, rebuilt from its task's checkpoints; what follows a reply.

Pure, no I/O. An agent task's steps are all steps of the agent's own tool, told apart
by their input, plus one parallel group per batch of tool calls:

- `{"input": "..."}`: the first LLM turn (the question); with `"after": "<task id>"`, a
  follow-up: the conversation of that finished task comes first, read from its
  checkpoints (by reference: nothing of it is copied into this task);
- `{"turn": k}`: LLM turn k, after the tool results of turn k-1; with `"handoff": s`,
  the first turn of an agent another one handed the conversation over to (it began at
  step s), under this agent's instructions and tools;
- `{"approve": [call ids]}`: an approval gate (the task waits for a person);
- `{"dispatch": k}`: after the gate, runs the calls of turn k that were approved;
- `{"finish": true}`: after the output guardrails passed, the answer as the result;
- `{"budget": true}`: the tree's budget is spent: asks a person to raise it or stop (a
  turn that found it spent outputs `{"budget": ...}` and adds this, then itself again);
- `{"mcp": {"server": url, "tool": name, "arguments": {...}}}`: a branch that calls a
  tool of an MCP server (see `tether.agents.mcp_tools`).

With guardrails, the first turn outputs `{"guarded": "input"}` and adds a parallel step
of the input guardrails, then turn 1; an answer is output as `{"answer": ...}` before a
parallel step of the output guardrails and the `finish` step.

A turn that finds messages sent to the task (or new settings) does not call the model:
it outputs `{"inbox": [{"seq": n, "entry": <message_sent or agent_updated>}, ...]}` and
adds the turn again, which sees them; so each is read once, in order, and stored once.

Each message is stored once, as the output of the step that produced it (a turn's
assistant message, a branch's tool result), so a turn writes as many bytes at turn
500 as at turn 1; the messages sent to the model are rebuilt from those outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from tether.errors import TerminalError
from tether.schemas.plans import StepSpec
from tether.schemas.records import Usage


class McpCall(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A call of a tool of an MCP server, as a branch's input."""

    server: str
    tool: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    safe: bool = False
    """The server said calling it again is safe (when the call was decided)."""


class AgentStep(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The input of an agent's step (see the module docstring)."""

    input: str | list[dict[str, Any]] | None = None
    after: str | None = None
    """The finished agent task whose conversation this one continues (a follow-up)."""
    token_budget: int | None = None
    """Overrides the agent's token budget for this task (and the tree below it)."""
    cost_budget: float | None = None
    """Overrides the agent's budget in dollars for this task (and the tree below it)."""
    instructions: str | None = None
    """Overrides the agent's instructions for this task (still one system message)."""
    settings: dict[str, Any] | None = None
    """Model settings for this task (`temperature`, ...), over the model's own."""
    turn: int | None = None
    approve: list[str] | None = None
    dispatch: int | None = None
    finish: bool | None = None
    mcp: McpCall | None = None
    handoff: int | None = None
    """With `turn`: this agent takes over the conversation that began at this step."""
    budget: bool | None = None
    """Asks a person to raise the tree's spent budget, or stop."""

    @property
    def continues(self) -> bool:
        """Whether the step continues a conversation (rather than starting one)."""
        return (
            self.turn is not None
            or self.approve is not None
            or self.dispatch is not None
            or self.finish is not None
            or self.mcp is not None
            or self.budget is not None
        )


class ToolCall(msgspec.Struct, frozen=True):
    id: str
    name: str
    arguments: str
    """JSON text, as the model wrote it."""


class Turn(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A turn that asked for tools: the assistant message, the calls that run (in branch
    order), and the results known without running anything (errors, denials)."""

    message: dict[str, Any]
    run: list[str]
    results: dict[str, str] = msgspec.field(default_factory=dict)
    wrong_answer: str | None = None
    """The reply was a typed answer that did not fit: what the model is told (as a user
    message, or as its final-answer call's result)."""
    gated: list[str] = msgspec.field(default_factory=list)
    """Calls that wait for a person's approval (the others run at once)."""
    edited: dict[str, str] = msgspec.field(default_factory=dict)
    """Approved calls a person gave other arguments: the arguments they ran with."""


class Entry(msgspec.Struct, frozen=True):
    """One finished step of the task, as the conversation sees it."""

    spec: StepSpec
    output: Any
    usage: Usage | None = None


class Journal(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[dict[str, Any]]
    turns: int
    """LLM turns so far."""
    usage: Usage
    token_budget: int | None
    cost_budget: float | None = None
    budget_waits: int = 0
    """Turns in a row that waited for another task's question about the budget."""
    last_turn: Turn | None
    """The latest turn that asked for tools, while its results are not all in."""
    answers: list[tuple[list[str], Any]] = msgspec.field(default_factory=list)
    """The approval gates since `last_turn`: the calls each asked for, and its answer."""
    wrong_answers: int = 0
    """Typed answers that did not fit, so far."""
    start: int = 0
    """The step of the conversation's first turn (a handoff carries it on)."""
    inbox_seq: int = 0
    """The stream sequence of the last message or update this conversation took."""
    model: str | None = None
    """The model an update named (None: the agent's)."""
    settings: dict[str, Any] = msgspec.field(default_factory=dict)
    """The task's own model settings (its first step's `settings`)."""
    reported: tuple[int, int] | None = None
    """The prompt tokens the model reported for the conversation's latest call, and how
    many of `messages` that call was sent (see `budget.prompt_floor`)."""


def as_step(value: Any) -> AgentStep:
    """An agent step's input: `{"input": ...}` and the other roles, or just the question."""
    if isinstance(value, str):
        return AgentStep(input=value)
    try:
        return msgspec.convert(value or {}, AgentStep)
    except msgspec.ValidationError as exc:
        raise TerminalError(f"not an agent step's input: {exc}") from exc


def first_messages(
    instructions: str, start: AgentStep, earlier: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    messages.extend(earlier)
    if isinstance(start.input, list):
        messages.extend(start.input)
    else:
        messages.append({"role": "user", "content": start.input or ""})
    return messages


def rebuild(
    instructions: str,
    start: AgentStep,
    history: Sequence[Entry],
    earlier: Sequence[dict[str, Any]] = (),
    finished: bool = False,
) -> Journal:
    """The conversation after `history` (every step before the current one; the first
    is the task's first turn, whose input is `start`), after the `earlier` messages of
    the conversation a follow-up continues. `finished`: the last entry is the answer."""
    if start.instructions is not None:
        instructions = start.instructions
    told = _Told(first_messages(instructions, start, earlier), _Steered(start.token_budget))
    usage = Usage()
    reported: tuple[int, int] | None = None
    for index, entry in enumerate(history):
        usage = usage if entry.usage is None else usage + entry.usage
        role = as_step(entry.spec.input) if entry.spec.parallel is None else None
        if role is not None and role.budget:
            continue  # a question about the budget: nothing said to the model
        if role is not None and role.approve is None and role.dispatch is None:
            sent = len(told.messages)
            told.turn(role, entry.output, last=finished and index == len(history) - 1)
            reported = _reported(entry.usage, sent) or reported
        elif told.pending is None:
            continue
        elif role is not None and role.approve is not None:
            told.answers.append((role.approve, entry.output))
        elif role is not None and not _marked(entry.output, "undecided"):
            told.decided(msgspec.convert(entry.output, Turn))  # a dispatch: all decided
        elif entry.spec.parallel is not None:
            outputs = entry.output if isinstance(entry.output, list) else []
            told.ran.update(zip(told.pending.run, outputs, strict=False))
            if not told.pending.gated:  # else the approved calls are still to run
                told.said(told.pending)
    steered = told.steered
    return Journal(
        messages=told.messages,
        turns=told.turns,
        usage=usage,
        token_budget=steered.token_budget,
        cost_budget=start.cost_budget,
        budget_waits=told.budget_waits,
        last_turn=told.pending,
        answers=told.answers,
        wrong_answers=told.wrong,
        inbox_seq=steered.seq,
        model=steered.model,
        settings=start.settings or {},
        reported=reported,
    )


def _reported(usage: Usage | None, sent: int) -> tuple[int, int] | None:
    """The prompt tokens a turn's model reported per finished call, with the number of
    messages it was sent; None when it reported none."""
    finished = 0 if usage is None else usage.requests - usage.unfinished
    if usage is None or finished < 1 or not usage.input_tokens:
        return None
    return usage.input_tokens // finished, sent


class _Told:
    """The messages of a conversation as its turns are read, in order."""

    def __init__(self, messages: list[dict[str, Any]], steered: _Steered) -> None:
        self.messages = messages
        self.steered = steered
        self.turns = 0
        self.wrong = 0
        self.budget_waits = 0
        self.pending: Turn | None = None
        self.ran: dict[str, Any] = {}
        """Outputs of the pending turn's calls that ran."""
        self.answers: list[tuple[list[str], Any]] = []

    def turn(self, role: AgentStep, output: Any, *, last: bool) -> None:
        """A turn's output: a mark, the answer, or a reply that asked for tools."""
        if _marked(output, "budget"):
            self.budget_waits += 1
            return  # a spent budget: asked about, or waited for
        if role.finish or _marked(output, "guarded"):
            return  # a guarded answer's last step, a guarded question: nothing said
        if _marked(output, "inbox") and not last:
            self.steered.take(output["inbox"], self.messages)
            return
        self.turns += 1
        self.budget_waits = 0
        if _marked(output, "answer"):
            self.messages.append(answer_message(output["answer"]))
        elif last or not _is_turn(output):
            self.messages.append(answer_message(output))  # the answer: nothing follows
        else:
            turn = msgspec.convert(output, Turn)
            self.messages.append(turn.message)
            if turn.wrong_answer is not None:
                self.wrong += 1
                if not turn.message.get("tool_calls"):
                    self.messages.append({"role": "user", "content": turn.wrong_answer})
            self.decided(turn)

    def decided(self, turn: Turn) -> None:
        """A turn whose calls are known (after a reply, or after its approvals): wait for
        the results of those that run (and for approvals), or say them all at once."""
        self.pending = turn
        self.answers = []
        if not turn.run and not turn.gated:
            self.said(turn)

    def said(self, turn: Turn) -> None:
        """Every call of `turn` has its result: one tool message each."""
        self.messages.extend(_tool_messages(turn, self.ran))
        self.pending, self.ran = None, {}


class _Steered:
    """What the messages and updates a conversation took add up to."""

    def __init__(self, token_budget: int | None) -> None:
        self.token_budget = token_budget
        self.model: str | None = None
        self.seq = 0

    def take(self, taken: list[dict[str, Any]], messages: list[dict[str, Any]]) -> None:
        for item in taken:
            self.seq = max(self.seq, int(item.get("seq") or 0))
            entry = item.get("entry") or {}
            if entry.get("event") == "message_sent":
                messages.append({"role": "user", "content": str(entry.get("text") or "")})
                continue
            if entry.get("model"):
                self.model = str(entry["model"])
            if entry.get("token_budget"):
                self.token_budget = int(entry["token_budget"])
            if entry.get("instructions") is not None:
                system = {"role": "system", "content": str(entry["instructions"])}
                if messages and messages[0].get("role") == "system":
                    messages[0] = system
                else:
                    messages.insert(0, system)


def _marked(output: Any, key: str) -> bool:
    """Whether a turn's output is one of the agent's own marks: `{"inbox": ...}`,
    `{"guarded": ...}` or `{"answer": ...}`."""
    return isinstance(output, dict) and set(output) == {key}


def _is_turn(output: Any) -> bool:
    """Whether a turn's output is a `Turn` (it asked for tools) rather than the answer."""
    return isinstance(output, dict) and "message" in output and "run" in output


def answer_message(answer: Any) -> dict[str, Any]:
    """The assistant message an answer was (a typed answer's as its JSON)."""
    content = answer if isinstance(answer, str) else msgspec.json.encode(answer).decode()
    return {"role": "assistant", "content": content}


def _tool_messages(turn: Turn, ran: dict[str, Any]) -> list[dict[str, Any]]:
    """One `tool` message per call of the turn, in the order the model asked for them."""
    messages = []
    for call in turn.message.get("tool_calls") or []:
        call_id = call["id"]
        if call_id in turn.results:
            content = turn.results[call_id]
        else:
            content = tool_content(ran.get(call_id))
        if call_id in turn.edited:
            content = f"(The user changed the arguments to {turn.edited[call_id]}.) {content}"
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return messages


def tool_content(output: Any) -> str:
    """A tool's output as the model reads it: text as is, anything else as JSON; a
    failed call (collected in place) as its error, so the model can recover."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict) and set(output) == {"error"} and isinstance(output["error"], dict):
        error = output["error"]
        return f"Error: {error.get('type', 'Error')}: {error.get('message', '')}"
    return msgspec.json.encode(output).decode()


def calls_of(message: dict[str, Any]) -> list[ToolCall]:
    return [
        ToolCall(call["id"], call["function"]["name"], call["function"].get("arguments") or "")
        for call in message.get("tool_calls") or []
    ]
