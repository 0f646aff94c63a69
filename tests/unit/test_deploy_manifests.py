"""deploy/, Dockerfile and Makefile: they parse, pass schema checks, and agree with each other.

Kubernetes objects are validated against the API's JSON schemas shipped in the
``kubernetes-validate`` package (offline, strict: unknown fields are errors). The
ServiceMonitor is a Prometheus-Operator CRD that package has no schema for; it is checked
against the fields of the CRD the worker relies on.
"""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version, major_minor

from worker.config import Settings, load

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
STATE_DIR = "/var/lib/worker"


def documents() -> dict[str, dict[str, Any]]:
    """Every Kubernetes document under deploy/kubernetes, by kind."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict), f"{path.name}: not a mapping"
            assert doc["kind"] not in found, f"two {doc['kind']} documents"
            found[doc["kind"]] = doc
    return found


DOCS = documents()
STANDARD_KINDS = ["ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget", "NetworkPolicy"]


def container() -> dict[str, Any]:
    (worker,) = DOCS["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    return worker  # type: ignore[no-any-return]


def shipped_settings() -> Settings:
    """The ConfigMap's worker.toml, loaded the way ``worker start --config`` loads it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "worker.toml"
        path.write_text(DOCS["ConfigMap"]["data"]["worker.toml"])
        return load(path, environ={}).settings


def test_the_kustomization_lists_every_manifest() -> None:
    listed = set(DOCS["Kustomization"]["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


@pytest.mark.parametrize("kind", STANDARD_KINDS)
def test_each_object_passes_the_kubernetes_schema_strictly(kind: str) -> None:
    # validate() raises on a violation and returns the schema version it checked against:
    # the latest one, not an older schema it fell back to.
    checked_against = kubernetes_validate.validate(DOCS[kind], latest_version(), strict=True)

    assert checked_against == major_minor(latest_version())


def test_a_schema_violation_is_caught() -> None:
    broken = yaml.safe_load(yaml.safe_dump(DOCS["StatefulSet"]))
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, latest_version(), strict=True)
    broken = yaml.safe_load(yaml.safe_dump(DOCS["Service"]))
    broken["spec"]["portz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, latest_version(), strict=True)


SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "properties": {"matchLabels": {"type": "object"}},
                    "additionalProperties": False,
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                        },
                    },
                },
            },
        },
    },
}


def test_the_service_monitor_matches_its_crd_and_scrapes_the_service_http_port() -> None:
    monitor = DOCS["ServiceMonitor"]
    jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)
    service = DOCS["Service"]
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports
        assert endpoint.get("path", "/metrics") == "/metrics"


