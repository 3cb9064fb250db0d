"""The ``env`` job plugin (Volcano's): every container and init container of a job's pod learns its index in
its task as ``VC_TASK_INDEX`` and ``VK_TASK_INDEX``.

Who calls it: ``controllers.jobplugins.shape`` for every pod the job controller makes. hetsched sets the
index whether or not a Job lists ``env`` (a rank needs it, and Volcano's own examples read it without the
plugin); listing it changes nothing else.
"""

from __future__ import annotations

from hetsched.api.job_plugins import Value
from hetsched.controllers.jobplugins.draft import Draft


def on_pod(draft: Draft, values: dict[str, Value]) -> None:
    del values  # the plugin takes no arguments
    for name in ("VK_TASK_INDEX", "VC_TASK_INDEX"):
        draft.env(name, str(draft.index))
