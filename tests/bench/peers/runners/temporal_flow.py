"""The bench agent on Temporal, as Pydantic AI documents it: the agent with the
`TemporalDurability` capability (its model calls and tools become activities; its
events go to a Workflow Streams topic), and a workflow that runs it."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import bench_agent
    from pydantic_ai.durable_exec.temporal import AgentEventStream, TemporalDurability

TOPIC = "agent-events"
TASK_QUEUE = "bench-agents"
durability: TemporalDurability[None] = TemporalDurability(event_stream_topic=TOPIC)
agent = bench_agent.build_agent("bench_agent", capabilities=[durability])
quiet = bench_agent.build_agent("bench_wait_agent", capabilities=[TemporalDurability()])
"""The approval scenario's agent: no event topic (its client reads the result only; a topic
nobody reads holds the workflow open after the agent is done)."""


@workflow.defn
class BenchAgentWorkflow:
    @workflow.init
    def __init__(self, prompt: str) -> None:
        self.events = AgentEventStream()

    @workflow.run
    async def run(self, prompt: str) -> str:
        async with self.events:
            result = await agent.run(prompt, usage_limits=bench_agent.LIMITS)
        return result.output


@workflow.defn
class BenchWaitWorkflow:
    """The approval scenario: the run waits for the `approve` signal, then runs the agent."""

    @workflow.init
    def __init__(self, prompt: str) -> None:
        self.approved = False

    @workflow.signal
    def approve(self) -> None:
        self.approved = True

    @workflow.run
    async def run(self, prompt: str) -> str:
        await workflow.wait_condition(lambda: self.approved)
        result = await quiet.run(prompt, usage_limits=bench_agent.LIMITS)
        return result.output
