// A Tether worker in Node.js, written from schemas/README.md ("Serving a tool from another
// language") and the JSON Schemas alone, with the official NATS packages: no Tether code.
//
//   node worker.mjs <nats-url> <prefix> <tool>...
//
// Tools: node_upper (a string upper-cased, or {"text": ...} with its text upper-cased),
// node_flaky (fails its first attempt), node_broken (always fails), node_slow (sleeps
// input.sleep seconds while heartbeating). Each execution appends a line
// "<task_id> <step>[.b<branch>] <attempt> <pid> <tool>" to $TETHER_TEST_EXECUTIONS if set.
// Prints "ready" on stdout once its consumers exist and its tools are registered.

import { appendFileSync } from "node:fs";
import { hostname } from "node:os";
import { randomUUID } from "node:crypto";

import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { connect, headers } from "@nats-io/transport-node";

const [url, prefix, ...toolNames] = process.argv.slice(2);
if (!url || !prefix || toolNames.length === 0) {
  console.error("usage: node worker.mjs <nats-url> <prefix> <tool>...");
  process.exit(2);
}
const UPPER = prefix.toUpperCase().replaceAll("-", "_");
const WORK_STREAM = `${UPPER}_WORK`;
const HEARTBEAT_MS = Number(process.env.TETHER_NODE_HEARTBEAT_MS ?? 500);
const ACK_WAIT_MS = Math.round(HEARTBEAT_MS / 2 + 1000);
const BEAT_EVERY_MS = 500;
const EVENT_OUTPUT_MAX = 4096;
const TASK_ID = /^[A-Za-z0-9_-]{1,128}$/;
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const WORKER_ID = `node-${hostname()}-${process.pid}-${randomUUID().slice(0, 6)}`;
const WORKER_KEY = WORKER_ID.replace(/[^A-Za-z0-9_=-]/g, "_");
const STARTED_AT = now();
const enc = new TextEncoder();
const dec = new TextDecoder();

// ---------------------------------------------------------------------------- the tools

class ToolError extends Error {
  constructor(message, { type, terminal = false } = {}) {
    super(message);
    this.name = type ?? "ToolError";
    this.terminal = terminal;
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason ?? new Error("aborted"));
    });
  });

const FAST_RETRY = { max_attempts: 3, initial_backoff_ms: 50, max_backoff_ms: 200, jitter: 0 };
const TOOLS = {
  node_upper: {
    description: "Upper-cases a string, or the `text` of an object.",
    retry: FAST_RETRY,
    async run(input) {
      if (typeof input === "string") return input.toUpperCase();
      if (input && typeof input === "object" && typeof input.text === "string") {
        return { text: input.text.toUpperCase() };
      }
      throw new ToolError(`node_upper: expected a string or {"text": string}`, { type: "InvalidInput", terminal: true });
    },
  },
  node_flaky: {
    description: "Fails on its first attempt, succeeds on the second.",
    retry: FAST_RETRY,
    async run(input, ctx) {
      if (ctx.attempt < 2) throw new ToolError(`attempt ${ctx.attempt} failed`, { type: "FlakyError" });
      return { attempt: ctx.attempt, input };
    },
  },
  node_broken: {
    description: "Always fails.",
    retry: FAST_RETRY,
    async run() {
      throw new ToolError("the node service is down", { type: "ServiceDown" });
    },
  },
  node_slow: {
    description: "Sleeps input.sleep seconds.",
    retry: FAST_RETRY,
    async run(input, ctx) {
      const seconds = input && typeof input === "object" && typeof input.sleep === "number" ? input.sleep : 0.3;
      await sleep(seconds * 1000, ctx.signal);
      return { step: ctx.step, slept: seconds };
    },
  },
};
const DEFAULT_TIMEOUT_MS = 300_000;

for (const name of toolNames) {
  if (!TOOLS[name]) {
    console.error(`unknown tool '${name}': this worker serves ${Object.keys(TOOLS)}`);
    process.exit(2);
  }
}

function recordExecution(ctx) {
  const path = process.env.TETHER_TEST_EXECUTIONS;
  if (!path) return;
  const where = ctx.branch === null ? `${ctx.step}` : `${ctx.step}.b${ctx.branch}`;
  appendFileSync(path, `${ctx.task_id} ${where} ${ctx.attempt} ${process.pid} ${ctx.tool}\n`);
}

// ---------------------------------------------------------------------------- helpers

function now() {
  // RFC 3339 UTC with a Z; microseconds as the Python side writes them.
  return new Date().toISOString().replace("Z", "000Z");
}

