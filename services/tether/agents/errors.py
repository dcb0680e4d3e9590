"""Every error of the agent package, in one place (their names are on the wire as a
failed step's `ErrorInfo.type`, so a name never changes).

    TerminalError (tether.errors)
    ├── MaxTurnsExceeded          no answer within `max_turns` turns
    ├── BudgetExceeded            the tree's budget is spent
    │   └── TokenBudgetExceeded   its token budget
    ├── BudgetAboveCeiling        a run asked for more than its agent's budget
    ├── ForeignConversation       a follow-up of another caller's conversation
    ├── InvalidOutput             the answer never fit `output_type`
    ├── ModelAuthError            the endpoint refused the key
    ├── ContextLengthExceeded     the conversation outgrew the context window
    ├── ModelOutputTruncated      stopped at the output token limit
    ├── ModelContentFiltered      stopped by the content filter
    ├── ModelQuotaExceeded        the account has no quota left
    └── ModelRequestError         the endpoint rejected the request
        └── StructuredOutputsRefused   ... its `response_format` `json_schema`
    RetryableError (tether.errors)
    ├── RateLimited               429, waited out in place
    └── ModelUnreachable          no connection to the endpoint (refused, timed out)

Two signals never leave the package: `Spent` (a call's reservation does not fit) and
`WrongAnswer` (one typed answer does not fit; the model is told and asked again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.errors import RetryableError, TerminalError

if TYPE_CHECKING:
    from tether.agents.budget import Ledger
    from tether.schemas.records import ErrorInfo


class MaxTurnsExceeded(TerminalError):
    """The agent did not answer within `max_turns` LLM turns."""


class BudgetExceeded(TerminalError):
    """The tree's budget is spent, and the agent fails rather than ask to raise it."""


class TokenBudgetExceeded(BudgetExceeded):
    """The tree's token budget is spent (kept for code that catches this name)."""


class BudgetAboveCeiling(TerminalError):
    """A run asked for a larger budget than its agent's, which is the most it may have."""


class ForeignConversation(TerminalError):
    """A follow-up names a conversation bound to another caller."""


class InvalidOutput(TerminalError):
    """The model's answer did not fit the agent's `output_type`, every time it was asked."""


class ModelAuthError(TerminalError):
    """The endpoint refused the API key."""


class ContextLengthExceeded(TerminalError):
    """The conversation no longer fits the model's context window."""


class ModelRequestError(TerminalError):
    """The endpoint rejected the request (unknown model, bad parameter, ...)."""


class ModelOutputTruncated(TerminalError):
    """The model stopped at its output token limit (`finish_reason: length`): a cut-off
    answer or cut-off tool arguments are never stored as if they were whole."""


class ModelContentFiltered(TerminalError):
    """The endpoint's content filter stopped the answer (`finish_reason: content_filter`)."""


class ModelQuotaExceeded(TerminalError):
    """The account behind the API key has no quota left (`insufficient_quota`): a billing
    matter, which no retry mends."""


class StructuredOutputsRefused(ModelRequestError):
    """The endpoint rejected `response_format` `json_schema`."""


class RateLimited(RetryableError):
    """The endpoint answered 429: waited out in place (see `complete`), not an attempt."""


class ModelUnreachable(RetryableError):
    """No connection to the model's endpoint (refused, unreachable, timed out): its
    message names the URL and where it was set; the step is retried quietly."""


SELF_EXPLAINED = frozenset(
    kind.__name__
    for kind in (
        MaxTurnsExceeded,
        BudgetExceeded,
        TokenBudgetExceeded,
        BudgetAboveCeiling,
        ForeignConversation,
        InvalidOutput,
        ModelAuthError,
        ContextLengthExceeded,
        ModelRequestError,
        StructuredOutputsRefused,
        ModelOutputTruncated,
        ModelContentFiltered,
        ModelQuotaExceeded,
        RateLimited,
        ModelUnreachable,
    )
)
"""Errors whose message says what happened and the fix: their traceback holds only
Tether's own frames, shown on demand (`tether status --verbose`), not beside it."""


def frames(error: ErrorInfo | None, verbose: bool = False) -> str | None:
    """The traceback to show with `error`: None for one that explains itself, unless
    `verbose`."""
    if error is None or (error.type in SELF_EXPLAINED and not verbose):
        return None
    return error.traceback


class Spent(Exception):
    """The call's reservation (`tokens`, `usd`) did not fit in the tree's budget."""

    def __init__(self, ledger: Ledger, tokens: int, usd: float) -> None:
        super().__init__(ledger.spent())
        self.ledger, self.tokens, self.usd = ledger, tokens, usd


class WrongAnswer(Exception):
    """One answer that does not fit; the message says where and why."""
