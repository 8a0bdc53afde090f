"""Stand-ins for the TensorRT objects the stub libraries cannot make (issue 51), derived from the
real bindings: ``Builder``, ``OnnxParser`` and ``Runtime`` are replaced, in a process that imported
one version's real bindings (tests/trt_api.py), by objects that have exactly the real class's
attributes (another name is an AttributeError naming the version), check every call against the
real pybind11 signature (argument count, keyword names, and TensorRT enum arguments by their real
type) and every property written against the real class (it must exist and be writable), record
the calls, and answer as the test scripts them. Enums, flags, ``ILogger``, ``IProgressMonitor``
and ``IInt8EntropyCalibrator2`` stay the real ones. Tests only.
"""

from __future__ import annotations

import inspect
import re

_REAL: dict = {}  # the real classes install() stood in for


class Mismatch(AssertionError):
    """A call or attribute the real TensorRT would refuse."""


class Stand:
    """One TensorRT object: ``cls`` the real class, ``answers`` {method or property: value, or a
    callable of the call's arguments}, every use appended to ``calls``."""

    def __init__(self, trt, cls: str, answers: dict, calls: list) -> None:
        object.__setattr__(self, "_trt", trt)
        object.__setattr__(self, "_cls", cls)
        object.__setattr__(self, "_real", _REAL.get(cls) or getattr(trt, cls))
        object.__setattr__(self, "_answers", answers)
        object.__setattr__(self, "_calls", calls)

    def _static(self, name: str):
        try:
            return inspect.getattr_static(self._real, name)
        except AttributeError:
            raise AttributeError(
                f"TensorRT {self._trt.__version__}'s {self._cls} has no attribute {name!r}"
            ) from None

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        static = self._static(name)
        key = f"{self._cls}.{name}"
        if isinstance(static, property):
            value = self._answers.get(key)
            self._calls.append((key, "get"))
            return value() if callable(value) else value
        doc = getattr(getattr(self._real, name), "__doc__", "") or ""
        sigs = [ln.strip() for ln in doc.splitlines() if ln.strip().startswith(f"{name}(")]

        def method(*args, **kwargs):
            check_call(self._trt, key, sigs, args, kwargs)
            self._calls.append(
                (key, [_shown(a) for a in args], {k: _shown(v) for k, v in kwargs.items()})
            )
            answer = self._answers.get(key)
            return answer(*args, **kwargs) if callable(answer) else answer

        return method

    def __setattr__(self, name: str, value) -> None:
        static = self._static(name)
        if not isinstance(static, property) or static.fset is None:
            raise Mismatch(f"TensorRT {self._trt.__version__}'s {self._cls}.{name} cannot be set")
        self._calls.append((f"{self._cls}.{name}", "set", _shown(value)))


def _shown(value):
    if isinstance(value, Stand):
        return value._cls
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_shown(v) for v in value]
    return type(value).__name__ if not hasattr(value, "name") else str(value)


def _params(signature: str) -> list[tuple[str, str]]:
    """(name, type) of each parameter of one pybind11 signature line, ``self`` dropped."""
    inner = signature[signature.index("(") + 1 : signature.rindex(")")]
    depth, cur, parts = 0, "", []
    for ch in inner:
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if not p.strip():
            continue
        name, _, rest = p.partition(":")
        out.append((name.strip(), rest.split("=")[0].strip()))
    return [(n, t) for n, t in out if n != "self"]


def takes(params: list, positional: int, keywords: set) -> bool:
    """Whether a signature of ``params`` ((name, type) each) takes ``positional`` arguments and
    then ``keywords``: as many positional ones at most, keywords it names after them."""
    return positional <= len(params) and keywords <= {n for n, _ in params[positional:]}


def check_call(trt, key: str, signatures: list[str], args: tuple, kwargs: dict) -> None:
    """Mismatch unless one overload takes ``args`` and ``kwargs``: as many positional arguments
    at most, keywords it names, and a TensorRT enum where it wants one."""
    if not signatures:
        return  # no signature in the docstring: nothing to hold the call to
    for sig in signatures:
        params = _params(sig)
        if not takes(params, len(args), set(kwargs)):
            continue
        bound = {params[i][0]: a for i, a in enumerate(args)}  # len(args) <= len(params)
        bound.update(kwargs)
        ok = True
        for name, typ in params:
            m = re.fullmatch(r"tensorrt_bindings\.tensorrt\.(\w+)(?:\.(\w+))?", typ)
            if m is None or name not in bound:
                continue
            want = getattr(trt, m.group(1), None)
            if m.group(2):
                want = getattr(want, m.group(2), None)
            if isinstance(want, type) and hasattr(want, "__members__"):
                ok = ok and isinstance(bound[name], want)
        if ok:
            return
    raise Mismatch(
        f"TensorRT {trt.__version__}: {key}({', '.join(map(repr, map(_shown, args)))}"
        f"{', ' if args and kwargs else ''}{', '.join(f'{k}={_shown(v)!r}' for k, v in kwargs.items())})"
        f" fits no signature of the real API: {signatures}"
    )


def install(trt, answers: dict, calls: list) -> None:
    """``trt.Builder``, ``trt.OnnxParser`` and ``trt.Runtime`` made into stand-ins whose
    constructors are checked against the real ones."""
    for cls in ("Builder", "OnnxParser", "Runtime"):
        real = _REAL.setdefault(cls, getattr(trt, cls))
        doc = real.__init__.__doc__ or ""
        sigs = [ln.strip() for ln in doc.splitlines() if ln.strip().startswith("__init__(")]

        def make(*args, _cls=cls, _sigs=sigs, **kwargs):
            check_call(trt, f"{_cls}.__init__", _sigs, args, kwargs)
            calls.append((f"{_cls}.__init__", [_shown(a) for a in args], {}))
            return Stand(trt, _cls, answers, calls)

        setattr(trt, cls, make)
