"""deploy/ is checked against the schemas it will meet, and against itself.

- Kubernetes objects (Secret, Deployment, Service) and every pod template inside the
  KubeRay objects: kubernetes-validate's bundled Kubernetes OpenAPI schemas, strict
  (an unknown field is an error), offline.
- RayJob and RayCluster: the KubeRay v1 CRD fields (ray.io/v1, from KubeRay's
  `ray-operator/apis/ray/v1` types) as a JSON schema below, closed at every level
  we write, with their pod templates checked as above. No KubeRay schema package
  installs here, so the fields are spelled out; a typo or a field KubeRay lacks fails.
- ServiceMonitor: the Prometheus Operator's fields we use, closed.
- `ray up` config: Ray's own schema (ray/autoscaler/ray-schema.json).
- Consistency: one image tag everywhere, built FROM the pinned Ray; rayVersion equals
  the pinned Ray; secrets, ports, selectors and labels line up; every entrypoint and
  command parses with rlstream's own CLI parser.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from rlstream.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S_VERSION = kubernetes_validate.utils.latest_version()


def pinned_ray() -> str:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (ray,) = [d for d in deps if d.startswith("ray")]
    return ray.split("==")[1]


RAY = pinned_ray()


def load_all() -> list[dict[str, Any]]:
    docs = []
    for f in sorted((DEPLOY / "kuberay").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(f.read_text()) if d)
    return docs


DOCS = load_all()


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in DOCS if d["kind"] == kind]


# -- KubeRay v1 (fields of RayClusterSpec, HeadGroupSpec, WorkerGroupSpec, RayJobSpec) --
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_INT = {"type": "integer", "minimum": 0}
_POD_TEMPLATE = {"type": "object", "required": ["spec"]}  # checked by kubernetes-validate
_HEAD = {
    "type": "object",
    "required": ["template"],
    "additionalProperties": False,
    "properties": {
        "serviceType": {"type": "string"},
        "headService": {"type": "object"},
        "enableIngress": {"type": "boolean"},
        "rayStartParams": _STR_MAP,
        "template": _POD_TEMPLATE,
    },
}
_WORKER = {
    "type": "object",
    "required": ["groupName", "template"],
    "additionalProperties": False,
    "properties": {
        "groupName": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "replicas": _INT,
        "minReplicas": _INT,
        "maxReplicas": _INT,
        "numOfHosts": _INT,
        "idleTimeoutSeconds": _INT,
        "suspend": {"type": "boolean"},
        "rayStartParams": _STR_MAP,
        "template": _POD_TEMPLATE,
        "scaleStrategy": {"type": "object"},
    },
}
_CLUSTER_SPEC = {
    "type": "object",
    "required": ["headGroupSpec"],
    "additionalProperties": False,
    "properties": {
        "rayVersion": {"type": "string"},
        "headGroupSpec": _HEAD,
        "workerGroupSpecs": {"type": "array", "items": _WORKER},
        "enableInTreeAutoscaling": {"type": "boolean"},
        "autoscalerOptions": {"type": "object"},
        "headServiceAnnotations": _STR_MAP,
        "suspend": {"type": "boolean"},
        "managedBy": {"type": "string"},
        "gcsFaultToleranceOptions": {"type": "object"},
    },
}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "labels": _STR_MAP},
}
KUBERAY = {
    "RayCluster": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "ray.io/v1"},
            "metadata": _METADATA,
            "spec": _CLUSTER_SPEC,
        },
    },
    "RayJob": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "ray.io/v1"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "required": ["entrypoint"],
                "additionalProperties": False,
                "properties": {
                    "entrypoint": {"type": "string"},
                    "metadata": _STR_MAP,
                    "runtimeEnvYAML": {"type": "string"},
                    "jobId": {"type": "string"},
                    "shutdownAfterJobFinishes": {"type": "boolean"},
                    "ttlSecondsAfterFinished": _INT,
                    "activeDeadlineSeconds": _INT,
                    "backoffLimit": _INT,
                    "rayClusterSpec": _CLUSTER_SPEC,
                    "clusterSelector": _STR_MAP,
                    "suspend": {"type": "boolean"},
                    "submitterPodTemplate": _POD_TEMPLATE,
                    "submitterConfig": {"type": "object"},
                    "entrypointNumCpus": {"type": "number"},
                    "entrypointNumGpus": {"type": "number"},
                    "entrypointResources": {"type": "string"},
                    "submissionMode": {
                        "enum": ["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"]
                    },
                    "managedBy": {"type": "string"},
                    "deletionStrategy": {"type": "object"},
                },
            },
        },
    },
    "ServiceMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "additionalProperties": False,
                "properties": {
                    "selector": {
                        "type": "object",
                        "properties": {"matchLabels": _STR_MAP},
                        "additionalProperties": False,
                    },
                    "namespaceSelector": {"type": "object"},
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "interval": {"type": "string", "pattern": r"^\d+[smh]$"},
                                "scrapeTimeout": {"type": "string"},
                                "scheme": {"enum": ["http", "https"]},
                            },
                        },
                    },
                },
            },
        },
    },
}


def cluster_specs() -> list[tuple[str, dict[str, Any]]]:
    out = [(d["metadata"]["name"], d["spec"]) for d in of_kind("RayCluster")]
    out += [(d["metadata"]["name"], d["spec"]["rayClusterSpec"]) for d in of_kind("RayJob")]
    return out


def pod_templates() -> list[tuple[str, dict[str, Any]]]:
    """(where, pod template) for every pod a manifest makes."""
    out = []
    for name, spec in cluster_specs():
        out.append((f"{name}/head", spec["headGroupSpec"]["template"]))
        out += [(f"{name}/{w['groupName']}", w["template"]) for w in spec["workerGroupSpecs"]]
    for d in of_kind("RayJob"):
        if "submitterPodTemplate" in d["spec"]:
            out.append((f"{d['metadata']['name']}/submitter", d["spec"]["submitterPodTemplate"]))
    for d in of_kind("Deployment"):
        out.append((d["metadata"]["name"], d["spec"]["template"]))
    return out


def containers() -> list[tuple[str, dict[str, Any]]]:
    return [(w, c) for w, t in pod_templates() for c in t["spec"]["containers"]]


def test_every_manifest_has_a_known_kind():
    kinds = sorted({d["kind"] for d in DOCS})
    assert kinds == ["Deployment", "RayCluster", "RayJob", "Secret", "Service", "ServiceMonitor"]


@pytest.mark.parametrize("kind", ["Secret", "Deployment", "Service"])
def test_kubernetes_objects_match_the_kubernetes_schema(kind):
    for doc in of_kind(kind):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_pod_templates_match_the_kubernetes_schema():
    for where, tpl in pod_templates():
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}}
        try:
            kubernetes_validate.validate({**wrapped, "template": tpl}, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{where}: {e.message} at {list(e.path)}") from e


@pytest.mark.parametrize("kind", ["RayCluster", "RayJob", "ServiceMonitor"])
def test_custom_resources_match_their_crd_fields(kind):
    assert of_kind(kind)
    for doc in of_kind(kind):
        jsonschema.validate(doc, KUBERAY[kind])


def test_the_validators_reject_what_they_should():
    """The checks above can fail: a misspelt KubeRay field, a bad pod field."""
    job = of_kind("RayJob")[0]
    bad = json.loads(json.dumps(job))
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 3
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, KUBERAY["RayJob"])
    tpl = json.loads(json.dumps(job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]))
    tpl["spec"]["containers"][0]["envfrom"] = []
    doc = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": tpl}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def image_tag() -> str:
    return f"0.1.0-ray{RAY}"


def test_one_image_everywhere_built_from_the_pinned_ray():
    images = {c["image"] for _, c in containers()}
    cluster = yaml.safe_load((DEPLOY / "ray-up" / "cluster.yaml").read_text())
    images.add(cluster["docker"]["image"])
    assert len(images) == 1, images
    (image,) = images
    assert image.endswith(f":{image_tag()}")
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"ARG RAY_VERSION={RAY}\n" in dockerfile
    assert re.search(r"^FROM rayproject/ray:\$\{RAY_VERSION\}-\$\{PYTHON_TAG\}$", dockerfile, re.M)
    assert "ARG PYTHON_TAG=py311\n" in dockerfile  # the project needs Python >= 3.11


def test_ray_version_and_head_without_workers():
    for name, spec in cluster_specs():
        assert spec["rayVersion"] == RAY, name
        head = spec["headGroupSpec"]
        assert head["rayStartParams"]["num-cpus"] == "0", name
        ports = {
            p["name"]: p["containerPort"]
            for p in head["template"]["spec"]["containers"][0]["ports"]
        }
        assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001}, name
        for w in spec["workerGroupSpecs"]:
            assert w["minReplicas"] <= w["replicas"] <= w["maxReplicas"], name


def test_every_container_has_guaranteed_resources():
    for where, c in containers():
        res = c["resources"]
        assert set(res["requests"]) == {"cpu", "memory"}, where
        if where.endswith(("/head", "/workers")):
            assert res["requests"] == res["limits"], where  # Guaranteed QoS
        else:
            assert set(res["limits"]) == {"cpu", "memory"}, where


def test_worker_pods_have_2_gib_per_cpu():
    def gib(q: str) -> float:
        return float(q.removesuffix("Gi"))

    for name, spec in cluster_specs():
        for w in spec["workerGroupSpecs"]:
            req = w["template"]["spec"]["containers"][0]["resources"]["requests"]
            assert gib(req["memory"]) / float(req["cpu"]) == 2.0, name


def test_s3_credentials_come_from_the_secret():
    (secret,) = of_kind("Secret")
    name = secret["metadata"]["name"]
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(secret["stringData"])
    for where, c in containers():
        if where.endswith("/submitter"):
            continue  # only runs `ray job submit`
        assert c["envFrom"] == [{"secretRef": {"name": name}}], where
        assert "env" not in c, where  # no credential inline
    text = "\n".join(f.read_text() for f in (DEPLOY / "kuberay").glob("*.yaml"))
    assert "AKIA" not in text  # no real-looking access key in the repo


def _cli(argv: list[str]):
    assert argv[0] == "rlstream"
    return build_parser().parse_args(argv[1:])


def test_rayjob_entrypoint_is_an_analyze_of_s3():
    (job,) = of_kind("RayJob")
    args = _cli(shlex.split(job["spec"]["entrypoint"]))
    assert args.command == "analyze"
    assert all(r.startswith("s3://") for r in args.roots) and args.out.startswith("s3://")
    assert args.ray_address is None  # Ray sets RAY_ADDRESS for a job's entrypoint
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["spec"]["submitterPodTemplate"]["spec"]["restartPolicy"] == "Never"


def test_watch_deployment_joins_the_cluster_and_is_scraped():
    (cluster,) = of_kind("RayCluster")
    (dep,) = of_kind("Deployment")
    (svc,) = of_kind("Service")
    (mon,) = of_kind("ServiceMonitor")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["type"] == "Recreate"  # never two watchers on one OUT
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    args = _cli(c["command"])
    assert args.command == "watch"
    assert args.ray_address == f"ray://{cluster['metadata']['name']}-head-svc:10001"
    assert args.metrics_host == "0.0.0.0"
    (port,) = c["ports"]
    assert port == {"containerPort": args.metrics_port, "name": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"] == pod_labels
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (sport,) = svc["spec"]["ports"]
    assert sport == {"name": "metrics", "port": args.metrics_port, "targetPort": "metrics"}
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (ep,) = mon["spec"]["endpoints"]
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"


def test_ray_up_config_matches_rays_schema():
    import ray.autoscaler

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    cluster = yaml.safe_load((DEPLOY / "ray-up" / "cluster.yaml").read_text())
    jsonschema.validate(cluster, schema)
    head = cluster["available_node_types"][cluster["head_node_type"]]
    assert head["resources"] == {"CPU": 0}
    assert any("--num-cpus=0" in c for c in cluster["head_start_ray_commands"])
    assert cluster["setup_commands"] == []  # rlstream comes in the image
