"""Hostile chart values (fault battery 6, G2): every string field of values.schema.json, found by
walking the schema, is given a value that tries to inject YAML (newlines that open
``hostPID: true``, ``privileged: true``, another ``secretRef``). Rendered by the real Helm:

- with the schema, each such value is refused (the schema bounds every string by the pattern
  Kubernetes or edgert gives it; annotation values are free text, and stay one string);
- without the schema (``--skip-schema-validation``: the templates alone), the rendered resources
  have the same structure as with a harmless value in that field: the same resources, the same
  keys at every level, the hostile text one scalar where the harmless one was.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.deploy.test_helm_chart import CHART, HELM, needs_helm

yaml = pytest.importorskip("yaml")

pytestmark = pytest.mark.subprocess

SCHEMA = json.loads((CHART / "values.schema.json").read_text())

# every list and map given one entry, so that each string field reaches a template
BASE = {
    "camera": {
        "site": {
            "model": {"path": "/models/d.edgert", "task": "detect"},
            "cameras": {
                "door": {
                    "source": "rtsp://${EDGERT_DOOR_USER}:${EDGERT_DOOR_PASSWORD}@10.0.0.5/live",
                    "lines": [{"name": "in", "points": [[1, 2], [3, 4]]}],
                    "zones": [{"name": "z", "points": [[1, 1], [5, 1], [5, 5]]}],
                    "motion_masks": [[[0, 0], [1, 0], [1, 1]]],
                    "outputs": ["mqtt://broker:1883/site/door"],
                }
            },
            "defaults": {
                "lines": [{"name": "all", "points": [[0, 0.5], [1, 0.5]]}],
                "zones": [{"name": "every", "points": [[0, 0], [1, 0], [1, 1]]}],
            },
            "outputs": {"uris": ["http://0.0.0.0:8080"], "clips": "/data/clips"},
            "telemetry": {"mqtt": "mqtt://broker:1883/site"},
            "secondaries": {
                "bundles": [
                    {
                        "bundle": "/models/plates.edgert",
                        "name": "plates",
                        "labels": ["car"],
                        "cameras": ["door"],
                    }
                ]
            },
            "swap": {"check_against": "/models/old.edgert", "allow_models": ["/models"]},
            "gate": {"mode": "motion"},
        },
        "credentials": {"EDGERT_DOOR_USER": "u", "EDGERT_DOOR_PASSWORD": "p"},
        "nodeSelector": {"edgert.io/camera": "true"},
        "podAnnotations": {"team": "vision"},
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
    },
    "serve": {
        "enabled": True,
        "models": ["a.edgert"],
        "extraArgs": ["--quiet"],
        "nodeSelector": {"kind": "server"},
        "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "3Gi"}},
    },
    "prometheus": {"serviceMonitor": True},
}
# a harmless value for the string fields whose default is empty
HARMLESS = {"camera.existingSecret": "site-cams"}
PAYLOADS = [
    "\n      hostPID: true\n      hostNetwork: true",
    "\n          securityContext:\n            privileged: true",
    '"\n            - secretRef:\n                name: other-apps-secret\n#',
]


def _resolve(node: dict) -> dict:
    while "$ref" in node:
        node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _is_string(node: dict) -> bool:
    node = _resolve(node)
    types = node.get("type")
    if "enum" in node or "const" in node:
        return False
    if types == "string" or (isinstance(types, list) and "string" in types):
        return True
    return any(_is_string(n) for n in node.get("anyOf", []))


def string_fields(node: dict = SCHEMA, path: tuple = ()) -> list:
    """The path of every string the values can hold (list items and map entries as one)."""
    node = _resolve(node)
    found = [path] if path and _is_string(node) else []
    for key, sub in node.get("properties", {}).items():
        found += string_fields(sub, (*path, key))
    if isinstance(node.get("items"), dict):
        found += string_fields(node["items"], (*path, 0))
    if isinstance(node.get("additionalProperties"), dict):
        found += string_fields(node["additionalProperties"], (*path, "*"))
    for sub in node.get("patternProperties", {}).values():  # a map whose keys have a form
        found += string_fields(sub, (*path, "*"))
    for sub in node.get("anyOf", []):  # an optional list or section
        found += [p for p in string_fields(sub, path) if p != path]
    return list(dict.fromkeys(found))


FIELDS = string_fields()


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _with(path: tuple, value) -> dict:
    """BASE with the value at PATH replaced (a map entry: its one entry's value). With a Secret
    of the user's own, the credentials are in it (``auth``), not in the values."""
    values = json.loads(json.dumps(BASE))
    if path == ("camera", "existingSecret"):
        values["camera"].pop("credentials")  # they are in that Secret
    node = values
    for step in path[:-1]:
        if isinstance(node, list):
            node = node[step]
        elif step == "*":  # a map's one entry
            node = node[next(iter(node))]
        else:
            node = node.setdefault(step, {} if not isinstance(step, int) else [])
    last = path[-1]
    if last == "*":
        key = next(iter(node))
        node[key] = value
    elif isinstance(node, list):
        node[last] = value
    else:
        node[last] = value
    return values


def _current(path: tuple):
    node = json.loads(json.dumps(BASE))
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for source in (node, defaults):
        here = source
        try:
            for step in path:
                here = next(iter(here.values())) if step == "*" else here[step]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(here, str) and here:
            return here
    return HARMLESS.get(_dotted(path), "x")


def _concrete(path: tuple) -> str:
    """The dotted path Helm names: a map's entry by its key (the one BASE gives), a map of free
    keys (the last step) by the map itself."""
    if path[-1] == "*":
        path = path[:-1]
    here, steps = json.loads(json.dumps(BASE)), []
    for step in path:
        if step == "*":
            step = next(iter(here))
        steps.append(str(step))
        try:
            here = here[step]
        except (KeyError, IndexError, TypeError):
            here = {}
    return ".".join(steps)


def render(values: dict, folder, schema: bool = True) -> subprocess.CompletedProcess:
    path = folder / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    cmd = [HELM, "template", "t", str(CHART), "-f", str(path)]
    if not schema:
        cmd.append("--skip-schema-validation")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def shape(text: str) -> list:
    """Each resource's kind and name, and every key path in it (list places as numbers)."""

    def paths(node, here=()):
        if isinstance(node, dict):
            for k, v in node.items():
                yield (*here, k)
                yield from paths(v, (*here, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield (*here, i)
                yield from paths(v, (*here, i))

    docs = [d for d in yaml.safe_load_all(text) if d]
    return sorted((d["kind"], d["metadata"]["name"], sorted(map(str, paths(d)))) for d in docs)


def test_the_walk_finds_the_fields_that_injected_before():
    names = {_dotted(p) for p in FIELDS}
    assert {"image.tag", "image.repository", "gpu.runtimeClassName"} <= names
    assert {"camera.existingSecret", "camera.site.cameras.*.source", "serve.extraArgs.0"} <= names
    assert {"camera.site.model.path", "camera.site.outputs.uris.0", "camera.credentials.*"} <= names
    assert "camera.site.cameras.*.lines.0.name" in names  # through an optional list of a map
    assert len(names) >= 40, sorted(names)


@needs_helm
@pytest.mark.parametrize("path", FIELDS, ids=_dotted)
def test_a_hostile_string_never_changes_the_resources(path, tmp_path):
    harmless = _current(path)
    base = render(_with(path, harmless), tmp_path, schema=False)
    assert base.returncode == 0, base.stderr
    expected = shape(base.stdout)
    free_text = path[-1] == "*" and path[-2] == "podAnnotations"
    for payload in PAYLOADS:
        hostile = harmless + payload
        bare = render(_with(path, hostile), tmp_path, schema=False)
        assert bare.returncode == 0, bare.stderr
        assert shape(bare.stdout) == expected, f"{_dotted(path)} injected {payload!r}"
        for word in ("hostPID", "hostNetwork", "privileged", "other-apps-secret"):
            for doc in yaml.safe_load_all(bare.stdout):
                assert word not in json.dumps(list(_keys(doc))), (_dotted(path), word)
        checked = render(_with(path, hostile), tmp_path)
        if free_text:
            assert checked.returncode == 0, checked.stderr
        else:
            assert checked.returncode != 0, f"the schema let {_dotted(path)} hold a newline"
            assert _concrete(path) in checked.stderr.replace("/", "."), checked.stderr


def _keys(node):
    if isinstance(node, dict):
        for k, v in node.items():
            yield k
            yield from _keys(v)
    elif isinstance(node, list):
        for v in node:
            yield from _keys(v)


@needs_helm
def test_what_helm_set_gives_as_strings_renders_and_the_api_accepts():
    """``--set`` gives 0.5 as a string: a share for maxUnavailable stays a quoted string ("25%"),
    a count a number; every task the camera takes is a task the chart takes. The site's numbers
    are typed as the camera's file types them: --set-json gives them (a string is refused by the
    schema, naming the key)."""
    kv = pytest.importorskip("kubernetes_validate")
    sets = [
        "--set",
        "camera.updateStrategy.maxUnavailable=25%",
        "--set",
        "camera.site.model.task=pose",
    ]
    sets += [
        "--set-json",
        "camera.site.model.conf=0.5",
        "--set-json",
        "camera.site.power.power_cap=15",
    ]
    proc = subprocess.run(
        [HELM, "template", "t", str(CHART), *sets], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    daemonset = next(d for d in docs if d["kind"] == "DaemonSet")
    kv.validate(daemonset, "1.31.0", strict=True)
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "25%"
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    site = yaml.safe_load(config["data"]["site.yaml"])
    assert site["model"]["conf"] == 0.5 and site["model"]["task"] == "pose"
    assert site["power"]["power_cap"] == 15
    as_text = [HELM, "template", "t", str(CHART), "--set", "camera.site.model.conf=0.5"]
    proc = subprocess.run(as_text, capture_output=True, text=True)
    assert proc.returncode != 0 and "camera.site.model.conf" in proc.stderr, proc.stderr