function createdMicros(createdAt) {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$/.exec(createdAt);
  if (!m) throw new Error(`bad created_at ${createdAt}`);
  const seconds = BigInt(Date.parse(`${m[1]}${m[3] ?? "Z"}`) / 1000);
  const micros = BigInt((m[2] ?? "").padEnd(6, "0").slice(0, 6));
  return (seconds * 1_000_000n + micros).toString().padStart(16, "0");
}

const jsonBytes = (value) => enc.encode(JSON.stringify(value));
const eventOutput = (value) => (value === undefined ? null : JSON.stringify(value ?? null).length > EVENT_OUTPUT_MAX ? null : value);
const stepKey = (taskId, step, branch) => (branch === null ? `${taskId}.${step}` : `${taskId}.${step}.b${branch}`);
const gen = (n) => `.g${n}`;

function cut(message) {
  return message.length > 4096 ? `${message.slice(0, 4096)}… (${message.length} characters)` : message;
}

function errorInfo(type, message, traceback) {
  return traceback ? { type, message, traceback } : { type, message };
}

// ---------------------------------------------------------------------------- NATS

const nc = await connect({ servers: url, name: `tether-node-worker ${WORKER_ID}` });
const js = jetstream(nc);
// A connection closed for good ends the process (status 1), so a supervisor restarts it.
nc.closed().then((err) => {
  if (!stopping) fail(`the NATS connection closed${err ? `: ${err.message}` : ""}`);
});
let stopping = false;
const jsm = await jetstreamManager(nc);

// The stamp of the installation: layout 4 (see "Names"; 4 adds sessions to 3, which a
// worker does not use, so a worker of layout 3 serves a layout 4 installation as it is).
const workInfo = await jsm.streams.info(WORK_STREAM).catch(() => null);
if (!workInfo) fail(`stream ${WORK_STREAM} is missing: run 'tether provision' first`);
const layout = workInfo.config.metadata?.["tether.layout"];
if (!["3", "4"].includes(layout)) fail(`${WORK_STREAM} has layout ${layout ?? "(none)"}, this worker speaks layouts 3 and 4`);

const kvm = new Kvm(js);
const tasksKv = await kvm.open(`${prefix}-tasks`);
const checkpointsKv = await kvm.open(`${prefix}-checkpoints`);
const heartbeatsKv = await kvm.open(`${prefix}-heartbeats`);
const workersKv = await kvm.open(`${prefix}-workers`);
const toolsKv = await kvm.open(`${prefix}-tools`);

function fail(message) {
  console.error(`node worker: ${message}`);
  process.exit(1);
}

async function readKey(kv, key) {
  const entry = await kv.get(key);
  if (!entry || entry.operation !== "PUT") return null;
  return { value: entry.json(), revision: entry.revision };
}

const readRecord = (taskId) => readKey(tasksKv, taskId);
const readCheckpoint = async (key) => (await readKey(checkpointsKv, key))?.value ?? null;

class Conflict extends Error {}

// A write on a KV key with Nats-Expected-Last-Subject-Sequence (0: create only).
async function kvWrite(bucket, key, value, expected) {
  try {
    const ack = await js.publish(`$KV.${bucket}.${key}`, jsonBytes(value), {
      expect: { lastSubjectSequence: expected },
    });
    return ack.seq;
  } catch (error) {
    if (/wrong last sequence|10071/i.test(`${error.message} ${error.api_error?.err_code ?? ""}`)) throw new Conflict(error.message);
    throw error;
  }
}

function indexRow(record, oldStatus) {
  const micros = createdMicros(record.created_at);
  nc.publish(`${prefix}.index.${record.status}.${micros}.${record.task_id}`, new Uint8Array());
  if (oldStatus && oldStatus !== record.status) {
    const h = headers();
    h.set("Nats-Rollup", "sub");
    h.set("Nats-TTL", "1s");
    nc.publish(`${prefix}.index.${oldStatus}.${micros}.${record.task_id}`, new Uint8Array(), { headers: h });
  }
}

// Compare-and-set: `change(record)` returns the fields to change, or null when the change
// does not apply. Returns {record, changed}.
async function casRecord(taskId, change, read = null) {
  for (let tries = 0; ; tries++) {
    const current = read ?? (await readRecord(taskId));
    read = null;
    if (!current) return { record: null, changed: false };
    const fields = change(current.value);
    if (!fields) return { record: current.value, changed: false, revision: current.revision };
    const next = { ...current.value, ...fields, updated_at: now() };
    try {
      const revision = await kvWrite(`${prefix}-tasks`, taskId, next, current.revision);
      if (next.status !== current.value.status) indexRow(next, current.value.status);
      return { record: next, changed: true, revision };
    } catch (error) {
      if (!(error instanceof Conflict) || tries > 50) throw error;
    }
  }
}

