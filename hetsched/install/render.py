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
(``when``): left out of the plain manifests when false, wrapped in ``{{- if … }}`` in the chart.
Invariant: a template expression never contains a single quote (it is written inside single quotes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from hetsched.install.values import Values

TOKEN = re.compile(r"HELMTOK(\d+)X")


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

    def holds(self, when: tuple[str, ...]) -> bool:
        return all(bool(_walk(self.values, path.lstrip("!"))) != path.startswith("!") for path in when)


class Template:
    """Placeholders for Helm: every value read becomes a token standing for its template expression."""

    def __init__(self) -> None:
        self.tokens: list[tuple[str, str]] = []  # (kind: "str" | "num" | "map", template text)
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


class _Dumper(yaml.SafeDumper):
    """Block style, no line folding, and strings holding tokens single-quoted (numbers' tokens bare)."""

    template: Template | None = None


def _represent_str(dumper: _Dumper, data: str) -> yaml.ScalarNode:
    if dumper.template is not None and TOKEN.search(data):
        match = TOKEN.fullmatch(data)
        if match and dumper.template.tokens[int(match.group(1))][0] in ("num", "map"):
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


def plain_yaml(docs: list[Doc], values: Values) -> str:
    """The plain manifests: the documents whose condition holds, with the values."""
    concrete = Concrete(values)
    return "".join(f"---\n{dump(doc.obj)}" for doc in docs if concrete.holds(doc.when))


_MAP_LINE = re.compile(r"^(?P<indent> *)(?P<lead>(?:- )?[^\s:'][^:]*): HELMTOK(?P<n>\d+)X$", re.MULTILINE)


def template_yaml(docs: list[Doc], template: Template) -> str:
    """One chart template file: the documents with their tokens as Helm template expressions."""
    parts = []
    for doc in docs:
        text = dump(doc.obj, template)

        def mapping(match: re.Match[str]) -> str:
            kind, expr = template.tokens[int(match.group("n"))]
            if kind != "map":
                return match.group(0)
            width = len(match.group("indent")) + (4 if match.group("lead").startswith("- ") else 2)
            return f"{match.group('indent')}{match.group('lead')}: {{{{- toYaml {expr} | nindent {width} }}}}"

        text = _MAP_LINE.sub(mapping, text)
        text = TOKEN.sub(lambda m: template.tokens[int(m.group(1))][1], text)
        body = f"---\n{text}"
        if doc.when:
            tests = [f"({'not ' if path.startswith('!') else ''}.Values.{path.lstrip('!')})" for path in doc.when]
            condition = tests[0].strip("()") if len(tests) == 1 else f"and {' '.join(tests)}"
            body = f"{{{{- if {condition} }}}}\n{body}{{{{- end }}}}\n"
        parts.append(body)
    return "".join(parts)
