// A Tether client in Node.js that uses only the official NATS packages: no Tether code.
//
//   node client.mjs <nats-url> [prefix] [--no-api]
//   node client.mjs <nats-url> [prefix] --agent <question>
//   node client.mjs <nats-url> [prefix] --session <first message>
//
// Submits the seed task on <prefix>.submit.<task id>, follows its status events, reads its record
// from KV, runs a parallel group (fan-out, fan-in), then (unless --no-api) uses the request/reply API: get, cancel a running task,
// get an unknown id. Prints one JSON summary line and exits 0, or exits 1 naming the
// first thing that did not match the protocol (schemas/README.md).
//
// With --agent it instead submits a `researcher` agent task asking <question> and follows
// its token stream (schemas/README.md, "Token streams"): an ordered consumer from the start
// for the first chunks, then, as a reader resuming after a disconnect would, a second one
// from one past the last stream sequence seen, until the task is terminal and the
// subject's last message is reached. It prints the text, the chunks and the record's end.
//
// With --session it chats with the `researcher` agent in a session (schemas/README.md,
// "Sessions"): sends <first message> to a new session (twice: the second is a duplicate),
// follows the session's run boundaries and each run's tokens, then sends a second message,
// which starts the next run, and reads which run took it.

import { randomUUID } from "node:crypto";
import { isDeepStrictEqual } from "node:util";

import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, headers } from "@nats-io/transport-node";

const USAGE = "usage: node client.mjs <nats-url> [prefix] [--no-api | --agent <question> | --session <text>]";
const args = process.argv.slice(2);
const useApi = !args.includes("--no-api");
const sessionAt = args.indexOf("--session");
const agentAt = sessionAt === -1 ? args.indexOf("--agent") : sessionAt;
const question = agentAt === -1 ? undefined : args[agentAt + 1];
if (agentAt !== -1 && (question === undefined || question.startsWith("--"))) fail(USAGE);
const positional = args.filter((arg, i) => !arg.startsWith("--") && (agentAt === -1 || i !== agentAt + 1));
const [url, prefix = "tether"] = positional;
if (!url) fail(USAGE);

const upper = prefix.toUpperCase().replaceAll("-", "_");
const SUBMIT_STREAM = `${upper}_SUBMIT`;
const STATUS_STREAM = `${upper}_STATUS`;
const TOKENS_STREAM = `${upper}_TOKENS`;
const SESSIONS_STREAM = `${upper}_SESSIONS`;
const CHUNK_FIELDS = ["task_id", "step", "attempt", "seq"];
const RESUME_AFTER = 2; // chunks read by the first consumer before it is dropped
const IDLE_CHECK_MS = 1_000; // how long a pull waits before the end is checked again
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const EVENT_FIELDS = [
  "event", "task_id", "status", "step", "branch", "tool", "attempt", "time", "output", "error",
];
const RECORD_FIELDS = [
  "task_id", "status", "steps", "current_step", "result", "error", "metadata", "created_at", "updated_at",
];
const SEED = [
  { tool: "search", input: { query: "AI trends 2026" } },
  { tool: "summarize" },
  { tool: "write_report" },
];

function fail(message) {
  console.error(`interop client: ${message}`);
  process.exit(1);
}

function check(condition, message, actual) {
  if (!condition) fail(actual === undefined ? message : `${message}: got ${JSON.stringify(actual)}`);
}

function checkFields(fields, value) {
  const missing = fields.filter((field) => !(field in value));
  check(missing.length === 0, `missing fields ${missing}`, value);
}

const newTaskId = () => `node-${randomUUID().replaceAll("-", "")}`;

async function submit(js, taskId, steps, metadata = { client: "node" }) {
  const body = JSON.stringify({ task_id: taskId, steps, ...(metadata ? { metadata } : {}) });
  const hdrs = headers();
  hdrs.set("Nats-Msg-Id", taskId); // a re-submit of the same id is a no-op
  const ack = await js.publish(`${prefix}.submit.${taskId}`, body, { headers: hdrs });
  check(ack.stream === SUBMIT_STREAM && !ack.duplicate, "unexpected PubAck on submit", ack);
  const again = await js.publish(`${prefix}.submit.${taskId}`, body, { headers: hdrs });
  check(again.duplicate, "a re-submit with the same Nats-Msg-Id was not a duplicate", again);
}