// Status events (6): progress events with core NATS, ends and pauses with JetStream.
async function emit(event, record, fields) {
  const { step = null, branch = null, attempt = null } = fields;
  const generation = fields.generation ?? record.generation ?? 1;
  const body = {
    event,
    task_id: record.task_id,
    status: fields.status ?? record.status,
    step,
    branch,
    tool: fields.tool ?? null,
    attempt,
    time: now(),
    output: eventOutput(fields.output ?? null),
    error: fields.error ?? null,
    generation,
    ...(fields.extra ?? {}),
  };
  const where = step === null ? "task" : branch === null ? `${step}` : `${step}.b${branch}`;
  const n = event === "step_started" || event === "step_retrying" ? attempt ?? 0 : 0;
  const h = headers();
  h.set("Nats-Msg-Id", `${record.task_id}.${where}.${event}${gen(generation)}.${n}`);
  const subject = `${prefix}.status.${record.task_id}`;
  if (["completed", "failed", "cancelled", "waiting"].includes(event)) {
    await js.publish(subject, jsonBytes(body), { headers: h });
  } else {
    nc.publish(subject, jsonBytes(body), { headers: h });
  }
}

async function deadLetter(tool, fields, error, msg) {
  const data = msg.data;
  await js.publish(`${prefix}.dead.${tool}`, jsonBytes({
    tool,
    task_id: fields.task_id ?? null,
    step: fields.step ?? null,
    branch: fields.branch ?? null,
    attempt: fields.attempt ?? 0,
    error,
    subject: msg.subject,
    data: Buffer.from(data.subarray(0, 65536)).toString("base64"),
    size: data.length,
    time: now(),
  }));
}

// ---------------------------------------------------------------------------- plan helpers

const specAt = (record, step) => record.steps[step - (record.done_steps ?? 0)] ?? null;

// The tool the record's plan has at `step` (and `branch`): what a `failed` event names when a
// message is rejected (the Python worker names the plan's tool, not the message's).
function planTool(record, step, branch) {
  const spec = step >= (record.done_steps ?? 0) ? specAt(record, step) : null;
  const one = branch === null ? spec : spec?.parallel?.[branch];
  return one?.tool ?? null;
}

function retryPolicy(tool, spec) {
  const base = TOOLS[tool]?.retry ?? { max_attempts: 3, initial_backoff_ms: 1000, max_backoff_ms: 60000, jitter: 0.2 };
  const o = spec?.retry ?? {};
  return {
    max_attempts: o.max_attempts ?? base.max_attempts,
    initial_backoff_ms: o.initial_backoff_ms ?? base.initial_backoff_ms,
    max_backoff_ms: o.max_backoff_ms ?? base.max_backoff_ms,
    jitter: base.jitter ?? 0.2,
  };
}

function backoffMs(policy, attempt, retryAfterMs) {
  if (retryAfterMs != null) return Math.min(retryAfterMs, policy.max_backoff_ms);
  let delay = Math.min(policy.initial_backoff_ms * 2 ** (attempt - 1), policy.max_backoff_ms);
  delay *= 1 + (Math.random() * 2 - 1) * policy.jitter;
  return Math.round(Math.max(0, Math.min(delay, policy.max_backoff_ms)));
}

function addUsage(a, b) {
  if (!a) return b ?? null;
  if (!b) return a;
  const sum = {};
  for (const k of ["input_tokens", "output_tokens", "cached_tokens", "requests"]) {
    const v = (a[k] ?? 0) + (b[k] ?? 0);
    if (v) sum[k] = v;
  }
  if (a.model && a.model === b.model) sum.model = a.model;
  return sum;
}

// ---------------------------------------------------------------------------- hand-off (4c, 4d)

async function handOff(record, step, output, wakeAt) {
  // `record` has reached step + 1 (steps[0] is `step`).
  const next = specAt(record, step + 1);
  if (!next) return;
  const N = record.generation ?? 1;
  const publishOne = async (spec, branch) => {
    const work = {
      task_id: record.task_id,
      step: step + 1,
      tool: spec.tool,
      input: spec.input ?? output,
      generation: N,
      branch,
    };
    const id = `${record.task_id}.${step + 1}${branch === null ? "" : `.b${branch}`}${N >= 2 ? gen(N) : ""}`;
    const h = headers();
    const wake = wakeAt ? Date.parse(wakeAt) : 0;
    if (wake > Date.now()) {
      // A timer request (the protocol page's "Timers"): the dispatchers store the schedule.
      const at = new Date(Math.ceil(wake / 1000) * 1000).toISOString().replace(/\.\d+Z$/, "Z");
      h.set("Tether-Timer", id);
      h.set("Tether-Timer-At", at);
      h.set("Tether-Wake", `${prefix}.work.${spec.tool}`);
      await js.publish(`${prefix}.work._schedule`, jsonBytes(work), { headers: h });
    } else {
      h.set("Nats-Msg-Id", id);
      await js.publish(`${prefix}.work.${spec.tool}`, jsonBytes(work), { headers: h });
    }
  };
  if (next.parallel) {
    await Promise.all(next.parallel.map((spec, b) => publishOne(spec, b)));
  } else {
    await publishOne(next, null);
  }
}

