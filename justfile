# List the recipes
default:
    @just --list

# Run the full suite: unit, integration and the crash tests, one process per core
test *args:
    python -m pytest --numprocesses auto --dist worksteal -m "not load" {{args}}

# The load tests: thirty fast streams on two workers (a busy worker is never taken for dead)
test-load *args:
    python -m pytest -m load {{args}}

# Run the suite without the slow crash tests
test-fast *args:
    python -m pytest --numprocesses auto --dist worksteal -m "not slow and not load" {{args}}

# The real-model suite: agents on llama-server with SmolLM2-135M (`tether model install`: the server is built once per machine, ~10 min)
test-real-model *args:
    tether model install && TETHER_REQUIRE_REAL_MODEL=1 python -m pytest tests/real_model {{args}}

# The journal's unit names (tests/integration/test_journal_names.py) on the oldest framework versions the extras allow (tests/oldest-frameworks.txt), in a venv of its own: .venv-oldest
compat-oldest *args:
    python3 -m venv .venv-oldest && .venv-oldest/bin/pip install -q -e '.[dev]' -c tests/oldest-frameworks.txt && .venv-oldest/bin/python -m pytest tests/integration/test_journal_names.py {{args}}

# Lint and type-check
lint:
    ruff check services tests && mypy

# Format the code
fmt:
    ruff format services tests

# The crash demo: a research agent whose worker is killed mid-step
demo:
    tether demo

# Embedded nats-server, dispatcher and workers for the given apps (MODULE:ATTR)
dev *apps:
    tether dev {{apps}}

# Run a worker for an app (MODULE:ATTR)
worker app *args:
    tether worker {{app}} {{args}}

# Run the dispatcher
dispatcher *args:
    tether dispatcher {{args}}

# Regenerate the exported JSON Schemas and AsyncAPI document under schemas/
schemas:
    python -m tether.api.contract

# Benchmark Tether against a raw JetStream baseline (not part of the tests); each run is kept in tests/bench/history/ and compared with the last of another commit
bench *args:
    python -m tests.bench.bench {{args}}

# W2 on commits side by side, alternately in one session (default: 890c70b and this checkout; --hops: when each message goes by)
bench-compare *args:
    python -m tests.bench.alternate {{args}}

# The same Pydantic AI agent bare, on Tether (two ways), Temporal, DBOS and Restate, side by side (--only tether,temporal; --quick); writes docs/bench/peers/
bench-peers *args:
    python -m tests.bench.peers {{args}}

# Cluster chaos: 1,000 tasks on the 3-node R3 cluster while its nodes are SIGKILLed (--tasks N)
chaos *args:
    python -m tests.chaos_runs.cluster {{args}}

# Soak: a steady mix of tasks for 10 minutes while workers are SIGKILLed at random (--minutes N)
soak *args:
    python -m tests.chaos_runs.soak {{args}}