// An ordered consumer on the status stream replays every event of the task from the
// start, so it does not matter whether it is created before or after the submit.
async function watch(js, taskId) {
  const consumer = await js.consumers.get(STATUS_STREAM, {
    filter_subjects: [`${prefix}.status.${taskId}`],
  });
  const messages = await consumer.consume();
  const iterator = messages[Symbol.asyncIterator]();
  const seen = [];
  return {
    seen,
    async until(kind) {
      for (;;) {
        const { value, done } = await iterator.next();
        if (done) fail(`the status events of ${taskId} ended before '${kind}'`);
        const event = value.json();
        check(value.subject === `${prefix}.status.${taskId}`, "event on the wrong subject", value.subject);
        checkFields(EVENT_FIELDS, event);
        check(event.task_id === taskId, "event of another task", event);
        seen.push(event);
        if (event.event === kind) return event;
        if (TERMINAL.has(event.event)) fail(`waited for '${kind}' but the task ended: ${JSON.stringify(event)}`);
      }
    },
    stop: () => messages.stop(),
  };
}

async function request(nc, verb, body) {
  const subject = `${prefix}.api.${verb}`;
  try {
    const reply = await nc.request(subject, JSON.stringify(body), { timeout: 10_000 });
    return reply.json();
  } catch (error) {
    fail(`request on ${subject} failed (is the API service running?): ${error.message}`);
  }
}

async function seedTask(nc, js) {
  const taskId = newTaskId();
  const events = await watch(js, taskId);
  await submit(js, taskId, SEED);
  const completed = await events.until("completed");
  events.stop();
  check(completed.status === "completed", "completed event with the wrong status", completed);

  const kv = await new Kvm(js).open(`${prefix}-tasks`);
  const entry = await kv.get(taskId);
  check(entry !== null && entry.value.length > 0, `no record under ${taskId} in ${prefix}-tasks`);
  const record = entry.json();
  checkFields(RECORD_FIELDS, record);
  check(record.status === "completed" && record.current_step === SEED.length, "record not completed", record);
  check(isDeepStrictEqual(record.result, completed.output), "record result differs from the event", record);
  check(isDeepStrictEqual(record.metadata, { client: "node" }), "metadata lost", record.metadata);

  const summary = {
    task_id: taskId,
    events: events.seen.map((e) => [e.event, e.step]),
    result: record.result,
    record_status: record.status,
  };
  if (useApi) {
    const got = await request(nc, "get", { task_id: taskId });
    check(got.task_id === taskId && got.status === "completed", "api.get disagrees with KV", got);
    check(isDeepStrictEqual(got.result, record.result), "api.get result differs from KV", got);
    summary.api_get_status = got.status;
  }
  return summary;
}

// Two branches fan out from one step and fan in to the next, which gets their outputs
// as a list in branch order (schemas/README.md, "Parallel steps").
async function parallelTask(js) {
  const taskId = newTaskId();
  const events = await watch(js, taskId);
  const queries = ["AI trends 2026", "MCP tasks"];
  await submit(js, taskId, [
    { parallel: queries.map((query) => ({ tool: "search", input: { query } })) },
    { tool: "fast" },
  ]);
  const completed = await events.until("completed");
  events.stop();
  const branchEvents = events.seen.filter((e) => e.branch !== null);
  check(branchEvents.every((e) => e.step === 0 && e.tool === "search"), "branch events", branchEvents);
  const fanIn = events.seen.find((e) => e.event === "step_completed" && e.step === 0 && e.branch === null);
  check(fanIn !== undefined && Array.isArray(fanIn.output) && fanIn.output.length === 2,
    "the group's step_completed carries the list of outputs", fanIn);
  check(isDeepStrictEqual(completed.output.payload, fanIn.output), "the next step got the list", completed);
  return {
    parallel_task_id: taskId,
    parallel_branches: [...new Set(branchEvents.map((e) => e.branch))].sort(),
    parallel_result: completed.output.payload,
  };
}