// 4c and 4d after the record reached step + 1.
async function afterRecorded(record, step, ck) {
  const { output, attempt, skipped, usage, tool } = ck;
  await emit("step_completed", record, {
    step, tool, attempt, output,
    extra: { skipped, wake_at: record.wake_at ?? null, usage: usage ?? null },
  });
  if (record.status === "completed") {
    await emit("completed", record, { output: record.result });
    if (record.parent) await resumeParent(record);
    return;
  }
  await handOff(record, step, output, record.wake_at ?? null);
}

// 4b: record the step. Returns the record after the attempt, and whether the caller should
// go on with 4c/4d (`applies`).
async function recordStep(work, ck, read) {
  const step = work.step;
  const { record, changed } = await casRecord(work.task_id, (r) => {
    if (TERMINAL.has(r.status) || r.current_step !== step) return null;
    const done = r.done_steps ?? 0;
    const rest = r.steps.slice(step - done);
    const steps = [rest[0], ...(ck.next_steps ?? []), ...rest.slice(1)];
    const last = steps.length === 1;
    return {
      current_step: step + 1,
      steps,
      done_steps: step,
      status: last ? "completed" : "running",
      result: last ? ck.output : null,
      input_request: null,
      note: null,
      awaiting: null,
      done_branches: [],
      wake_at: last ? null : ck.wake_at ?? null,
      usage: addUsage(r.usage ?? null, ck.usage ?? null),
    };
  }, read);
  if (!record) return { record, applies: false };
  if (changed) return { record, applies: true, changed };
  return {
    record,
    applies: record.current_step === step + 1 && (record.generation ?? 1) === work.generation &&
      !["failed", "cancelled"].includes(record.status),
  };
}

// ---------------------------------------------------------------------------- give up (5c)

async function giveUp(msg, work, attempt, error, { toolName, deadLetterIt = true } = {}) {
  const tool = toolName ?? work.tool;
  if (deadLetterIt) {
    await deadLetter(tool, { task_id: work.task_id, step: work.step, branch: work.branch, attempt }, error, msg);
  }
  await failTask(work.task_id, work.step, work.branch, attempt, tool, error);
  msg.term();
}

async function failTask(taskId, step, branch, attempt, tool, error) {
  const { record, changed } = await casRecord(taskId, (r) =>
    TERMINAL.has(r.status) ? null : { status: "failed", error, failed_step: step, input_request: null },
  );
  if (!changed) return;
  await emit("failed", record, { step, branch, attempt, tool, error });
  if (branch !== null) nc.publish(`${prefix}.control.cancelled.${taskId}`, new Uint8Array());
  if (record.parent) await resumeParent(record);
}

// ---------------------------------------------------------------------------- child tasks

async function resumeParent(child) {
  const p = child.parent;
  const read = await readRecord(p.task_id);
  if (!read) return;
  const parent = read.value;
  if (TERMINAL.has(parent.status) || parent.current_step !== p.step || (parent.generation ?? 1) !== (p.generation ?? 1)) return;
  let { record } = await casRecord(p.task_id, (r) =>
    (r.children ?? []).includes(child.task_id)
      ? null
      : { children: [...(r.children ?? []), child.task_id], starting: (r.starting ?? []).filter((id) => id !== child.task_id) },
  read);
  if (!record) return;
  const spec = specAt(record, p.step);
  if (child.status === "completed") {
    try {
      await kvWrite(`${prefix}-checkpoints`, `${p.task_id}.${p.step}`, {
        output: child.result, next_steps: null, attempt: 1, time: now(), spec, wake_at: null, usage: null,
      }, 0);
    } catch (error) {
      if (!(error instanceof Conflict)) throw error;
    }
    const N = record.generation ?? 1;
    const h = headers();
    h.set("Nats-Msg-Id", `${p.task_id}.${p.step}${N >= 2 ? gen(N) : ""}.input`);
    const work = { task_id: p.task_id, step: p.step, tool: spec.tool, input: spec.input ?? null, generation: N, branch: null };
    await js.publish(`${prefix}.work.${spec.tool}`, jsonBytes(work), { headers: h });
    return;
  }
  const error = child.status === "cancelled"
    ? { type: "ChildCancelled", message: `child task '${child.task_id}' was cancelled` }
    : { type: "ChildFailed", message: `child task '${child.task_id}' failed: ${child.error?.type}: ${child.error?.message}` };
  const done = await casRecord(p.task_id, (r) =>
    TERMINAL.has(r.status) || r.current_step !== p.step || (r.generation ?? 1) !== (p.generation ?? 1)
      ? null
      : { status: "failed", failed_step: p.step, error, input_request: null },
  );
  if (!done.changed) return;
  await emit("failed", done.record, { step: p.step, tool: spec?.tool ?? null, error });
  if (done.record.parent) await resumeParent(done.record);
}

