"""The files under deploy/ work: nats-server accepts every config, the cluster configs form a
real three-node JetStream cluster that holds Tether's streams and buckets at R3 through the
loss of a node, and every command in the compose file and the Kubernetes manifests is one the
`tether` CLI accepts, with the settings it reads from the environment.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from nats.errors import Error as NatsError
from nats.js.errors import Error as JetStreamError
from typer.testing import CliRunner

from tests.chaos_runs.servers import Cluster, Node
from tether.cli.loading import load_app
from tether.cli.main import app as cli
from tether.nats.connection import NatsConfig, connect
from tether.nats.layout import Layout
from tether.nats.provision import provision
from tether.nats.server import find_nats_server
from tether.schemas.names import Names
from tether.testing import eventually

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CONFS = sorted((DEPLOY / "nats").glob("*.conf"))
CLUSTER_CONFS = sorted((DEPLOY / "nats").glob("cluster-*.conf"))
COMPOSE = DEPLOY / "compose.yaml"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))

SUBCOMMANDS = {c.name or c.callback.__name__ for c in cli.registered_commands if c.callback}
SERVICE_ROLES = {"dispatcher", "worker", "gateway", "api"}
"""The long-running `tether` subcommands a deployment may run."""
DEMO_APP = "tether.demo.research:app"


# -- YAML ------------------------------------------------------------------------------------
# PyYAML is not a dependency of Tether. Without it, the files are read by the small parser
# below, which knows the block style they are written in and refuses anything else (so it
# cannot misread a file silently); with PyYAML, both readings must agree.

_KEY = re.compile(r"^([^\s:\"'\[{#-][^:]*):(?:\s+(.*))?$")


@dataclass
class _Line:
    indent: int
    text: str


def _strip_comment(line: str) -> str:
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _scalar(text: str) -> Any:
    if text in ("", "~", "null"):
        return None
    if text[0] in "&*!|>%@`" or text == "<<":
        raise ValueError(f"anchors, aliases, tags and block scalars are not read: {text!r}")
    if text[0] in '[{"':
        return json.loads(text)  # flow collections and quoted strings are written as JSON
    if text[0] == "'":
        return text[1:-1].replace("''", "'")
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    return text


def _block(lines: list[_Line], i: int, indent: int) -> tuple[Any, int]:
    if lines[i].text == "-" or lines[i].text.startswith("- "):
        return _sequence(lines, i, indent)
    return _mapping(lines, i, indent)


def _mapping(lines: list[_Line], i: int, indent: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while i < len(lines) and lines[i].indent == indent and not lines[i].text.startswith("-"):
        match = _KEY.match(lines[i].text)
        if match is None:
            raise ValueError(f"not a 'key: value' line: {lines[i].text!r}")
        key, rest = match.group(1).strip(), (match.group(2) or "").strip()
        _scalar(key)  # refuses a merge key (<<) and the like
        i += 1
        nested = i < len(lines) and (
            lines[i].indent > indent
            or (lines[i].indent == indent and lines[i].text.startswith("- "))
        )
        if rest:
            out[key] = _scalar(rest)
        elif nested:
            out[key], i = _block(lines, i, lines[i].indent)
        else:
            out[key] = None
    return out, i


def _sequence(lines: list[_Line], i: int, indent: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while i < len(lines) and lines[i].indent == indent and lines[i].text.startswith("-"):
        rest = lines[i].text[1:].lstrip()
        if not rest:
            item, i = _block(lines, i + 1, lines[i + 1].indent)
        elif _KEY.match(rest):  # "- key: value" opens a mapping whose keys line up with `key`
            lines[i] = _Line(indent + len(lines[i].text) - len(rest), rest)
            item, i = _mapping(lines, i, lines[i].indent)
        else:
            item, i = _scalar(rest), i + 1
        out.append(item)
    return out, i


def _load_subset(text: str) -> list[Any]:
    documents: list[Any] = []
    for chunk in re.split(r"^---\s*$", text, flags=re.MULTILINE):
        lines = [
            _Line(len(raw) - len(raw.lstrip(" ")), stripped.strip())
            for raw in chunk.splitlines()
            if (stripped := _strip_comment(raw)).strip()
        ]
        if not lines:
            continue
        document, end = _block(lines, 0, lines[0].indent)
        if end != len(lines):
            raise ValueError(f"unsupported YAML near {lines[end].text!r}")
        documents.append(document)
    return documents


def load_yaml(path: Path) -> list[Any]:
    """The documents of a YAML file, by PyYAML when it is installed."""
    try:
        import yaml
    except ImportError:
        return _load_subset(path.read_text())
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def test_the_fallback_yaml_reader_agrees_with_pyyaml() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed: nothing to compare with")
    for path in [COMPOSE, *MANIFESTS]:
        expected = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
        assert _load_subset(path.read_text()) == expected, path.name


# -- nats-server configs ---------------------------------------------------------------------
def test_deploy_has_the_single_cluster_and_roles_configs() -> None:
    names = {path.name for path in CONFS}
    expected = {"single.conf", "roles.conf", "cluster-1.conf", "cluster-2.conf", "cluster-3.conf"}
    assert expected <= names
    for path in ("Dockerfile", "compose.yaml", "README.md"):
        assert (DEPLOY / path).is_file(), path


def _config_test(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [find_nats_server(), "-t", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("conf", CONFS, ids=lambda p: p.name)
def test_nats_server_accepts_the_config(conf: Path) -> None:
    result = _config_test(conf)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_roles_config_is_the_single_config_with_users() -> None:
    """Copying roles.conf over single.conf changes who may do what, nothing else: the same
    ports, store dir and limits (tests/integration/test_roles.py runs it)."""
    single, roles = (DEPLOY / "nats" / name for name in ("single.conf", "roles.conf"))
    for key in ("server_name", "listen", "http_port", "max_payload", "store_dir"):
        assert _setting(roles.read_text(), key) == _setting(single.read_text(), key), key
    assert "accounts {" in roles.read_text() and "accounts {" not in single.read_text()


def test_nats_server_config_test_mode_rejects_a_bad_config(tmp_path: Path) -> None:
    """The check above means something: `-t` fails on an option nats-server doesn't know."""
    bad = tmp_path / "bad.conf"
    bad.write_text("jetstream {\n  store_dir: /tmp/x\n  no_such_option: 1\n}\n")
    result = _config_test(bad)
    assert result.returncode != 0
    assert "no_such_option" in result.stderr