async function cancelledTask(nc, js) {
  const taskId = newTaskId();
  const events = await watch(js, taskId);
  await submit(js, taskId, [{ tool: "slow", input: { sleep: 30 } }]);
  await events.until("step_started");
  const cancelled = await request(nc, "cancel", { task_id: taskId });
  check(cancelled.task_id === taskId && cancelled.status === "cancelled", "api.cancel reply", cancelled);
  await events.until("cancelled");
  events.stop();
  const missing = await request(nc, "get", { task_id: newTaskId() });
  // Records have an `error` field too: an error reply is the object whose only key is `error`.
  const isError = Object.keys(missing).join() === "error";
  check(isError && missing.error.code === "not_found" && typeof missing.error.message === "string",
    "api.get of an unknown id", missing);
  return {
    cancelled_task_id: taskId,
    cancel_status: cancelled.status,
    cancel_events: events.seen.map((e) => [e.event, e.step]),
    unknown_error_code: missing.error.code,
  };
}

// The record once it is terminal, or null while it is not (or not yet written).
async function terminalRecord(kv, taskId) {
  const entry = await kv.get(taskId);
  if (entry === null || entry.value.length === 0) return null;
  const record = entry.json();
  return TERMINAL.has(record.status) ? record : null;
}

// Reads chunks from `consumer` into `state` until `limit` chunks were read by this
// consumer, or the stream has ended: the task's record is terminal and the last message
// on the subject (at the time the record was seen terminal) has been reached. Every chunk
// is written before the step that wrote it completes, so that message is the last one.
// Returns the terminal record when it ended, else null.
async function follow(consumer, { jsm, kv, taskId, subject, state, limit = Infinity }) {
  let read = 0;
  while (read < limit) {
    const message = await consumer.next({ expires: IDLE_CHECK_MS });
    if (message !== null) {
      check(message.subject === subject, "chunk on the wrong subject", message.subject);
      const sequence = message.seq; // the stream sequence
      check(sequence > state.lastSeq, "stream sequences went backwards", [state.lastSeq, sequence]);
      const chunk = message.json();
      checkFields(CHUNK_FIELDS, chunk);
      check(chunk.task_id === taskId, "chunk of another task", chunk);
      state.lastSeq = sequence;
      state.streamSeqs.push(sequence);
      state.chunks.push(chunk);
      read += 1;
      continue;
    }
    const record = await terminalRecord(kv, taskId);
    if (record === null) continue;
    const last = await jsm.streams.getMessage(TOKENS_STREAM, { last_by_subj: subject });
    if (state.lastSeq >= (last?.seq ?? 0)) return record;
  }
  return null;
}

// The text a reader shows: per step (and branch), the chunks of its latest attempt in
// order, since a chunk with a higher attempt starts that step's text over; then the steps
// in order.
function latestText(chunks) {
  const parts = new Map();
  for (const chunk of chunks) {
    const key = `${chunk.step}/${chunk.branch ?? -1}`;
    const part = parts.get(key);
    if (part === undefined || chunk.attempt > part.attempt) {
      parts.set(key, { step: chunk.step, branch: chunk.branch ?? -1, attempt: chunk.attempt, text: [] });
    } else if (chunk.attempt < part.attempt) {
      continue; // a late chunk of an attempt already replaced
    }
    parts.get(key).text.push(chunk.delta ?? "");
  }
  return [...parts.values()]
    .sort((a, b) => a.step - b.step || a.branch - b.branch)
    .map((part) => part.text.join(""))
    .join("");
}

async function agentTask(js, jsm, question) {
  const taskId = newTaskId();
  const subject = `${prefix}.tokens.${taskId}`;
  const kv = await new Kvm(js).open(`${prefix}-tasks`);
  await submit(js, taskId, [{ tool: "researcher", input: { input: question } }], null);

  const state = { lastSeq: 0, streamSeqs: [], chunks: [] };
  const context = { jsm, kv, taskId, subject, state };
  const first = await js.consumers.get(TOKENS_STREAM, {
    filter_subjects: [subject],
    deliver_policy: DeliverPolicy.All,
  });
  let record = await follow(first, { ...context, limit: RESUME_AFTER });
  await first.delete().catch(() => {}); // as if the reader had gone away
  const resumedAfter = state.lastSeq;
  if (record === null) {
    const second = await js.consumers.get(TOKENS_STREAM, {
      filter_subjects: [subject],
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: resumedAfter + 1,
    });
    record = await follow(second, context);
    await second.delete().catch(() => {});
  }
  checkFields(RECORD_FIELDS, record);
  check(record.task_id === taskId, "record of another task", record);
  return {
    task_id: taskId,
    text: latestText(state.chunks),
    chunks: state.chunks.map((c) => [c.step, c.attempt, c.seq]),
    stream_seqs: state.streamSeqs,
    resumed_after: resumedAfter,
    status: record.status,
    result: record.result,
  };
}

