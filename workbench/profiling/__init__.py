"""Load-path profiler: how an artifact's weights get from the file into CPU and CUDA memory,
measured against the limits of this machine.

:func:`profile` runs every applicable load path of :mod:`workbench.loadpaths` — plain
``read``, ``readinto``, ``mmap`` variants, per-tensor copies and views, the ExecuTorch
runtime's loaders, ``torch.export.load``, host-to-device copies — each run in a **new
process** (so peak memory and page faults belong to that run alone; a native crash is a
row, not a crash of the caller), and the rooflines in the same run: reading a buffer once
from RAM (``ram_read``), a large ``memcpy``, the page-cache read bandwidth and, for CUDA, a
large pinned host-to-device copy.

Example:
    >>> import workbench as wb
    >>> prof = wb.profile("sample_models/mlp_portable.pte", repeat=3)   # doctest: +SKIP
    >>> prof.summary[["path", "load_s", "read_s", "gbps", "rss_anon_growth"]]   # doctest: +SKIP
    >>> prof.spread("wall_s")                                            # doctest: +SKIP
    >>> print(prof.table())                                              # doctest: +SKIP
    >>> prof.plot()                                                      # doctest: +SKIP
    >>> prof.to_csv("profile.csv")                                       # doctest: +SKIP

Reading the numbers:

* Every run has two timed phases: the **load** (``load_s``: the path's own work; for a
  zero-copy path, mapping the pages) and the **read** (``read_s``: every weight byte read
  once — a checksum the parent compares with the file's; for the runtime's loaders, the
  first ``forward``). ``wall_s`` is their sum: the same work for every path, so the paths
  compare like with like. ``gbps = read_bytes / wall_s``; ``load_gbps = bytes / load_s``
  is, for a zero-copy path, pages mapped per second — not a bandwidth.
* ``bytes`` is what the load makes available (every file for whole-file paths, the unique
  stored tensor ranges for per-tensor paths); ``read_bytes`` the weights read.
* ``peak_rss_growth`` is the high-water mark during the run over the RSS before it (the
  mark is reset first); ``rss_anon_growth`` / ``rss_file_growth`` split what is *held* at
  the end into private anonymous memory (copies) and file-backed pages (maps).
* ``cold=True`` evicts the files from the page cache before each run and checks with
  ``mincore`` what stayed resident: ``cold_achieved`` says whether it worked, and when it
  did not, ``cold_note`` says what stayed and the likely causes (pages the caller maps,
  tmpfs, other processes). A run that was not cold is never reported as cold.
* Times on a shared machine are noisy: ``repeat`` runs per path, :meth:`Profile.spread`
  and the plot's error bars show how much.

Importing this module is cheap (pandas, tqdm, matplotlib and torch load inside calls).

The profiler, by responsibility (each module says at its top what it owns):

* :mod:`._plan` — :func:`make_plan`: what the workers need, computed once from the artifact;
* :mod:`._run` — :func:`profile`: one call from start to end;
* :mod:`._workers` — the worker processes (fork server, new interpreters), :func:`close_workers`;
* :mod:`._files` — the files' identity, warming, and why a run was not cold;
* :mod:`._tables` — result rows -> the ``profile`` and ``profile_summary`` frames;
* :mod:`._result` — :class:`Profile`, how a profile is shown.
"""

from __future__ import annotations

from ._plan import make_plan
from ._result import Profile
from ._run import profile
from ._tables import ETDUMP_PREFIX as ETDUMP_PREFIX
from ._workers import close_workers

__all__ = ["Profile", "profile", "make_plan", "close_workers"]
