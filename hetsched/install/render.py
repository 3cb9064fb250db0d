"""Rendering one set of manifest builders two ways: with the values (the plain manifests ``hetsched install
--print`` writes and ``deploy/hetsched.yaml`` holds) or as Helm templates (the chart), so the chart cannot
drift from the manifests the tests install.

Who calls it: ``install.manifests`` builds objects through a :class:`Values` reader; ``install.chart`` and
``cli.install`` render them.

How: a builder reads every value through the reader — :meth:`Reader.get` (a string), :meth:`Reader.num`
(a number or bool, written bare), :meth:`Reader.map` (a mapping or block text, written with ``toYaml``),
:meth:`Reader.expr` (a derived value and the template expression that derives it). :class:`Concrete`
answers with the values; :class:`Template` answers with placeholder tokens, which :func:`template_yaml`
turns into ``{{ … }}`` after YAML is written (a string holding a token is single-quoted; a number token is
bare; a mapping token becomes ``{{- toYaml … | nindent N }}``). A :class:`Doc` may depend on a value
(``when``): left out of the plain manifests when false, wrapped in ``{{- if … }}`` in the chart. A mapping
key may depend on a value too (:meth:`Reader.optional`): left out of the plain object, wrapped in
``{{- if … }}`` in the template.

Values that say ``auto`` (``AUTO``) are decided by the cluster in the chart — Helm's
``.Capabilities.KubeVersion``, the server's version on ``helm install``, ``--kube-version`` on ``helm
template`` — and as ``False`` in the plain manifests (``hetsched install --kube-version`` turns ``auto`` into
the answer for that version before rendering, so both say the same for the same version).
Invariant: a template expression never contains a single quote (it is written inside single quotes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from hetsched.install.values import Values

TOKEN = re.compile(r"HELMTOK(\d+)X")
AUTO = {"webhook.matchConditions": 'semverCompare ">=1.28-0" .Capabilities.KubeVersion.Version'}
"""Boolean values that may say ``auto``, and the chart's test of the cluster for them."""
OMIT = object()
"""What :meth:`Concrete.optional` returns for a key that is left out (removed before the object is written)."""


@dataclass
class Doc:
    """One object of the installation; ``file``: its chart template; ``when``: value paths that must all be
    true (``!path``: false) for it to exist; ``plain_only``: not in the chart (the Namespace, the CRDs)."""

    obj: dict[str, Any]
    file: str
    when: tuple[str, ...] = ()
    plain_only: bool = False


class Reader(Protocol):
    namespace: str

    def get(self, path: str) -> str: ...

    def num(self, path: str) -> Any: ...

    def map(self, path: str) -> Any: ...

    def expr(self, concrete: Any, template: str) -> Any: ...

    def optional(self, path: str, value: Any) -> Any: ...