// ---------------------------------------------------------------------------- parallel steps

// 4b′ and 4b″: count the branch, emit its step_completed, fan in if the set is complete.
async function countBranch(msg, work, ck) {
  const { task_id, step, branch } = work;
  const { record } = await casRecord(task_id, (r) => {
    if (TERMINAL.has(r.status) || r.current_step !== step || (r.done_branches ?? []).includes(branch)) return null;
    const fields = { done_branches: [...(r.done_branches ?? []), branch].sort((a, b) => a - b), note: null };
    if (r.status === "pending") fields.status = "running";
    return fields;
  });
  if (!record) return msg.term();
  const counted = (record.done_branches ?? []).includes(branch);
  if (counted) {
    await emit("step_completed", record, {
      step, branch, tool: work.tool, attempt: ck.attempt, output: ck.output,
      extra: { skipped: ck.skipped, wake_at: null, usage: ck.usage ?? null },
    });
  }
  const group = specAt(record, step);
  if (
    counted && record.current_step === step && !TERMINAL.has(record.status) &&
    group?.parallel && group.parallel.every((_, b) => record.done_branches.includes(b))
  ) {
    await fanIn(record, step, group);
  } else if (record.current_step === step + 1) {
    await replayGroupHandOff(record, step);
  }
  msg.ack();
}

async function fanIn(record, step, group) {
  const outputs = [];
  let usage = null;
  for (let b = 0; b < group.parallel.length; b++) {
    const ck = await readCheckpoint(`${record.task_id}.${step}.b${b}`);
    if (!ck) throw new Error(`branch ${b} of ${record.task_id}.${step} is counted but has no checkpoint`);
    outputs.push(ck.output);
    usage = addUsage(usage, ck.usage ?? null);
  }
  let ck = { output: outputs, next_steps: null, attempt: 1, time: now(), spec: group, wake_at: null, usage };
  try {
    await kvWrite(`${prefix}-checkpoints`, `${record.task_id}.${step}`, ck, 0);
  } catch (error) {
    if (!(error instanceof Conflict)) throw error;
    ck = await readCheckpoint(`${record.task_id}.${step}`);
  }
  const work = { task_id: record.task_id, step, generation: record.generation ?? 1 };
  const done = await recordStep(work, ck);
  if (!done.applies) return;
  if (done.changed) console.error(`trace: fan-in of ${record.task_id}.${step} recorded by this worker`);
  // The group's own step_completed says attempt: null, as the Python worker's does.
  await afterRecorded(done.record, step, { ...ck, attempt: null, skipped: false, tool: null });
}

async function replayGroupHandOff(record, step) {
  let output;
  if (record.status === "completed" && specAt(record, step + 1) === null) {
    output = record.result;
  } else {
    const ck = await readCheckpoint(`${record.task_id}.${step}`);
    if (!ck) return;
    output = ck.output;
  }
  await afterRecorded(record, step, { output, attempt: null, skipped: false, usage: null, tool: null });
}

// ---------------------------------------------------------------------------- the step protocol

const running = new Map(); // task_id -> Set of AbortControllers

function decode(msg) {
  let work;
  try {
    work = JSON.parse(dec.decode(msg.data));
  } catch (error) {
    return { error: `undecodable work message: ${error.message}` };
  }
  const bad = (why) => ({ error: `undecodable work message: ${why}`, work });
  if (!work || typeof work !== "object" || Array.isArray(work)) return bad("expected an object");
  if (typeof work.task_id !== "string") return bad("task_id must be a string");
  if (!Number.isInteger(work.step) || work.step < 0) return bad("step must be an integer >= 0");
  if (typeof work.tool !== "string") return bad("tool must be a string");
  work.generation ??= 1;
  work.branch ??= null;
  work.input ??= null;
  if (!Number.isInteger(work.generation) || work.generation < 1) return bad("generation must be an integer >= 1");
  if (work.branch !== null && (!Number.isInteger(work.branch) || work.branch < 0)) return bad("branch must be null or an integer >= 0");
  if (!TASK_ID.test(work.task_id)) return bad(`bad task id '${work.task_id}'`);
  return { work };
}