def _setting(text: str, key: str) -> str:
    match = re.search(rf"^\s*{key}\s*[:=]\s*(\S+)\s*$", text, flags=re.MULTILINE)
    assert match, f"no {key}"
    return match.group(1)


def test_cluster_configs_name_each_node_once_and_route_to_all() -> None:
    texts = [path.read_text() for path in CLUSTER_CONFS]
    server_names = [_setting(text, "server_name") for text in texts]
    assert len(server_names) == 3
    assert len(set(server_names)) == 3, "JetStream needs a unique server_name per node"
    for text in texts:
        assert _setting(text, "name") == "tether"
        routes = set(re.findall(r"nats(?:-route)?://([\w.-]+):6222", text))
        assert routes == set(server_names)


# -- a real cluster from the cluster configs -------------------------------------------------
@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[list[Node]]:
    """The deploy configs moved onto loopback ports (`just chaos` runs the same cluster)."""
    nodes = Cluster.from_deploy(tmp_path_factory.mktemp("cluster"), CLUSTER_CONFS)
    try:
        nodes.start()
        await nodes.wait_healthy(timeout=20)
        yield nodes.nodes
    finally:
        for node in nodes.nodes:
            node.kill()


async def test_cluster_configs_hold_tethers_streams_at_r3_through_a_node_loss(
    cluster: list[Node],
) -> None:
    config = NatsConfig(url=",".join(node.url for node in cluster), name="deploy-test")
    names = Names(prefix=f"d{uuid.uuid4().hex[:8]}")
    nc = await connect(config)
    try:
        js = nc.jetstream()

        async def provisioned() -> None:
            try:
                await provision(js, Layout(names=names, replicas=3))
            except (NatsError, JetStreamError, TimeoutError) as exc:
                raise AssertionError(f"provision at R3 failed: {exc!r}") from exc

        await eventually(provisioned, timeout=15, interval=0.2)

        streams = [
            names.submit_stream,
            names.work_stream,
            names.status_stream,
            names.dead_letter_stream,
            *(
                f"KV_{bucket}"
                for bucket in (
                    names.tasks_bucket,
                    names.checkpoints_bucket,
                    names.tools_bucket,
                    names.heartbeats_bucket,
                    names.builds_bucket,
                )
            ),
            f"OBJ_{names.blobs_bucket}",
        ]

        async def replicated() -> None:
            for stream in streams:
                info = await js.stream_info(stream)
                assert info.config.num_replicas == 3, stream
                assert info.cluster is not None and info.cluster.leader, stream
                peers = info.cluster.replicas or []
                assert len(peers) == 2 and all(p.current for p in peers), (stream, peers)

        await eventually(replicated, timeout=15, interval=0.2)

        # A client started without --replicas provisions at R1: nothing drops to one copy.
        await provision(js, Layout(names=names, replicas=1))
        await replicated()
        # Replicated buckets read from the leader: a replica's direct get may lag a write.
        tasks_stream = await js.stream_info(f"KV_{names.tasks_bucket}")
        assert not tasks_stream.config.allow_direct

        # Crash the node leading the work stream: the other two elect new leaders, take the
        # next step and write the task record. Every JetStream call waits for the elections.
        work = await js.stream_info(names.work_stream)
        assert work.cluster is not None
        leader = next(node for node in cluster if node.name == work.cluster.leader)
        leader.kill()
        js = nc.jetstream(timeout=2)

        async def still_working() -> None:
            try:
                # With a Nats-Msg-Id, as Tether hands off steps: a retry is no duplicate.
                await js.publish(
                    names.work_subject("probe"), b"{}", timeout=2, headers={"Nats-Msg-Id": "p.0"}
                )
                work = await js.stream_info(names.work_stream)
                tasks = await js.key_value(names.tasks_bucket)
                await tasks.put("probe", b"{}")
                # Read from the stream leader: direct gets may be answered by a replica that
                # has not applied the write yet (NATS KV doesn't promise read-your-writes).
                stored = await js.get_msg(
                    f"KV_{names.tasks_bucket}",
                    subject=f"$KV.{names.tasks_bucket}.probe",
                    direct=False,
                )
            except (NatsError, JetStreamError, TimeoutError) as exc:
                raise AssertionError(f"not available after losing {leader.name}: {exc!r}") from exc
            assert work.state.messages == 1
            assert work.cluster is not None and work.cluster.leader != leader.name
            assert stored.data == b"{}"

        await eventually(still_working, timeout=25, interval=0.2)
    finally:
        await nc.close()