def _walk(values: Values, path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        node = getattr(node, part)
    return node


def go(value: Any) -> Any:
    """A value as Helm prints it: a whole float without its fraction (Go's ``%v``: 1.0 → ``1``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


class Concrete:
    """The values themselves (numbers printed as Helm prints them, so both renderings say the same)."""

    def __init__(self, values: Values) -> None:
        self.values = values
        self.namespace = values.namespace

    def get(self, path: str) -> str:
        value = go(_walk(self.values, path))
        return str(value).lower() if isinstance(value, bool) else str(value)

    def num(self, path: str) -> Any:
        return go(_walk(self.values, path))

    def map(self, path: str) -> Any:
        value = _walk(self.values, path)
        return value.model_dump() if hasattr(value, "model_dump") else value

    def expr(self, concrete: Any, template: str) -> Any:
        return concrete

    def optional(self, path: str, value: Any) -> Any:
        """``value`` where the value at ``path`` is true, else the key is left out."""
        return value if self.holds((path,)) else OMIT

    def holds(self, when: tuple[str, ...]) -> bool:
        def true(path: str) -> bool:
            value = _walk(self.values, path)
            return value is True if path in AUTO else bool(value)  # auto: off, unless a version said otherwise

        return all(true(path.lstrip("!")) != path.startswith("!") for path in when)


class Template:
    """Placeholders for Helm: every value read becomes a token standing for its template expression."""

    def __init__(self) -> None:
        self.tokens: list[tuple[str, str]] = []  # (kind: "str" | "num" | "map" | "optional", template text)
        self.optionals: dict[int, Any] = {}  # token → the value an optional key holds when its test holds
        self.namespace = self._token("str", "{{ .Release.Namespace }}")

    def _token(self, kind: str, text: str) -> str:
        self.tokens.append((kind, text))
        return f"HELMTOK{len(self.tokens) - 1}X"

    def get(self, path: str) -> str:
        return self._token("str", f"{{{{ .Values.{path} }}}}")

    def num(self, path: str) -> Any:
        return self._token("num", f"{{{{ .Values.{path} }}}}")

    def map(self, path: str) -> Any:
        return self._token("map", f".Values.{path}")

    def expr(self, concrete: Any, template: str) -> Any:
        if "'" in template:
            raise ValueError(f"template expression with a single quote: {template}")
        return self._token("str", template)

    def optional(self, path: str, value: Any) -> Any:
        self.tokens.append(("optional", condition((path,))))
        self.optionals[len(self.tokens) - 1] = value
        return f"HELMTOK{len(self.tokens) - 1}X"


def _test(path: str) -> str:
    """The chart's test of one ``when`` path (``!path``: its negation)."""
    bare = path.lstrip("!")
    test = f".Values.{bare}"
    if bare in AUTO:  # true, or auto and the cluster is new enough
        test = (f'or (eq (toString .Values.{bare}) "true") (and (eq (toString .Values.{bare}) "auto") '
                f"({AUTO[bare]}))")
    return f"(not ({test}))" if path.startswith("!") else f"({test})"


def condition(when: tuple[str, ...]) -> str:
    tests = [_test(path) for path in when]
    return tests[0][1:-1] if len(tests) == 1 else f"and {' '.join(tests)}"


class _Dumper(yaml.SafeDumper):
    """Block style, no line folding, and strings holding tokens single-quoted (numbers' tokens bare)."""

    template: Template | None = None


def _represent_str(dumper: _Dumper, data: str) -> yaml.ScalarNode:
    if dumper.template is not None and TOKEN.search(data):
        match = TOKEN.fullmatch(data)
        if match and dumper.template.tokens[int(match.group(1))][0] in ("num", "map", "optional"):
            return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="")
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'")
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _represent_str)


def dump(obj: Any, template: Template | None = None) -> str:
    dumper = type("Dumper", (_Dumper,), {"template": template})
    return yaml.dump(obj, Dumper=dumper, default_flow_style=False, sort_keys=False, width=1 << 20,
                     allow_unicode=True)


def _omitted(obj: Any) -> Any:
    """``obj`` without the keys :meth:`Concrete.optional` left out."""
    if isinstance(obj, dict):
        return {k: _omitted(v) for k, v in obj.items() if v is not OMIT}
    if isinstance(obj, list):
        return [_omitted(v) for v in obj]
    return obj


def plain_yaml(docs: list[Doc], values: Values) -> str:
    """The plain manifests: the documents whose condition holds, with the values."""
    concrete = Concrete(values)
    return "".join(f"---\n{dump(_omitted(doc.obj))}" for doc in docs if concrete.holds(doc.when))


_MAP_LINE = re.compile(r"^(?P<indent> *)(?P<lead>(?:- )?[^\s:'][^:]*): HELMTOK(?P<n>\d+)X$", re.MULTILINE)


def template_yaml(docs: list[Doc], template: Template) -> str:
    """One chart template file: the documents with their tokens as Helm template expressions."""
    parts = []
    for doc in docs:
        text = dump(doc.obj, template)

        def mapping(match: re.Match[str]) -> str:
            number = int(match.group("n"))
            kind, expr = template.tokens[number]
            indent, lead = match.group("indent"), match.group("lead")
            width = len(indent) + (4 if lead.startswith("- ") else 2)
            if kind == "optional":  # the key and its value, only where the test holds
                assert not lead.startswith("- "), "an optional key is a mapping key"
                body = dump({lead: template.optionals[number]}, template).rstrip("\n")
                block = "\n".join(f"{indent}{line}" for line in body.split("\n"))
                return f"{indent}{{{{- if {expr} }}}}\n{_MAP_LINE.sub(mapping, block)}\n{indent}{{{{- end }}}}"
            if kind != "map":
                return match.group(0)
            return f"{indent}{lead}: {{{{- toYaml {expr} | nindent {width} }}}}"

        text = _MAP_LINE.sub(mapping, text)
        text = TOKEN.sub(lambda m: template.tokens[int(m.group(1))][1], text)
        body = f"---\n{text}"
        if doc.when:
            body = f"{{{{- if {condition(doc.when)} }}}}\n{body}{{{{- end }}}}\n"
        parts.append(body)
    return "".join(parts)