def test_the_service_is_headless_and_selects_the_pods() -> None:
    service = DOCS["Service"]
    pod_labels = DOCS["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert DOCS["StatefulSet"]["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_the_disruption_budget_covers_the_pods_and_lets_one_go_at_a_time() -> None:
    pdb = DOCS["PodDisruptionBudget"]
    pod_labels = DOCS["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1


def test_the_state_dir_is_a_persistent_volume_claim_passed_as_state_dir() -> None:
    spec = DOCS["StatefulSet"]["spec"]
    (claim,) = spec["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container()["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == STATE_DIR
    args = container()["args"]
    assert args[args.index("--state-dir") + 1] == STATE_DIR


def test_probes_hit_healthz_and_readyz_on_the_http_port() -> None:
    worker = container()
    port_names = {p["name"] for p in worker["ports"]}
    assert worker["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert worker["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert worker["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "startupProbe", "readinessProbe"):
        assert worker[probe]["httpGet"]["port"] in port_names


def test_prometheus_annotations_point_at_the_metrics_port() -> None:
    annotations = DOCS["StatefulSet"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    ports = {p["containerPort"] for p in container()["ports"]}
    assert int(annotations["prometheus.io/port"]) == shipped_settings().http_management_port
    assert shipped_settings().http_port in ports


def test_probes_and_metrics_use_the_management_port_of_the_shipped_settings() -> None:
    named = {p["name"]: p["containerPort"] for p in container()["ports"]}
    assert named == {
        "http": shipped_settings().http_port,
        "management": shipped_settings().http_management_port,
    }
    for probe in ("livenessProbe", "startupProbe", "readinessProbe"):
        assert container()[probe]["httpGet"]["port"] == "management"
    service_ports = {p["name"]: p["targetPort"] for p in DOCS["Service"]["spec"]["ports"]}
    assert service_ports == {"http": "http", "management": "management"}
    assert [e["port"] for e in DOCS["ServiceMonitor"]["spec"]["endpoints"]] == ["management"]


def test_the_query_api_takes_its_token_from_an_optional_secret() -> None:
    env = {e["name"]: e for e in container()["env"]}
    ref = env["WORKER_HTTP_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref["optional"] is True  # without the Secret: the query API answers 403
    assert shipped_settings().http_host == "0.0.0.0"
    assert not shipped_settings().http_query_unauthenticated


def test_the_pod_mounts_no_service_account_token() -> None:
    assert DOCS["StatefulSet"]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_network_policy_guards_both_ports_of_the_worker_pods() -> None:
    policy = DOCS["NetworkPolicy"]["spec"]
    pod_labels = DOCS["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    by_port = {rule["ports"][0]["port"]: rule["from"] for rule in policy["ingress"]}
    assert set(by_port) == {"http", "management"}
    members = {"podSelector": {"matchLabels": dict(pod_labels)}}
    assert members in by_port["http"]  # the workers route queries to each other
    assert all(peer for peer in by_port["http"]), "no empty peer: that would admit all"


def test_the_pod_runs_as_non_root_and_advertises_its_stable_dns_name() -> None:
    pod = DOCS["StatefulSet"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    env = {e["name"]: e for e in container()["env"]}
    server = env["WORKER_APPLICATION_SERVER"]["value"]
    assert server.startswith("$(POD_NAME).worker.")  # the headless Service's per-pod name
    assert server.endswith(f":{shipped_settings().http_port}")


def test_the_grace_period_outlasts_the_workers_own_shutdown_timeout() -> None:
    grace_s = DOCS["StatefulSet"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace_s * 1000 > shipped_settings().shutdown_timeout_ms


# -- systemd ---------------------------------------------------------------------------


def systemd_unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=True, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string((REPO / "deploy" / "systemd" / "worker.service").read_text())
    return parser


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|min)?", value.strip())
    assert match, value
    number, unit = int(match.group(1)), match.group(2) or "s"
    return number * {"ms": 0.001, "s": 1, "min": 60}[unit]


def test_the_systemd_unit_runs_the_worker_as_its_own_user_with_state_under_var_lib() -> None:
    service = systemd_unit()["Service"]
    assert service["User"] not in ("root", "0")
    assert service["StateDirectory"] == "worker"  # -> /var/lib/worker, owned by User
    command = shlex.split(service["ExecStart"])
    assert command[command.index("--state-dir") + 1] == STATE_DIR
    assert command[1] == "start"


def test_the_systemd_unit_restarts_on_failure_and_stops_with_sigterm_in_time() -> None:
    service = systemd_unit()["Service"]
    assert service["Restart"] == "on-failure"
    assert "2" in service["RestartPreventExitStatus"].split()  # config errors: no restart loop
    assert service["KillSignal"] == "SIGTERM"
    default_timeout_s = Settings().shutdown_timeout_ms / 1000
    assert seconds(service["TimeoutStopSec"]) > default_timeout_s


def unit_entries(name: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file in order; keys may repeat (EnvironmentFile)."""
    entries: list[tuple[str, str, str]] = []
    section = ""
    for raw in (REPO / "deploy" / "systemd" / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, value = line.split("=", 1)
        entries.append((section, key.strip(), value.strip()))
    return entries


def unit_values(name: str, section: str, key: str) -> list[str]:
    return [v for s, k, v in unit_entries(name) if (s, k) == (section, key)]


# What the template may set differently from worker.service: where the instance's state
# and settings are, and what ties it to worker.target.
PER_INSTANCE = {"ExecStart", "EnvironmentFile", "StateDirectory", "ReadWritePaths", "WantedBy"}


def test_the_template_unit_keeps_every_setting_and_hardening_of_the_single_unit() -> None:
    single = {(s, k): v for s, k, v in unit_entries("worker.service") if k not in PER_INSTANCE}
    template = {(s, k): v for s, k, v in unit_entries("worker@.service")}

    missing = {key: v for key, v in single.items() if key not in template}
    changed = {key: (v, template[key]) for key, v in single.items() if key in template}
    assert not missing
    assert {key: pair for key, pair in changed.items() if pair[0] != pair[1]} == {
        ("Unit", "Description"): (
            "worker stateful stream processor",
            "worker stateful stream processor, instance %i",
        )
    }


def test_each_instance_has_its_own_state_dir_and_writes_nowhere_else() -> None:
    (command,) = unit_values("worker@.service", "Service", "ExecStart")
    args = shlex.split(command)
    assert args[1] == "start"
    assert args[args.index("--state-dir") + 1] == f"{STATE_DIR}/%i"
    assert unit_values("worker@.service", "Service", "StateDirectory") == ["worker/%i"]
    assert unit_values("worker@.service", "Service", "ReadWritePaths") == [f"{STATE_DIR}/%i"]


def test_each_instance_reads_its_own_env_file_last_and_needs_it_for_its_port() -> None:
    files = unit_values("worker@.service", "Service", "EnvironmentFile")
    # Shared secrets optional ("-"), the instance's own file required and read last, so
    # its values win; without it the instances would all bind the same port.
    assert files == ["-/etc/worker/worker.env", "/etc/worker/worker-%i.env"]
    text = (REPO / "deploy" / "systemd" / "worker@.service").read_text()
    port = re.search(r'echo "(WORKER_HTTP_PORT)=\$\(\(8080 \+ i\)\)"', text)
    assert port, "the install comment writes WORKER_HTTP_PORT per instance"
    settings = load(None, environ={"WORKER_HTTP_PORT": "8083"}).settings
    assert settings.http_port == 8083


def test_the_instances_belong_to_worker_target_which_starts_with_the_system() -> None:
    assert unit_values("worker@.service", "Install", "WantedBy") == ["worker.target"]
    assert unit_values("worker@.service", "Unit", "PartOf") == ["worker.target"]
    assert unit_values("worker.target", "Install", "WantedBy") == ["multi-user.target"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    # verify insists that ExecStart's program exists: point it at this environment's.
    program = Path(sys.executable).with_name("worker")
    assert program.exists()
    for path in (REPO / "deploy" / "systemd").iterdir():
        text = path.read_text().replace("/usr/local/bin/worker", str(program))
        (tmp_path / path.name).write_text(text)
    units = ["worker.service", "worker@1.service", "worker@2.service", "worker.target"]
    proc = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / u) for u in units)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout + proc.stderr == ""


# -- Dockerfile and Makefile ----------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
        for line in (raw.strip() for raw in text.splitlines())
        if line and not line.startswith("#")
    ]


def test_the_image_is_slim_non_root_with_the_state_dir_as_a_volume_and_a_healthcheck() -> None:
    steps = dockerfile()
    instructions = [i for i, _ in steps]
    froms = [a for i, a in steps if i == "FROM"]
    assert froms and all("slim" in f for f in froms)
    users = [a for i, a in steps if i == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any(STATE_DIR in a for i, a in steps if i == "VOLUME")
    health = next(a for i, a in steps if i == "HEALTHCHECK")
    assert '"worker.http.probe"' in health  # /healthz on the port the settings name
    assert not re.search(r":\d{2,5}\b|\b8080\b", health), "no port in the image"
    assert instructions.index("USER") > max(i for i, (k, _) in enumerate(steps) if k == "RUN")
    cmd = next(a for i, a in steps if i == "CMD")
    assert "--state-dir" in cmd and STATE_DIR in cmd


def test_the_image_serves_probes_on_a_management_port_of_their_own() -> None:
    # On the query port, clients holding every connection would make /healthz a 503.
    steps = dockerfile()
    env = " ".join(a for i, a in steps if i == "ENV")
    port = re.search(r"WORKER_HTTP_MANAGEMENT_PORT=(\d+)", env)
    assert port is not None
    exposed = " ".join(a for i, a in steps if i == "EXPOSE").split()
    assert port.group(1) in exposed


def test_the_makefile_has_the_everyday_targets() -> None:
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", text, flags=re.MULTILINE))
    assert {"install", "test", "demo", "bench", "lint", "docker"} <= targets