# -- compose and Kubernetes ------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose_services() -> dict[str, Any]:
    (document,) = load_yaml(COMPOSE)
    services: dict[str, Any] = document["services"]
    return services


def _nats_services(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if str(s.get("image", "")).startswith("nats:")}


def _tether_services(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if name not in _nats_services(services)}


def test_compose_runs_the_cluster_confs_on_the_official_image(
    compose_services: dict[str, Any],
) -> None:
    nats = _nats_services(compose_services)
    assert len(nats) == 3
    for name, service in nats.items():
        assert service["image"] == "nats:2.11"
        conf = service["command"][service["command"].index("--config") + 1]
        mounts = {m.split(":")[1]: m.split(":")[0] for m in service["volumes"]}
        source = (DEPLOY / mounts[conf]).resolve()
        assert source.parent == DEPLOY / "nats" and source.is_file(), conf
        assert _setting(source.read_text(), "server_name") == name, "the route names hosts"


def test_compose_tether_services(compose_services: dict[str, Any]) -> None:
    nats = _nats_services(compose_services)
    tether = _tether_services(compose_services)
    roles = {}
    for name, service in tether.items():
        command = service["command"]
        assert command[0] in SUBCOMMANDS & SERVICE_ROLES, (name, command)
        roles[command[0]] = service
        build = service["build"]
        assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == DEPLOY / "Dockerfile"
        env = service["environment"]
        assert env["TETHER_NATS_URL"].split(",") == [f"nats://{n}:4222" for n in nats]
        assert env["TETHER_REPLICAS"] == "3"
        assert set(service["depends_on"]) == set(nats)
    assert {"dispatcher", "worker", "gateway"} <= set(roles)
    assert roles["worker"]["command"][1:] == [DEMO_APP]
    assert roles["worker"]["deploy"]["replicas"] == 2
    gateway = roles["gateway"]["command"]
    assert gateway[gateway.index("--host") + 1] == "0.0.0.0"
    assert gateway[gateway.index("--port") + 1] == "8765"
    assert "8765:8765" in roles["gateway"]["ports"]