async function handle(msg, tool) {
  const prior = Number(msg.headers?.get("Tether-Prior-Attempts") || 0);
  const attempt = msg.info.deliveryCount + prior;
  const wpi = setInterval(() => msg.working(), HEARTBEAT_MS / 2);
  try {
    await step(msg, tool, attempt);
  } catch (error) {
    // An unexpected failure (NATS down, a bug): leave the message to come back after ack_wait.
    console.error(`node worker: ${msg.subject}: ${error.stack ?? error}`);
  } finally {
    clearInterval(wpi);
  }
}

async function step(msg, tool, attempt) {
  // 1. Decode.
  const decoded = decode(msg);
  if (decoded.error) {
    await deadLetter(tool, { attempt }, errorInfo("InvalidMessage", decoded.error), msg);
    return msg.term();
  }
  const work = decoded.work;
  if (work.tool !== tool) {
    const error = errorInfo("InvalidMessage", `message for tool '${work.tool}' on ${msg.subject}`);
    await deadLetter(tool, { task_id: work.task_id, step: work.step, branch: work.branch, attempt }, error, msg);
    const known = await readRecord(work.task_id);
    await failTask(work.task_id, work.step, work.branch, null, known ? planTool(known.value, work.step, work.branch) : null, error);
    return msg.term();
  }
  const { task_id, branch } = work;
  const i = work.step;

  // 2. Read the record and the checkpoint; decide.
  const read = await readRecord(task_id);
  const ckKey = stepKey(task_id, i, branch);
  let checkpoint = await readCheckpoint(ckKey);
  if (!read) {
    await deadLetter(tool, { task_id, step: i, branch, attempt }, errorInfo("InvalidMessage", `no task '${task_id}' exists`), msg);
    return msg.term();
  }
  const record = read.value;
  const gen_ = record.generation ?? 1;
  const cur = record.current_step ?? 0;
  const lastStepCompleted = record.status === "completed" && cur === i + 1;
  if (
    gen_ !== work.generation || record.status === "failed" || record.status === "cancelled" ||
    (record.status === "completed" && cur !== i + 1) || (cur !== i && cur !== i + 1)
  ) {
    if (branch !== null && gen_ === work.generation && !["failed", "cancelled"].includes(record.status) && cur > i && checkpoint) {
      await emit("step_completed", record, {
        step: i, branch, tool, attempt: checkpoint.attempt ?? null, output: checkpoint.output,
        extra: { skipped: true, wake_at: null, usage: checkpoint.usage ?? null },
      });
    }
    if (record.parent && TERMINAL.has(record.status)) await resumeParent(record);
    return msg.ack();
  }
  const spec = specAt(record, i);
  const planError = !spec
    ? `step ${i} has no branch ${branch}`
    : spec.parallel
      ? branch === null ? `step ${i} is parallel: give a branch` : branch >= spec.parallel.length ? `step ${i} has no branch ${branch}` : null
      : branch !== null ? `step ${i} has no branch ${branch}` : null;
  if (planError) {
    const error = errorInfo("InvalidMessage", planError);
    await deadLetter(tool, { task_id, step: i, branch, attempt }, error, msg);
    await failTask(task_id, i, branch, null, planTool(record, i, branch), error);
    return msg.term();
  }
  const mySpec = branch === null ? spec : spec.parallel[branch];
  if (cur === i + 1) {
    if (branch !== null) {
      if (checkpoint) {
        await emit("step_completed", record, {
          step: i, branch, tool, attempt: checkpoint.attempt ?? null, output: checkpoint.output,
          extra: { skipped: true, wake_at: null, usage: checkpoint.usage ?? null },
        });
      }
      await replayGroupHandOff(record, i);
      return msg.ack();
    }
    if (!checkpoint && lastStepCompleted) checkpoint = { output: record.result, attempt: null, usage: null };
    if (checkpoint) {
      await afterRecorded(record, i, {
        output: checkpoint.output, attempt: checkpoint.attempt ?? null, skipped: false,
        usage: checkpoint.usage ?? null, tool,
      });
      return msg.ack();
    }
    // Not stored: execute; 4b will not apply, 4c/4d will.
  } else if (checkpoint) {
    const ck = { ...checkpoint, attempt: null, skipped: true };
    if (branch !== null) return countBranch(msg, work, ck);
    return completeStep(msg, work, { ...ck, tool }, read);
  } else if (record.status === "waiting" || (record.awaiting && cur === i)) {
    return msg.ack();
  }

  // 3. Execute.
  const policy = retryPolicy(tool, mySpec);
  if (record.deadline_at && Date.parse(record.deadline_at) <= Date.now()) {
    return giveUp(msg, work, attempt, errorInfo("DeadlineExceeded", "task deadline exceeded"));
  }
  if (attempt > policy.max_attempts) {
    return giveUp(msg, work, attempt, errorInfo("RetriesExhausted",
      `gave up after ${policy.max_attempts} attempts: every attempt was lost to a crash or timeout`));
  }
  await emit("step_started", record, { step: i, branch, tool, attempt, status: "running" });

  const controller = new AbortController();
  const mine = running.get(task_id) ?? new Set();
  mine.add(controller);
  running.set(task_id, mine);
  let startWrite = null;
  const startTimer = record.status === "pending" && cur === i
    ? setTimeout(() => {
        startWrite = casRecord(task_id, (r) =>
          r.status === "pending" && r.current_step === i ? { status: "running", note: null } : null);
      }, 100)
    : null;
  const heartbeat = setTimeout(() => {
    heartbeatsKv.put(task_id, jsonBytes({
      task_id, step: i, tool, attempt, worker_id: WORKER_ID, branch, progress: null, message: null, time: now(),
    })).catch(() => {});
  }, HEARTBEAT_MS / 2);
  let timeoutMs = mySpec.timeout_ms ?? DEFAULT_TIMEOUT_MS;
  let byDeadline = false;
  if (record.deadline_at) {
    const left = Date.parse(record.deadline_at) - Date.now();
    if (left < timeoutMs) { timeoutMs = left; byDeadline = true; }
  }
  const timedOut = Symbol("timeout");
  let timer;
  let output;
  let failure = null;
  try {
    const ctx = { task_id, step: i, branch, attempt, tool, signal: controller.signal };
    recordExecution(ctx);
    output = await Promise.race([
      TOOLS[tool].run(structuredClone(work.input), ctx),
      new Promise((resolve) => { timer = setTimeout(() => resolve(timedOut), timeoutMs); }),
    ]);
    if (output === timedOut) {
      controller.abort(new Error("timeout"));
      failure = byDeadline
        ? { error: errorInfo("DeadlineExceeded", "task deadline exceeded"), giveUp: true }
        : { error: errorInfo("StepTimeout", `step timed out after ${(timeoutMs / 1000).toFixed(1)}s`) };
    } else if (output === undefined) {
      output = null;
    }
  } catch (error) {
    if (controller.signal.aborted && controller.signal.reason?.message === "cancelled") failure = { cancelled: true };
    else {
      const type = error?.name || "Error";
      failure = {
        error: errorInfo(type, cut(error?.message || type), error?.stack?.slice(0, 4096)),
        giveUp: Boolean(error?.terminal),
        terminalStop: Boolean(error?.stopTask),
        retryAfterMs: error?.retryAfterMs,
      };
    }
  } finally {
    clearTimeout(timer);
    clearTimeout(heartbeat);
    if (startTimer) clearTimeout(startTimer);
    mine.delete(controller);
    if (mine.size === 0) running.delete(task_id);
  }
  if (startWrite) await startWrite;
  if (controller.signal.aborted && controller.signal.reason?.message === "cancelled") failure = { cancelled: true };
  if (failure?.cancelled) return msg.ack();

  // 5. Failures.
  if (failure) {
    if (!failure.giveUp && attempt < policy.max_attempts) {
      const delay = backoffMs(policy, attempt, failure.retryAfterMs);
      await emit("step_retrying", record, {
        step: i, branch, tool, attempt, status: "running", error: failure.error, extra: { retry_in_ms: delay },
      });
      return msg.nak(delay);
    }
    const error = failure.giveUp || failure.error.type === "DeadlineExceeded"
      ? failure.error
      : { ...failure.error, message: cut(`gave up after ${policy.max_attempts} attempts: ${failure.error.message}`) };
    if (branch !== null && spec.collect_errors && !failure.terminalStop) {
      return collectError(msg, work, attempt, error, mySpec);
    }
    return giveUp(msg, work, attempt, error);
  }

  // 4a. Checkpoint, create-only (a branch always; not the last step of the plan).
  let ck = { output, next_steps: null, attempt, time: now(), spec: mySpec, wake_at: null, usage: null };
  const lastOfPlan = branch === null && specAt(record, i + 1) === null;
  if (!lastOfPlan) {
    try {
      await kvWrite(`${prefix}-checkpoints`, ckKey, ck, 0);
    } catch (error) {
      if (!(error instanceof Conflict)) throw error;
      ck = await readCheckpoint(ckKey);
    }
  }
  if (branch !== null) return countBranch(msg, work, { ...ck, skipped: false });
  return completeStep(msg, work, { ...ck, skipped: false, tool });
}

