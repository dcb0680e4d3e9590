"""The request/reply API on `tether.api.<verb>`, declared on a FastStream broker.

The same declarations serve requests and produce the AsyncAPI document. Bodies are
decoded with msgspec by each subscriber's decoder, so a malformed request becomes
a typed `invalid` error reply naming the bad field.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import msgspec
from fast_depends.msgspec import MsgSpecSerializer
from faststream import Context
from faststream.message import StreamMessage
from faststream.middlewares import ExceptionMiddleware
from faststream.nats import NatsBroker

from tether.api.discovery import Discovery
from tether.api.errors import InvalidRequestError
from tether.api.verbs import VERBS
from tether.client import Client
from tether.errors import TaskTimeoutError
from tether.schemas.api import (
    MAX_LIST,
    BlobReply,
    BlobRequest,
    ContinueRequest,
    ErrorReply,
    ForkRequest,
    InputAnswer,
    ListReply,
    ListRequest,
    MessageRequest,
    ResultReply,
    ResultRequest,
    SubmitReply,
    SubmitRequest,
    TaskRequest,
    UpdateAgentRequest,
    error_reply,
)
from tether.schemas.builds import BuildsReply, BuildsRequest, DeployRequest
from tether.schemas.codec import encode
from tether.schemas.ids import validate_task_id
from tether.schemas.names import Names
from tether.schemas.records import TaskRecord

QUEUE = "tether-api"
MAX_WORKERS = 64
REPLY_MARGIN = 4096
"""Room for a reply's headers and envelope (FastStream adds about 100 bytes of headers)."""
MESSAGE = Context("message")
R = TypeVar("R")
_BROKER_LOG = logging.getLogger("tether.api.broker")
# FastStream's own logger writes a coloured INFO line per subscriber task at shutdown,
# even into files; errors are answered (and counted) by the middleware instead.
_BROKER_LOG.setLevel(logging.WARNING)