def test_the_demo_app_the_deployments_run_loads() -> None:
    assert load_app(DEMO_APP).tools


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict[str, Any]]:
    """Every manifest by `Kind/name`."""
    documents = [doc for path in MANIFESTS for doc in load_yaml(path)]
    return {f"{doc['kind']}/{doc.get('metadata', {}).get('name', '')}": doc for doc in documents}


def _containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    return containers


def test_kustomization_lists_every_manifest(k8s: dict[str, dict[str, Any]]) -> None:
    (kustomization,) = [doc for key, doc in k8s.items() if key.startswith("Kustomization/")]
    listed = set(kustomization["resources"])
    assert listed == {path.name for path in MANIFESTS} - {"kustomization.yaml"}


def test_k8s_deployments(k8s: dict[str, dict[str, Any]]) -> None:
    configmaps = {key.split("/")[1]: doc for key, doc in k8s.items() if key.startswith("ConfigMap")}
    deployments = [doc for key, doc in k8s.items() if key.startswith("Deployment/")]
    roles = {}
    for deployment in deployments:
        spec = deployment["spec"]
        labels = spec["template"]["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items()
        (container,) = _containers(deployment)
        args = container["args"]
        assert args[0] in SUBCOMMANDS & SERVICE_ROLES, args
        roles[args[0]] = deployment
        (source,) = container["envFrom"]
        data = configmaps[source["configMapRef"]["name"]]["data"]
        seeds = data["TETHER_NATS_URL"].split(",")
        assert len(seeds) == 3
        assert all(re.fullmatch(r"nats://[\w.-]+:4222", seed) for seed in seeds), seeds
        assert data["TETHER_REPLICAS"] == "3"
    assert set(roles) == {"dispatcher", "worker", "gateway"}
    assert roles["worker"]["spec"]["replicas"] == 3
    assert _containers(roles["worker"])[0]["args"][1:] == [DEMO_APP]


def test_k8s_gateway_service_reaches_the_gateway_port(k8s: dict[str, dict[str, Any]]) -> None:
    services = [doc for key, doc in k8s.items() if key.startswith("Service/")]
    (service,) = services
    (deployment,) = [
        doc
        for key, doc in k8s.items()
        if key.startswith("Deployment/") and _containers(doc)[0]["args"][0] == "gateway"
    ]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (container,) = _containers(deployment)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    (port,) = service["spec"]["ports"]
    assert port["port"] == 8765
    target = (
        ports[port["targetPort"]] if isinstance(port["targetPort"], str) else port["targetPort"]
    )
    args = container["args"]
    assert int(args[args.index("--port") + 1]) == target == 8765
    assert args[args.index("--host") + 1] == "0.0.0.0"


def _command_lines(
    compose_services: dict[str, Any], k8s: dict[str, dict[str, Any]]
) -> Iterator[list[str]]:
    for service in _tether_services(compose_services).values():
        yield [str(arg) for arg in service["command"]]
    for key, doc in k8s.items():
        if key.startswith("Deployment/"):
            for container in _containers(doc):
                yield [str(arg) for arg in container["args"]]


def test_the_tether_cli_accepts_every_deployed_command_line(
    compose_services: dict[str, Any], k8s: dict[str, dict[str, Any]]
) -> None:
    """Each command line parses (`--help` is eager, after every option has been checked), and
    its command reads the two settings the deployments pass in the environment."""
    group = typer.main.get_command(cli)
    assert isinstance(group, typer.core.TyperGroup)
    commands = group.commands
    runner = CliRunner()
    lines = list(_command_lines(compose_services, k8s))
    assert len(lines) == 6
    for line in lines:
        result = runner.invoke(cli, [*line, "--help"])
        assert result.exit_code == 0, (line, result.output)
        envvars = {param.envvar for param in commands[line[0]].params}
        assert {"TETHER_NATS_URL", "TETHER_REPLICAS"} <= envvars, (
            f"`tether {line[0]}` does not read TETHER_REPLICAS: the deployments' "
            "streams and buckets would be created with one replica"
        )
