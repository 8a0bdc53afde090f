"""The import graph of edgert.* (function-level imports included) has no cycles, and the layers
point one way: apps -> quantize -> export -> runtime. The tree is read and parsed once for every
rule here (``trees()``), and the graph made once from it (``graph()``)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "export": "edgert.export",
    "quantize": "edgert.quantize",
    "runtime": "edgert.runtime",
    "apps": "edgert.apps",
}
LAYER = {"edgert.runtime": 0, "edgert.export": 1, "edgert.quantize": 2, "edgert.apps": 3}


@functools.cache
def modules() -> dict[str, Path]:
    out = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


@functools.cache
def sources() -> dict[str, str]:
    return {name: path.read_text(encoding="utf-8") for name, path in modules().items()}


@functools.cache
def trees() -> dict[str, ast.Module]:
    """Every module's syntax tree, parsed once for all the rules."""
    return {name: ast.parse(text) for name, text in sources().items()}


def nodes(name: str) -> list[ast.AST]:
    return _nodes()[name]


@functools.cache
def _nodes() -> dict[str, list[ast.AST]]:
    return {name: list(ast.walk(tree)) for name, tree in trees().items()}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in nodes(name):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                prefix = ".".join(anchor + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            subs = [f"{prefix}.{a.name}" for a in node.names]
            # "from . import sibling" depends on the sibling, not on the package's own names
            targets = subs if all(s in known for s in subs) else [prefix, *subs]
        if (
            isinstance(node, ast.Constant)
            and str(node.value).startswith("edgert.")
            and node.value in known
        ):
            targets = [node.value]  # a module named for importlib (the backend table)
            NAMED.add((name, node.value))
        for t in targets:
            while t and t not in known:  # a module, or the package holding the imported name
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


NAMED: set[tuple[str, str]] = set()  # (module, module it names for importlib)


def graph() -> dict[str, set[str]]:
    """Each module's imports (a copy: a rule may change its own)."""
    return {name: set(found) for name, found in _graph().items()}


@functools.cache
def _graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def _package_init_edges(g):
    """An edge into edgert.x.y also runs edgert.x's __init__: packages import their children,
    which is not a cycle of our making, so parents' __init__ imports of children are left out."""
    return {
        v: {
            w
            for w in ws
            if (v, w) in NAMED or not (v.count(".") < w.count(".") and w.startswith(v + "."))
        }
        for v, ws in g.items()
    }


def test_no_import_cycles():
    found = cycles(_package_init_edges(graph()))
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_layers_point_one_way():
    wrong = []
    for v, ws in graph().items():
        for w in ws:
            lv = LAYER[".".join(v.split(".")[:2])]
            lw = LAYER[".".join(w.split(".")[:2])]
            if lw > lv:
                wrong.append(f"{v} -> {w}")
    assert wrong == []


def test_the_graph_sees_function_level_and_importlib_imports():
    g = graph()
    # the backend table names its modules as strings for importlib
    assert "edgert.runtime.backends.tensorrt" in g["edgert.runtime.backends"]
    # plan_check imports the plan cache inside a function: it must still be an edge
    assert "edgert.runtime.backends.plan_cache" in g["edgert.runtime.backends.plan_check"]


FACE_TASK = {"edgert.runtime.tasks.faces", "edgert.quantize.faces", "edgert.export.zoo.mtcnn"}
FACE_NAMES = {"faces", "mtcnn", "zoo:mtcnn"}


def _compared_strings(node) -> set[str]:
    """String constants a comparison tests against (``x == "faces"``, ``x in ("a", "faces")``)."""
    out = set()
    for side in [node.left, *node.comparators]:
        items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        out |= {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
    return out


def test_only_the_face_task_asks_whether_a_model_is_the_face_detector():
    """The task registry (runtime/tasks.py) says what a task does; code outside the face task's
    own modules asks the spec, never whether the task is faces or the model MTCNN."""
    asking = []
    for name in modules():
        if name in FACE_TASK:
            continue
        for node in nodes(name):
            if isinstance(node, ast.Compare) and _compared_strings(node) & FACE_NAMES:
                asking.append(f"{name}:{node.lineno}")
    assert asking == []


def _under_registry(name: str) -> bool:
    return name == "edgert.runtime.tasks" or name.startswith("edgert.runtime.tasks.")


def test_only_the_task_registry_and_the_tasks_own_modules_ask_which_task_it_is():
    """What a task's results mean (compare, judge, draw, describe, observed) is its TaskSpec's
    hooks: no code outside the registry (runtime/tasks/) and a task's own modules compares a task
    name (``task == "classify"``, ``task in ("detect", "faces")``); a new task is its module and
    one row, not a hunt through the consumers."""
    from edgert.runtime.bundle import TASKS

    asking = []
    for name in modules():
        if _under_registry(name) or name in FACE_TASK:
            continue
        for node in nodes(name):
            if isinstance(node, ast.Compare) and _compared_strings(node) & set(TASKS):
                asking.append(f"{name}:{node.lineno}")
    assert asking == []


def test_results_are_read_by_their_fields_not_by_their_keys():
    """Consumers read the typed results (``result.objects``, ``o.box``): none asks whether a
    result dict has a box (``"box" in r``) or reads one (``r["box"]``), the duck-typing that let a
    boxless task pass a check by default."""
    reads_records = {
        "edgert.runtime.results",  # Detection.from_record: a written record read back
        "edgert.apps.commands.demo",  # prints the JSONL the demo's camera run wrote
    }
    looking = []
    for name in modules():
        if name in reads_records:
            continue
        for node in nodes(name):
            asks = (
                isinstance(node, ast.Compare)
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                and "box" in _compared_strings(node)
            )
            reads = (
                isinstance(node, ast.Subscript)
                and isinstance(node.slice, ast.Constant)
                and node.slice.value == "box"
            )
            if asks or reads:
                looking.append(f"{name}:{node.lineno}")
    assert looking == []


def _event_key_uses(tree) -> list:
    """Where a module reads or writes an event record's kind by its key: ``e["event"]``,
    ``e.get("event")`` / ``e.pop("event")``, ``{"event": ...}``, ``dict(event=...)``."""
    found = []
    for node in ast.walk(tree):
        key = (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value == "event"
        )
        call = isinstance(node, ast.Call) and (
            (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "pop", "setdefault")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "event"
            )
            or (
                isinstance(node.func, ast.Name)
                and node.func.id == "dict"
                and any(k.arg == "event" for k in node.keywords)
            )
        )
        literal = isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value == "event" for k in node.keys
        )
        if key or call or literal:
            found.append(node.lineno)
    return found