def _decoder(
    verb: str, kind: type[R], discovery: Discovery
) -> Callable[[StreamMessage[Any]], Awaitable[R]]:
    decoder = msgspec.json.Decoder(kind)

    async def decode(message: StreamMessage[Any]) -> R:
        discovery.count_request(verb)
        try:
            request = decoder.decode(message.body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InvalidRequestError(f"invalid {verb} request: {exc}") from exc
        except RecursionError as exc:
            raise InvalidRequestError(f"invalid {verb} request: JSON nested too deeply") from exc
        task_id = getattr(request, "task_id", None)
        if task_id is not None:
            validate_task_id(task_id)
        return request

    return decode


def build_broker(
    names: Names, client: Callable[[], Client], discovery: Discovery, **options: Any
) -> NatsBroker:
    """A broker with every API verb subscribed; `client()` gives the connected Client."""
    errors = ExceptionMiddleware()

    @errors.add_handler(Exception, publish=True)
    async def reply_with_error(exc: Exception, message: StreamMessage[Any] = MESSAGE) -> ErrorReply:
        discovery.count_error(message.raw_message.subject, exc)
        return error_reply(exc)

    broker = NatsBroker(
        middlewares=[errors],
        serializer=MsgSpecSerializer(),
        logger=_BROKER_LOG,
        log_level=logging.DEBUG,
        **options,
    )

    def route(name: str) -> Callable[[Any], Any]:
        verb = VERBS[name]
        discovery.add_endpoint(name, names.api_subject(name))
        return broker.subscriber(
            names.api_subject(name),
            queue=QUEUE,
            max_workers=MAX_WORKERS,  # a long `result` wait must not hold up other requests
            decoder=_decoder(name, verb.request, discovery),
            title=f"api.{name}",
            description=verb.description,
        )

    @route("submit")
    async def submit(request: SubmitRequest) -> SubmitReply:
        handle = await client().submit(
            request.steps,
            task_id=request.task_id,
            metadata=request.metadata,
            deadline=None if request.deadline_ms is None else _ms(request.deadline_ms),
            strict=request.strict,
        )
        return SubmitReply(task_id=handle.task_id)

    @route("get")
    async def get(request: TaskRequest) -> TaskRecord:
        return _fits(client(), await client().get(request.task_id))

    @route("result")
    async def result(request: ResultRequest) -> ResultReply:
        handle = client().handle(request.task_id)
        record = await handle.get()  # not_found at once for an unknown id
        if not record.status.is_terminal and request.timeout_ms > 0:
            record = await handle.wait_until_done(request.timeout_ms / 1000)
        if not record.status.is_terminal:
            raise _still_running(record)
        return ResultReply(
            task_id=record.task_id, status=record.status, result=record.result, error=record.error
        )

    @route("list")
    async def list_tasks(request: ListRequest) -> ListReply:
        return await _list(client(), request)

    _control_routes(route, client)
    _builds_route(route, client, names)

    @route("blob")
    async def blob(request: BlobRequest) -> BlobReply:
        data = await client().load_blob(request.ref)
        limit = client().max_payload - REPLY_MARGIN
        if len(data) > limit:
            raise InvalidRequestError(
                f"blob {request.ref!r} is {len(data):,} bytes; a reply holds at most "
                f"{limit:,}: read it from the Object Store (see schemas/README.md)"
            )
        return BlobReply(ref=request.ref, data=msgspec.Raw(data))

    discovery.subscribe(broker)
    return broker


def _builds_route(
    route: Callable[[str], Callable[[Any], Any]], client: Callable[[], Client], names: Names
) -> None:
    """`builds` lists; `deploy` changes where tasks go, on a subject of its own that
    deploy/nats/roles.conf lets only the operator publish to."""

    @route("builds")
    async def builds(request: BuildsRequest) -> BuildsReply:
        if request.action != "list":
            raise InvalidRequestError(
                f"builds {request.action} is not asked of {names.api_subject('builds')}, "
                f"which lists only: ask {names.api_subject('deploy')} (the operator's)"
            )
        return await client().builds()

    @route("deploy")
    async def deploy(request: DeployRequest) -> BuildsReply:
        """Served to whoever may publish here: the operator alone, by its NATS grant."""
        change = BuildsRequest(action=request.action, build=request.build, percent=request.percent)
        try:
            return await client().builds(change)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc


def _control_routes(
    route: Callable[[str], Callable[[Any], Any]], client: Callable[[], Client]
) -> None:
    """The verbs that change a task: cancel, answer, retry, fork."""

    @route("cancel")
    async def cancel(request: TaskRequest) -> TaskRecord:
        return _fits(client(), await client().cancel(request.task_id))

    @route("input")
    async def answer(request: InputAnswer) -> TaskRecord:
        await client().send_input(request.task_id, request.data)
        return _fits(client(), await client().get(request.task_id))

    @route("retry")
    async def retry(request: TaskRequest) -> TaskRecord:
        await client().retry(request.task_id)
        return _fits(client(), await client().get(request.task_id))

    @route("fork")
    async def fork(request: ForkRequest) -> TaskRecord:
        handle = await client().fork(
            request.task_id,
            request.from_step,
            input=request.input,
            new_task_id=request.new_task_id,
        )
        return _fits(client(), await handle.get())

    @route("continue")
    async def follow_up(request: ContinueRequest) -> SubmitReply:
        handle = await client().continue_agent(
            request.task_id,
            request.input,
            agent=request.agent,
            token_budget=request.token_budget,
            new_task_id=request.new_task_id,
            metadata=request.metadata,
            deadline=None if request.deadline_ms is None else _ms(request.deadline_ms),
        )
        return SubmitReply(task_id=handle.task_id)

    @route("message")
    async def message(request: MessageRequest) -> TaskRecord:
        await client().send_message(request.task_id, request.text, message_id=request.message_id)
        return _fits(client(), await client().get(request.task_id))

    @route("update_agent")
    async def update_agent(request: UpdateAgentRequest) -> TaskRecord:
        await client().update_agent(
            request.task_id,
            model=request.model,
            instructions=request.instructions,
            token_budget=request.token_budget,
            update_id=request.update_id,
        )
        return _fits(client(), await client().get(request.task_id))


def _ms(value: int) -> timedelta:
    return timedelta(milliseconds=value)


def _still_running(record: TaskRecord) -> Exception:
    return TaskTimeoutError(
        record.task_id,
        f"task {record.task_id!r} is {record.status.value}: "
        "ask again with timeout_ms to wait for it",
    )


def _fits(client: Client, record: TaskRecord) -> TaskRecord:
    """Refuse a reply the server would refuse: sending it would close the connection."""
    size, limit = len(encode(record)), client.max_payload - REPLY_MARGIN
    if size > limit:
        raise InvalidRequestError(
            f"task {record.task_id!r} is too large to send ({size:,} bytes; a reply holds "
            f"at most {limit:,}): it was recorded before Tether bounded records"
        )
    return record


async def _list(client: Client, request: ListRequest) -> ListReply:
    if not 1 <= request.limit <= MAX_LIST:
        raise InvalidRequestError(f"invalid list request: limit must be between 1 and {MAX_LIST}")
    if request.cursor is not None and await client.find(request.cursor) is None:
        raise InvalidRequestError(f"invalid list request: unknown cursor {request.cursor!r}")
    records, more = await client.list_page(
        request.status, limit=request.limit, cursor=request.cursor
    )
    return _page(records, more, client.max_payload - REPLY_MARGIN)


def _page(records: list[TaskRecord], more: bool, max_bytes: int) -> ListReply:
    """As many of `records` (one page, in order) as fit in one reply; `more`: tasks may
    follow the page.

    A record too large for any reply is named in `omitted` and passed over, so the
    tasks after it stay reachable.
    """
    page: list[TaskRecord] = []
    omitted: list[str] = []
    size = 64
    last = 0
    for record in records:
        record_size = len(encode(record)) + 1
        if record_size + 64 > max_bytes:
            omitted.append(record.task_id)
            size += len(record.task_id) + 3
        elif size + record_size > max_bytes:
            break
        else:
            page.append(record)
            size += record_size
        last += 1
    more = more or last < len(records)
    return ListReply(
        tasks=page,
        next_cursor=records[last - 1].task_id if more and last else None,
        omitted=omitted,
    )