async function collectError(msg, work, attempt, error, mySpec) {
  const key = stepKey(work.task_id, work.step, work.branch);
  let ck = { output: { error: { type: error.type, message: error.message } }, next_steps: null, attempt, time: now(), spec: mySpec, wake_at: null, usage: null };
  try {
    await kvWrite(`${prefix}-checkpoints`, key, ck, 0);
  } catch (e) {
    if (!(e instanceof Conflict)) throw e;
    ck = await readCheckpoint(key);
  }
  return countBranch(msg, work, { ...ck, skipped: false });
}

async function completeStep(msg, work, ck, read) {
  const done = await recordStep(work, ck, read);
  if (!done.applies) return msg.ack();
  await afterRecorded(done.record, work.step, ck);
  msg.ack(); // 4e. Ack last.
}

// ---------------------------------------------------------------------------- start

for (const name of toolNames) {
  const durable = `tool-${name}`;
  const config = {
    durable_name: durable,
    name: durable,
    filter_subject: `${prefix}.work.${name}`,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: ACK_WAIT_MS * 1_000_000,
    max_deliver: -1,
    max_ack_pending: 10_000,
    max_waiting: 512,
  };
  const existing = await jsm.consumers.info(WORK_STREAM, durable).catch(() => null);
  if (!existing) {
    await jsm.consumers.add(WORK_STREAM, config);
  } else if (
    existing.config.ack_wait !== config.ack_wait || existing.config.max_ack_pending !== config.max_ack_pending ||
    existing.config.filter_subject !== config.filter_subject
  ) {
    await jsm.consumers.update(WORK_STREAM, durable, {
      ack_wait: config.ack_wait, max_ack_pending: config.max_ack_pending, filter_subject: config.filter_subject,
    });
  }
  await toolsKv.put(name, jsonBytes({
    name, description: TOOLS[name].description, input_schema: {}, max_concurrency: null, approval: false, updated_at: now(),
  }));
}

