"""Volcano's job plugins (a Job's ``spec.plugins``): their names, their arguments and what turning one on
implies — checked when a Job is admitted, read by the job controller when it makes the job's pods.

Who calls it: ``api.objects.JobSpec`` (admission: every argument parsed, an unknown name or a bad value
refused naming the plugin and the argument), ``cluster.webhook`` (Volcano's mutating defaults: the plugins
and the task dependency that turning ``mpi``, ``pytorch``, ``tensorflow`` or ``ray`` on adds), and
``controllers.jobplugins`` (each plugin's arguments).

Arguments are parsed as Go's ``flag`` package parses them in Volcano's plugins: ``-name=value``,
``--name=value``, ``--name value`` and a bare ``--name`` for a switch; ``--`` ends the flags. Volcano logs
an argument its plugin does not know and goes on with the defaults; hetsched refuses the Job instead, naming
the argument, so that a typo (``--mater=main``) never silently runs the job with the default task names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Value = str | int | bool
MAX_ARGUMENT = 4096
"""Characters of one argument (a private key given to ``ssh`` fits)."""


@dataclass(frozen=True)
class Flag:
    default: Value
    low: int = 0
    high: int = 0
    """For integers: the accepted range."""


PORT = (1, 65535)
FLAGS: dict[str, dict[str, Flag]] = {
    "env": {},
    "svc": {"publish-not-ready-addresses": Flag(False), "disable-network-policy": Flag(False),
            "inject-hosts-env": Flag(True)},
    "ssh": {"ssh-key-file-path": Flag("/root/.ssh"), "ssh-private-key": Flag(""), "ssh-public-key": Flag(""),
            "ssh-port": Flag(22, *PORT)},
    "mpi": {"master": Flag("master"), "worker": Flag("worker"), "port": Flag(22, *PORT)},
    "pytorch": {"master": Flag("master"), "worker": Flag("worker"), "port": Flag(23456, *PORT),
                "wait-master-enabled": Flag(False), "wait-master-timeout": Flag(300, 1, 86_400),
                "wait-master-image": Flag("busybox:1.36.1")},
    "tensorflow": {"ps": Flag("ps"), "worker": Flag("worker"), "chief": Flag("chief"),
                   "evaluator": Flag("evaluator"), "port": Flag(2222, *PORT)},
    "ray": {"head": Flag("head"), "headContainer": Flag("head"), "worker": Flag("worker"),
            "workerContainer": Flag("worker"), "port": Flag(6379, *PORT), "dashboardPort": Flag(8265, *PORT),
            "clientPort": Flag(10001, *PORT)},
    "hcclrank": {"master": Flag("master"), "worker": Flag("worker")},
}
"""Every plugin Volcano's job controller registers, with its flags and their defaults (Volcano's)."""
PLUGINS = tuple(FLAGS)
NEEDS_SVC = ("mpi", "pytorch", "tensorflow", "ray")
"""Plugins that name pods by the ``svc`` plugin's DNS names: Volcano's webhook turns ``svc`` on with them."""
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def parse(plugin: str, arguments: Sequence[str]) -> dict[str, Value]:
    """The plugin's flags, defaults filled in; ValueError ``plugins.<plugin>: ...`` naming what is wrong."""
    if plugin not in FLAGS:
        shown = plugin if _NAME.fullmatch(plugin) else repr(plugin[:80])  # never markup or a newline as is
        raise ValueError(f"plugins.{shown}: unknown job plugin (Volcano's: {', '.join(PLUGINS)})")
    flags = FLAGS[plugin]
    values: dict[str, Value] = {name: flag.default for name, flag in flags.items()}
    where = f"plugins.{plugin}"
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        index += 1
        if len(argument) > MAX_ARGUMENT:
            raise ValueError(f"{where}: an argument of {len(argument):,} characters (at most {MAX_ARGUMENT:,})")
        if argument == "--":
            rest = arguments[index:]
            if rest:
                raise ValueError(f"{where}: arguments after '--' are not read by the plugin: {rest[0][:80]!r}")
            break
        if not argument.startswith("-") or argument == "-":
            raise ValueError(f"{where}: {argument[:80]!r} is not a flag (flags: "
                             f"{', '.join('--' + f for f in flags) or 'none'})")
        name, has_value, value = argument.lstrip("-").partition("=")
        if argument.startswith("---") or name not in flags:
            known = ", ".join("--" + f for f in flags) or "none"
            raise ValueError(f"{where}: unknown argument {argument[:80]!r} (the plugin's flags: {known})")
        default = flags[name].default
        if not has_value and not isinstance(default, bool):
            if index >= len(arguments):
                raise ValueError(f"{where}: --{name} needs a value")
            value = arguments[index]
            index += 1
        values[name] = _value(where, name, flags[name], value if has_value or not isinstance(default, bool)
                              else "true")
    return values


def _value(where: str, name: str, flag: Flag, text: str) -> Value:
    if isinstance(flag.default, bool):
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError(f"{where}: --{name}={text[:40]!r} is not a boolean (true or false)")
    if isinstance(flag.default, int):
        if not text.isascii() or not text.lstrip("+-").isdigit() or len(text) > 12:
            raise ValueError(f"{where}: --{name}={text[:40]!r} is not an integer")
        number = int(text)
        if not flag.low <= number <= flag.high:
            raise ValueError(f"{where}: --{name}={number} is outside {flag.low}..{flag.high}")
        return number
    if not text or any(ord(c) < 32 and c != "\n" for c in text):
        raise ValueError(f"{where}: --{name} needs a non-empty value without control characters")
    return text


def effective(plugins: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The plugins as Volcano's webhook leaves them: ``svc`` added for the distributed-framework plugins
    that address pods by its DNS names, ``ssh`` added for ``mpi`` (``mpirun`` logs in to the workers)."""
    result = {name: list(arguments) for name, arguments in plugins.items()}
    if any(name in result for name in NEEDS_SVC):
        result.setdefault("svc", [])
    if "mpi" in result:
        result.setdefault("ssh", [])
    return result


def check(plugins: Mapping[str, Sequence[str]], tasks: Sequence[str]) -> None:
    """Every plugin's arguments parse and the task a plugin cannot work without exists (ValueError
    otherwise): ``mpi``'s master (Volcano's webhook refuses a job without it), ``ray``'s head (Volcano's
    controller fails every pod of such a job) and ``pytorch``'s master (Volcano's plugin silently does
    nothing without it)."""
    for plugin, arguments in plugins.items():
        values = parse(plugin, arguments)
        if plugin == "ssh" and not str(values["ssh-key-file-path"]).startswith("/"):
            raise ValueError(f"plugins.ssh: --ssh-key-file-path={values['ssh-key-file-path']!r} must be an "
                             "absolute path")
        if plugin == "ssh" and bool(values["ssh-private-key"]) != bool(values["ssh-public-key"]):
            raise ValueError("plugins.ssh: give both --ssh-private-key and --ssh-public-key, or neither")
        required = {"mpi": "master", "pytorch": "master", "ray": "head"}.get(plugin)
        if required is not None and values[required] not in tasks:
            raise ValueError(f"plugins.{plugin}: the {required} task {values[required]!r} is not one of the "
                             f"job's tasks ({', '.join(tasks)}); name it with --{required}=<task>")