def test_event_kinds_are_read_and_written_through_the_events_module():
    """Events are typed (runtime/events.py, issue 67): a record's ``"event"`` key is written by
    ``Event.to_record`` and read by ``kind_of`` / ``Event.of`` alone, so every kind is declared
    once in its table."""
    looking = []
    for name, path in modules().items():
        if name == "edgert.runtime.events":
            continue
        lines = _event_key_uses(ast.parse(path.read_text(encoding="utf-8")))
        looking += [f"{name}:{n}" for n in lines]
    assert looking == []


def test_the_task_registry_and_the_zoo_name_their_modules():
    g = graph()
    assert "edgert.runtime.tasks.faces" in g["edgert.runtime.tasks"]
    assert "edgert.export.zoo.mtcnn" in g["edgert.export.zoo"]


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# inside edgert.apps: (importer, imported) pairs that run against the layering
FORBIDDEN = [
    ("edgert.apps.camera.sources", "edgert.apps.camera.sinks"),
    ("edgert.apps.camera.sinks", "edgert.apps.camera.sources"),
    *[
        (plugins, above)
        for plugins in ("edgert.apps.camera.sources", "edgert.apps.camera.sinks")
        for above in (
            "edgert.apps.camera.app",
            "edgert.apps.camera.delivery",
            "edgert.apps.camera.pipeline",
            "edgert.apps.camera.analytics",
            "edgert.apps.camera.metrics",
            "edgert.apps.commands",
            "edgert.apps.cli",
        )
    ],
    ("edgert.apps.telemetry", "edgert.apps.camera"),
    ("edgert.apps.telemetry", "edgert.apps.commands"),
    ("edgert.apps.uris", "edgert.apps.camera"),
    ("edgert.apps.uris", "edgert.apps.telemetry"),
    ("edgert.apps.camera", "edgert.apps.commands"),
]


def test_sources_sinks_and_telemetry_keep_to_their_layer():
    """Sources and sinks never import each other or what runs them; the telemetry library and
    the URI module know nothing of the camera; the camera app nothing of the commands."""
    g = graph()
    assert any(v.startswith("edgert.apps.camera.sources.") for v in g), "no sources package"
    assert any(v.startswith("edgert.apps.camera.sinks.") for v in g), "no sinks package"
    wrong = sorted(
        f"{v} -> {w}"
        for v, ws in g.items()
        for w in ws
        for a, b in FORBIDDEN
        if _under(v, a) and _under(w, b)
    )
    assert wrong == []


