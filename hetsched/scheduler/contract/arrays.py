"""The array types every scheduler room shares: per-node masks, counts and scores (NumPy, one entry per node
row of a snapshot unless said otherwise).

Who calls it: every module of ``scheduler.contract``, the plugins, the cache and the engine.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
