"""optpipe: pipeline-parallel schedules under a memory budget.

The functions (families, schedule, optimize, simulate, validate, export_csv, ...) come from the
compiled extension; `optpipe.torch` runs a plan in PyTorch's pipeline runtime and imports torch
only when it is imported itself.
"""
from ._optpipe import *  # noqa: F401,F403
from ._optpipe import __doc__, __version__  # noqa: F401