// A message to a session, stored once: its id as Nats-Msg-Id, and create-only on its subject.
async function say(js, sessionId, messageId, body) {
  const hdrs = headers();
  hdrs.set("Nats-Msg-Id", `${sessionId}.${messageId}`);
  hdrs.set("Nats-Expected-Last-Subject-Sequence", "0");
  const subject = `${prefix}.session.${sessionId}.in.${messageId}`;
  return js.publish(subject, JSON.stringify(body), { headers: hdrs });
}

async function sessionChat(js, jsm, first) {
  const sessionId = `node-chat-${randomUUID().replaceAll("-", "")}`;
  const kv = await new Kvm(js).open(`${prefix}-tasks`);
  const opening = { text: first, agent: "researcher" };
  const ack = await say(js, sessionId, "m1", opening);
  check(ack.stream === SESSIONS_STREAM && !ack.duplicate, "unexpected PubAck on a session message", ack);
  const again = await say(js, sessionId, "m1", opening).then(() => null, (error) => error);
  check(again?.code === 10071, "a message sent again was not refused as stored", again?.message);
  const boundaries = await js.consumers.get(SESSIONS_STREAM, {
    filter_subjects: [`${prefix}.session.${sessionId}.out.*`],
  });
  const runs = [];
  for (const [n, messageId, text] of [[1, "m1", null], [2, "m2", "And then?"]]) {
    if (text !== null) await say(js, sessionId, messageId, { text }); // the next run's
    const boundary = await boundaries.next({ expires: 30_000 });
    check(boundary !== null, `no boundary of run ${n}`);
    const run = boundary.json();
    check(run.run === n && isDeepStrictEqual(run.messages, [messageId]), "unexpected run boundary", run);
    const subject = `${prefix}.tokens.${run.task_id}`;
    const state = { lastSeq: 0, streamSeqs: [], chunks: [] };
    const tokens = await js.consumers.get(TOKENS_STREAM, { filter_subjects: [subject] });
    const record = await follow(tokens, { jsm, kv, taskId: run.task_id, subject, state });
    await tokens.delete().catch(() => {});
    const said = latestText(state.chunks);
    runs.push({ run: run.run, task_id: run.task_id, after: run.after ?? null, text: said, status: record.status });
  }
  const m2 = `${prefix}.session.${sessionId}.in.m2`;
  const taken = await jsm.streams.getMessage(SESSIONS_STREAM, { last_by_subj: m2 });
  return { session_id: sessionId, runs, m2_taken_by: taken.json().taken_by };
}

// Replies under a prefix of our own (deploy/nats/roles.conf lets each user read only
// `_INBOX_<user>.>`): every NATS client library has this option.
const inboxPrefix = process.env.TETHER_NATS_INBOX_PREFIX || "_INBOX";
const nc = await connect({ servers: url, name: "tether-interop-node", inboxPrefix });
const watchdog = setTimeout(() => fail("timed out after 60s"), 60_000);
try {
  const js = jetstream(nc);
  let summary;
  if (sessionAt !== -1) {
    summary = await sessionChat(js, await jetstreamManager(nc), question);
  } else if (question !== undefined) {
    summary = await agentTask(js, await jetstreamManager(nc), question);
  } else {
    summary = await seedTask(nc, js);
    Object.assign(summary, await parallelTask(js));
    if (useApi) Object.assign(summary, await cancelledTask(nc, js));
  }
  console.log(JSON.stringify({ ...summary, inbox_prefix: inboxPrefix }));
} catch (error) {
  fail(error?.stack ?? String(error));
} finally {
  clearTimeout(watchdog);
  await nc.close();
}