def test_the_plugin_tables_name_their_modules():
    """Both tables name modules that exist, so the graph (and a reader) can follow them."""
    from edgert.apps.camera.sinks import SCHEMES as SINKS
    from edgert.apps.camera.sources import SCHEMES as SOURCES

    known = set(modules())
    for entry in [*SOURCES.values(), *SINKS.values()]:
        assert entry.module in known, entry
    g = graph()
    assert {e.module for e in SOURCES.values()} <= g["edgert.apps.camera.sources"]
    assert {e.module for e in SINKS.values()} <= g["edgert.apps.camera.sinks"]


def test_the_media_package_imports_nothing_of_the_camera_app():
    """apps/camera/media (GStreamer, encoders, OpenCV's log) sits under sources and sinks: it
    imports only itself within the camera package, so no plug-in's import comes back around."""
    g = graph()
    assert any(v.startswith("edgert.apps.camera.media.") for v in g), "no media package"
    wrong = sorted(
        f"{v} -> {w}"
        for v, ws in g.items()
        if _under(v, "edgert.apps.camera.media")
        for w in ws
        if _under(w, "edgert.apps.camera") and not _under(w, "edgert.apps.camera.media")
    )
    assert wrong == []


def test_the_telemetry_library_imports_no_app_module():
    """apps/telemetry/ (HTTP probes, MQTT, Prometheus) is a library the camera and the server
    use: it imports no module of theirs, only the URI helpers (apps/uris.py, which import nothing
    of edgert's apps); the server's /model answers came from apps.swapping before."""
    g = graph()
    leaks = [
        f"{v} -> {w}"
        for v, ws in g.items()
        if _under(v, "edgert.apps.telemetry")
        for w in ws
        if _under(w, "edgert.apps")
        and not _under(w, "edgert.apps.telemetry")
        and w != "edgert.apps.uris"
    ]
    assert leaks == []
    assert not {w for w in g["edgert.apps.uris"] if _under(w, "edgert.apps")}


def test_no_module_imports_another_modules_private_names():
    """A name starting with one underscore is its module's own: another module that needs it
    gets it public, where it belongs (equalize's graph helpers became quantize/onnx_graph.py;
    bench's clock session became public for the camera's --clocks auto)."""
    taken = []
    for name in modules():
        for node in nodes(name):
            if isinstance(node, ast.ImportFrom):
                taken += [
                    f"{name}:{node.lineno} {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert taken == []


def test_only_the_pytriton_adapter_touches_pytritons_private_parts():
    """edgert serve reaches into PyTriton 0.7 (its server process, model manager, workspace and
    context): every such name lives in apps/serve/pytriton_compat.py, as TensorRT's version
    differences live in tensorrt_compat (there were 15 such touches in serve and its swap)."""
    from edgert.apps.serve import pytriton_compat

    adapter = "edgert.apps.serve.pytriton_compat"
    touched, seen = [], set()
    for name in modules():
        for node in nodes(name):
            if isinstance(node, ast.Attribute) and node.attr in pytriton_compat.PRIVATE:
                seen.add(node.attr)
                if name != adapter:
                    touched.append(f"{name}:{node.lineno} .{node.attr}")
    assert touched == []
    assert seen == set(pytriton_compat.PRIVATE)  # each name listed is one the adapter uses


def test_one_rule_says_what_a_port_is():
    """Every option and URI that takes a port goes through apps/uris.port_number (five
    validators with two ranges before: argtypes, telemetry's address, uris, the web and RTSP
    sinks)."""
    holders = sorted(
        name
        for name, text in sources().items()
        if name.startswith("edgert.apps") and re.search(r"\b65535\b", text)
    )
    assert holders == ["edgert.apps.uris"], holders


def test_a_subpackage_takes_only_leaf_modules_of_its_parents():
    """Package-level loops (runtime ⇄ runtime.backends, export ⇄ export.zoo, ...) are of one kind
    only: a subpackage importing a module of a parent package (errors, bundle, source_model) that
    imports nothing of that subpackage, directly or through others. A parent module that composes
    its children (engine.py of the backends) is never imported back by them."""
    g, mods = graph(), modules()
    package = {m: m if p.name == "__init__.py" else m.rpartition(".")[0] for m, p in mods.items()}

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for w in g.get(todo.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    back, checked = [], 0
    for m, targets in g.items():
        inside = package[m]
        for w in targets:
            parent = package[w]
            if inside == parent or not inside.startswith(parent + ".") or w == parent:
                continue
            checked += 1
            loop = sorted(x for x in reach(w) if x == inside or x.startswith(inside + "."))
            if loop:
                back.append(f"{m} imports {w}, which imports {', '.join(loop[:3])}")
    assert checked > 50, checked  # the rule sees the subpackages' imports of their parents
    assert back == [], "\n".join(back)