async function beat() {
  await workersKv.put(WORKER_KEY, jsonBytes({
    worker_id: WORKER_ID, tools: toolNames, concurrency: 16, in_flight: running.size,
    started_at: STARTED_AT, time: now(), claimed_by: null,
  }));
}
await beat();
const beating = setInterval(() => beat().catch(() => {}), BEAT_EVERY_MS);
const reRegister = setInterval(() => {
  for (const name of toolNames) {
    toolsKv.put(name, jsonBytes({
      name, description: TOOLS[name].description, input_schema: {}, max_concurrency: null, approval: false, updated_at: now(),
    })).catch(() => {});
  }
}, 3_600_000);

// Cancellation notices: stop the task's running tools.
const cancels = nc.subscribe(`${prefix}.control.cancelled.*`, {
  callback: (err, m) => {
    if (err) return;
    const taskId = m.subject.split(".").pop();
    for (const c of running.get(taskId) ?? []) c.abort(new Error("cancelled"));
  },
});

// Now and then re-read the records of the tasks running here: a cancellation notice sent
// while this worker was disconnected is caught within RECHECK_MS.
const RECHECK_MS = 30_000;
const rechecking = setInterval(async () => {
  for (const [taskId, controllers] of running) {
    const read = await readRecord(taskId).catch(() => null);
    if (read && TERMINAL.has(read.value.status)) for (const c of controllers) c.abort(new Error("cancelled"));
  }
}, RECHECK_MS);

const loops = [];
for (const name of toolNames) {
  const consumer = await js.consumers.get(WORK_STREAM, `tool-${name}`);
  const messages = await consumer.consume({ max_messages: 16 });
  loops.push((async () => {
    for await (const m of messages) handle(m, name);
  })());
}
console.log("ready");

async function stop() {
  stopping = true;
  clearInterval(beating);
  clearInterval(reRegister);
  clearInterval(rechecking);
  cancels.unsubscribe();
  const h = headers();
  h.set("KV-Operation", "DEL");
  h.set("Nats-TTL", "30s");
  await js.publish(`$KV.${prefix}-workers.${WORKER_KEY}`, new Uint8Array(), { headers: h }).catch(() => {});
  await nc.drain().catch(() => {});
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
await Promise.all(loops);
