"""The dashboard's Starlette app: server-rendered pages over a `Client`, form posts for
the actions, server-sent events for what changes while a page is open."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from tether.agents.errors import frames
from tether.client import Client
from tether.clock import utcnow
from tether.errors import BlobNotFoundError, NotAllowedError, TaskConflictError, TetherError
from tether.schemas.blobs import is_ref
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord, TaskStatus
from tether.schemas.workers import ToolInfo
from tether.tasks.questions import question
from tether.tasks.stalls import NO_DISPATCHER
from tether.ui import views
from tether.ui.auth import CSRF_FIELD, Guard
from tether.ui.folds import folded
from tether.ui.live import changes, task_feed, until_closed

HERE = Path(__file__).parent
PAGE = 50
COUNTS_EVERY = 0.25
"""Seconds the status counts are reused: short, so they never lag the table under them
(which is read fresh), yet bounded however many pages ask."""
SCAN = 2_000
"""Records a filtered list (by tool or text) reads at most for one page."""
ACTIONS = ("cancel", "retry", "input", "message", "fork")
"""The task actions the pages offer, each asked of the API verb of the same name (its
NATS user must be allowed `<prefix>.api.<action>`: deploy/nats/roles.conf's dashboard)."""
_ACTION_CODES: dict[type[Exception], int] = {TaskConflictError: 409, NotAllowedError: 403}
"""An action NATS refused this dashboard's user (NotAllowedError) answers at once, 403."""


def build_app(
    client: Client,
    closing: asyncio.Event,
    token: str | None = None,
    *,
    csrf: str,
    allowed_hosts: Collection[str] = (),
) -> Starlette:
    """`closing`: set when the server stops, to end the pages' open streams; `csrf`: the
    anti-forgery token every form carries."""
    pages = Pages(client, closing, csrf)
    routes = [
        Route("/", pages.tasks),
        Route("/live", pages.list_live),
        Route("/tasks/{task_id}", pages.task),
        Route("/tasks/{task_id}/live", pages.task_live),
        Route("/tasks/{task_id}/{verb:str}", pages.action, methods=["POST"]),
        Route("/dlq", pages.dlq),
        Route("/tools", pages.tools),
        Route("/tools/{tool}/run", pages.run_form),
        Route("/tools/{tool}/run", pages.run, methods=["POST"]),
        Route("/builds", pages.builds),
        Route("/blobs/{ref}", pages.blob),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(Guard, token=token, allowed_hosts=allowed_hosts)
    return app


class Pages:
    """The handlers, over one client."""

    def __init__(self, client: Client, closing: asyncio.Event, csrf: str) -> None:
        self._client = client
        self._closing = closing
        self._csrf = csrf
        self._counted: tuple[float, dict[str, int]] | None = None
        self._templates = Jinja2Templates(directory=HERE / "templates")
        env = self._templates.env
        env.globals.update(
            views=views,
            folded=folded,
            frames=frames,
            is_ref=is_ref,
            statuses=[s.value for s in TaskStatus],
            csrf_field=CSRF_FIELD,
            csrf=csrf,
        )
        env.filters.update(pretty=views.pretty, tokens=views.tokens)

    def _page(
        self, request: Request, name: str, status_code: int = 200, **context: Any
    ) -> Response:
        context.setdefault("now", utcnow())
        return self._templates.TemplateResponse(request, name, context, status_code=status_code)

    async def _counts(self) -> dict[str, int]:
        """Tasks per status, from the status index's subject list (one request, but of
        every row): read at most every `COUNTS_EVERY` seconds however many pages ask."""
        now = time.monotonic()
        if self._counted is None or now - self._counted[0] > COUNTS_EVERY:
            self._counted = (now, await self._client.status_counts())
        return self._counted[1]

    def _missing(self, request: Request, message: str, status_code: int = 404) -> Response:
        return self._page(request, "error.html", status_code, message=message)

    async def tasks(self, request: Request) -> Response:
        client, query = self._client, request.query_params
        status, tool, text = query.get("status") or None, query.get("tool"), query.get("q")
        if text and await client.find(text.strip()) is not None:
            return RedirectResponse(f"/tasks/{text.strip()}", status_code=303)
        if status is not None and status not in {s.value for s in TaskStatus}:
            return self._missing(request, f"no status {status!r}", 400)
        records, more = await _filtered(client, status, tool, text, query.get("cursor"))
        inbox: list[TaskRecord] = []
        if status is None:
            inbox, _ = await client.list_page("waiting", limit=10, newest_first=True)
        rest = {k: v for k, v in query.items() if v and k not in ("part", "cursor")}
        next_url = None
        if more and records:
            next_url = "/?" + urlencode({**rest, "cursor": records[-1].task_id})
        return self._page(
            request,
            "tasks_body.html" if query.get("part") == "body" else "tasks.html",
            records=records,
            counts=await self._counts(),
            inbox=inbox,
            status=status,
            tool=tool or "",
            q=text or "",
            next_url=next_url,
            part_url="/?" + urlencode({**rest, "part": "body"}),
        )

    async def task(self, request: Request) -> Response:
        task_id = request.path_params["task_id"]
        context = await _task_context(self._client, task_id)
        if context is None:
            return self._missing(request, f"no task {task_id!r}")
        context["note"] = request.query_params.get("note")
        name = "task_body.html" if request.query_params.get("part") == "body" else "task.html"
        return self._page(request, name, **context)

    async def task_live(self, request: Request) -> Response:
        given = request.query_params
        numbers = (
            given.get("seen") or "0",
            given.get("generation") or "1",
            request.headers.get("last-event-id") or "0",
        )
        if not all(number.isdecimal() for number in numbers):
            message = "seen, generation and Last-Event-ID must be whole numbers"
            return PlainTextResponse(message, 400)
        seen, generation, after = (int(number) for number in numbers)
        task_id = request.path_params["task_id"]
        shown = given.get("stall") or None
        feed = task_feed(self._client, task_id, seen, generation, after, shown)
        return EventSourceResponse(until_closed(self._closing, feed), ping=15)

    async def list_live(self, request: Request) -> Response:
        feed = until_closed(self._closing, changes(self._client))
        return EventSourceResponse(feed, ping=15)

    async def _form(self, request: Request) -> dict[str, str] | Response:
        """A posted form's fields, or the refusal of one that did not come from here."""
        form = {key: str(value) for key, value in (await request.form()).items()}
        if not secrets.compare_digest(form.pop(CSRF_FIELD, ""), self._csrf):
            return PlainTextResponse(
                "refused: the form did not come from this dashboard (reload the page)", 403
            )
        return form

    async def action(self, request: Request) -> Response:
        task_id, verb = request.path_params["task_id"], request.path_params["verb"]
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        try:
            note, where = await _act(self._client, task_id, verb, form)
        except (views.FormError, TetherError, ValueError) as exc:
            context = await _task_context(self._client, task_id)
            if context is None:
                return self._missing(request, str(exc))
            code = next((c for k, c in _ACTION_CODES.items() if isinstance(exc, k)), 400)
            return self._page(request, "task.html", code, error=str(exc), **context)
        return RedirectResponse(f"/tasks/{where}?" + urlencode({"note": note}), status_code=303)

    async def dlq(self, request: Request) -> Response:
        client = self._client
        letters = list(reversed(await client.dead_letters(100)))  # newest first
        now: dict[str, str] = {}
        for task_id in {letter.task_id for letter in letters if letter.task_id}:
            record = await client.find(task_id)
            if record is not None:
                now[task_id] = record.status.value
        return self._page(request, "dlq.html", letters=letters, task_status=now)

    async def tools(self, request: Request) -> Response:
        client = self._client
        infos, workers = await client.tools(), await client.workers()
        backlog = await asyncio.gather(*(client.backlog(info.name) for info in infos))
        rows = [
            {
                "info": info,
                "backlog": state,
                "workers": [w for w in workers if info.name in w.tools],
            }
            for info, state in zip(infos, backlog, strict=True)
        ]
        return self._page(request, "tools.html", rows=rows, workers=workers)

    async def run_form(self, request: Request) -> Response:
        """A form that starts a task of one tool or agent: a prompt for an agent, the
        tool's input fields (or a JSON box) for a tool."""
        info = await self._client.tool(request.path_params["tool"])
        if info is None:
            return self._missing(request, f"no tool {request.path_params['tool']!r}")
        return self._page(request, "run.html", **_run_context(info))

    async def run(self, request: Request) -> Response:
        info = await self._client.tool(request.path_params["tool"])
        if info is None:
            return self._missing(request, f"no tool {request.path_params['tool']!r}")
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        try:
            handle = await self._client.submit(
                [StepSpec(tool=info.name, input=_run_input(info, form))]
            )
        except (views.FormError, TetherError, ValueError) as exc:
            context = {**_run_context(info), "form": form}  # what was typed stays
            return self._page(request, "run.html", 400, error=str(exc), **context)
        if await self._client.find(handle.task_id) is None:  # submit waits for it a while
            error = f"submitted as {handle.task_id}, but no dispatcher has recorded it yet: "
            error += NO_DISPATCHER
            return self._page(request, "run.html", 202, error=error, **_run_context(info))
        note = f"started {info.name}"
        return RedirectResponse(f"/tasks/{handle.task_id}?" + urlencode({"note": note}), 303)

    async def builds(self, request: Request) -> Response:
        listed = await self._client.builds()
        rows = list(reversed(listed.builds))  # newest first
        return self._page(request, "builds.html", rows=rows, deployment=listed.deployment)

    async def blob(self, request: Request) -> Response:
        ref = request.path_params["ref"]
        try:
            data = await self._client.load_blob(ref)
        except BlobNotFoundError:
            return self._missing(request, f"no blob {ref!r} (removed by `tether gc`?)")
        return Response(data, media_type="application/json")


def _run_context(info: ToolInfo) -> dict[str, Any]:
    fields = None if info.agent else views.form_fields(info.input_schema)
    return {"info": info, "fields": fields, "form": {}}


def _run_input(info: ToolInfo, form: dict[str, str]) -> Any:
    """A new task's input from the run form: an agent's `{"input": prompt}` (its budget
    too, when given), else the tool's input as its fields or JSON box make it."""
    if not info.agent:
        return views.answer_from_form(info.input_schema, form)
    prompt = form.get("prompt", "").strip()
    if not prompt:
        raise views.FormError("write what the agent should do")
    start: dict[str, Any] = {"input": prompt}
    budget = form.get("token_budget", "").strip()
    if budget:
        if not budget.isdecimal() or int(budget) == 0:
            raise views.FormError(
                f"the token budget must be a whole number above 0, not {budget!r}"
            )
        start["token_budget"] = int(budget)
    return start


async def _filtered(
    client: Client, status: str | None, tool: str | None, text: str | None, cursor: str | None
) -> tuple[list[TaskRecord], bool]:
    """A page of tasks, newest first; with a tool or text filter, read on through at most
    `SCAN` records to fill it."""
    if not tool and not text:
        return await client.list_page(status, limit=PAGE, cursor=cursor, newest_first=True)
    found: list[TaskRecord] = []
    scanned = 0
    while scanned < SCAN:
        records, more = await client.list_page(status, limit=PAGE, cursor=cursor, newest_first=True)
        scanned += len(records)
        for record in records:
            if views.matches(record, tool, text):
                found.append(record)
                if len(found) == PAGE:
                    return found, True
        if not more or not records:
            return found, False
        cursor = records[-1].task_id
    return found, True


async def _task_context(client: Client, task_id: str) -> dict[str, Any] | None:
    """What a task page shows; None when there is no such task. The events are read
    before the record, so the record is never older than the events the page counts as
    seen: the live feed sends only the later ones, and a terminal event among those read
    would otherwise leave the page showing a status it never refreshes."""
    events = await client.history(task_id)
    record = await client.find(task_id)
    if record is None:
        return None
    plan = await client.plan(record)
    children = [(child_id, await client.find(child_id)) for child_id in record.children]
    parent = None if record.parent is None else await client.find(record.parent.task_id)
    heartbeat = None
    if record.status is TaskStatus.RUNNING:
        heartbeat = await client.heartbeat(record.task_id)
    dispatcher_running = record.status.is_terminal or await client.dispatcher_running()
    first = plan[0] if plan else None
    info = None if first is None or first.tool is None else await client.tool(first.tool)
    now = utcnow()
    return {
        "record": record,
        "timeline": views.timeline(events, now, plan),
        "events": events,
        "plan": plan,
        "children": children,
        "parent": parent,
        "heartbeat": heartbeat,
        "stall": await client.stall(record),
        "no_dispatcher": None if dispatcher_running else NO_DISPATCHER,
        "tool": views.current_tool(record),
        "question": question(first, None if info is None else info.agent),
        "steerable": await client.runs_an_agent(record),
        "fields": views.form_fields(record.input_request.schema) if record.input_request else None,
        "now": now,
    }


async def _act(client: Client, task_id: str, verb: str, form: dict[str, str]) -> tuple[str, str]:
    """Run a task's action; returns the note to show and the task to show it on."""
    if verb == "cancel":
        await client.cancel(task_id)
        return "cancelled", task_id
    if verb == "retry":
        await client.retry(task_id)
        return "retrying from the failed step", task_id
    if verb == "input":
        record = await client.get(task_id)
        schema = record.input_request.schema if record.input_request else {}
        await client.send_input(task_id, views.answer_from_form(schema, form))
        return "answer sent", task_id
    if verb == "message":
        text = form.get("text", "").strip()
        if not text:
            raise views.FormError("write a message to send")
        await client.send_message(task_id, text)
        return "message sent: the agent reads it before its next call", task_id
    if verb == "fork":
        step = int(form.get("step", "0"))
        raw = form.get("input", "").strip()
        new_input = views.answer_from_form({}, {"json": raw}) if raw else None
        handle = await client.fork(task_id, step, input=new_input)
        return f"forked from {task_id} at step {step}", handle.task_id
    raise ValueError(f"no action {verb!r}: {', '.join(ACTIONS)}")
