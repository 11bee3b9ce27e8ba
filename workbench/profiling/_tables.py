"""The profiler's tables: one row per (path, run) (frame ``profile``), the rooflines, the
medians per path (``profile_summary``), and the rows an ETDump adds (the runtime's own
account of its load phases, ``etdump:<event>``). Their columns are declared in
:mod:`workbench.frames`.

This module owns turning result dicts into frames; it runs and draws nothing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .._cols import missing as _missing

if TYPE_CHECKING:
    import pandas as pd

    from ..artifact import Artifact

__all__ = ["ETDUMP_PREFIX"]


_ROW_KEYS = ("path", "run", "device", "status", "wall_s", "load_s", "read_s", "steady_s",
             "bytes", "bytes_copied", "read_bytes", "gbps", "load_gbps", "consume", "checksum",
             "peak_rss_growth", "rss_anon_growth", "rss_file_growth", "locked", "major_faults",
             "minor_faults", "cuda_peak_bytes", "resident_before", "cold_requested",
             "cold_achieved", "cold_note", "roofline", "roofline_gbps", "frac_roofline", "rc",
             "hwm_reset", "error", "note")


def _rate(nbytes: Any, seconds: Any) -> float | None:
    if _missing(nbytes) or _missing(seconds) or not seconds or not nbytes:
        return None
    return nbytes / seconds / 1e9


def _frame(rows: list[dict[str, Any]], rooflines: list[dict[str, Any]]) -> pd.DataFrame:
    from .. import frames

    limits = {r["name"]: r.get("gbps") for r in rooflines}
    cols: dict[str, list] = {k: [] for k in _ROW_KEYS}
    for r in rows:
        r = dict(r)
        ok = r.get("status") == "ok"
        r["gbps"] = _rate(r.get("read_bytes"), r.get("wall_s")) if ok else None
        r["load_gbps"] = _rate(r.get("bytes"), r.get("load_s")) if ok else None
        lim = limits.get(r.get("roofline"))
        r["roofline_gbps"] = lim
        r["frac_roofline"] = r["gbps"] / lim if r["gbps"] is not None and lim else None
        r["cold_requested"] = bool(r.get("cold_requested"))
        if not r["cold_requested"]:
            r["cold_achieved"] = None
        r["consume"] = r.get("consume") or ("none" if ok else None)
        for k in ("note", "cold_note", "checksum"):
            r[k] = r.get(k) or None
        for k in _ROW_KEYS:
            cols[k].append(r.get(k))
    return frames.build("profile", cols)


#: ``path`` prefix of the rows :meth:`Profile.with_etdump` adds: the runtime's own account
#: (drawn in ``_OWN_COLOR`` by :meth:`Profile.plot`).
ETDUMP_PREFIX = "etdump:"
_OWN_COLOR = "dimgray"


def _trace_events(etdump: str | os.PathLike[str] | Artifact | pd.DataFrame
                  ) -> tuple[pd.DataFrame, str | None]:
    """The events frame of ``etdump`` and the trace's file name (None for a frame)."""
    import pandas as pd

    from .._open import open as wb_open
    from ..errors import UnknownFormatError

    if isinstance(etdump, pd.DataFrame):
        lacking = [c for c in ("run", "block", "name", "kind", "start", "end", "duration")
                   if c not in etdump.columns]
        if lacking:
            raise ValueError(f"not an ETDump events or wb.timeline frame: no {', '.join(lacking)}")
        return etdump, None
    art = wb_open(etdump) if isinstance(etdump, (str, os.PathLike)) else etdump
    try:
        name = os.path.basename(art.path)
        if art.format != "etdump":
            raise UnknownFormatError(f"an ETDump (.etdp) is wanted, not {art.format}", file=name)
        return art.frames["events"], name
    finally:
        if art is not etdump:
            art.close()


def _etdump_rows(events: pd.DataFrame, source: str | None, tick_s: float,
                 first_run: dict[str, int]) -> list[dict[str, Any]]:
    """One ``profile`` row per framework event outside the ``Execute`` blocks (the load
    phase: ``Program::load_method``, ``Method::init``), its duration in seconds as
    ``load_s``; ``first_run``: path -> rows it already has."""
    from ..errors import MissingDataError

    kind, block = events["kind"].astype(str), events["block"].astype(str)
    load = events[(kind == "framework") & (block != "Execute")]
    if not len(load):
        raise MissingDataError("no load-phase events (framework events outside the Execute "
                               "blocks: Program::load_method, Method::init); the runtime records "
                               "them only when ETDump is on while the method loads",
                               file=source, structure="ETDump.run_data")
    load = load.assign(_start=load["start"].astype("int64"), _end=-load["end"].astype("int64"))
    load = load.sort_values(["run", "_start", "_end"], kind="stable")  # outer events first
    spans = [(int(r.run), str(r.name), int(r.start), int(r.end))
             for r in load.itertuples(index=False)]
    where = f"ETDump {source}" if source else "the ETDump frame given"
    rows = []
    seen = dict(first_run)
    for r, (run, name, start, end) in zip(load.itertuples(index=False), spans):
        path = ETDUMP_PREFIX + name
        k = seen[path] = seen.get(path, -1) + 1
        inner = [n for (ru, n, s, e) in spans if ru == run and start <= s and e <= end
                 and (s, e) != (start, end)]
        ok = not _missing(r.duration)
        note = (f"measured by the runtime itself: {where}, {r.block} block (run {run}), "
                f"{int(r.duration) if ok else '?'} ticks x {tick_s:g} s")
        if inner:
            note += f"; contains {', '.join(dict.fromkeys(inner))} (nested: do not add them)"
        rows.append({"path": path, "run": k, "device": "cpu", "status": "ok" if ok else "error",
                     "load_s": int(r.duration) * tick_s if ok else None, "note": note,
                     "error": None if ok else "the event has no duration (end before start)"})
    return rows


def _rooflines_frame(rooflines: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rooflines, columns=["name", "device", "gbps", "bytes", "seconds", "note"])
    return df.astype({"gbps": "float64", "seconds": "float64"})


def _summary(frame: pd.DataFrame, rooflines: pd.DataFrame) -> pd.DataFrame:
    from .. import frames

    memcpy = rooflines.set_index("name")["gbps"].get("memcpy")
    names = list(dict.fromkeys(frame["path"]))
    cols: dict[str, list] = {c.name: [] for c in frames.SCHEMAS["profile_summary"]}
    med_cols = ("wall_s", "load_s", "read_s", "steady_s", "bytes", "bytes_copied", "read_bytes",
                "gbps", "load_gbps", "peak_rss_growth", "rss_anon_growth", "rss_file_growth",
                "locked", "major_faults", "minor_faults", "cuda_peak_bytes", "resident_before")
    for name in names:
        rows = frame[frame["path"] == name]
        ok = rows[rows["status"] == "ok"]
        first = rows.iloc[0]
        failed = rows[rows["status"] != "ok"]
        cols["path"].append(name)
        cols["device"].append(first["device"])
        cols["status"].append("ok" if len(ok) else first["status"])
        cols["runs"].append(len(ok))
        cols["consume"].append(str(ok["consume"].iloc[0]) if len(ok) and
                               not _missing(ok["consume"].iloc[0]) else None)
        for c in med_cols:
            s = ok[c].dropna()
            v = s.median() if len(s) else None
            if v is not None and str(frame[c].dtype) == "Int64":
                v = round(float(v))
            cols[c].append(v)
        gbps = cols["gbps"][-1]
        lim = first["roofline_gbps"]
        cols["roofline"].append(first["roofline"])
        cols["roofline_gbps"].append(None if lim is None or lim != lim else float(lim))
        cols["frac_roofline"].append(gbps / lim if gbps is not None and lim and lim == lim
                                     else None)
        cols["frac_memcpy"].append(gbps / memcpy if gbps is not None and memcpy and memcpy == memcpy
                                   else None)
        ach = rows["cold_achieved"].dropna()
        cols["cold_achieved"].append(bool(ach.all()) if len(ach) else None)
        cn = rows["cold_note"].dropna()
        cols["cold_note"].append(str(cn.iloc[0]) if len(cn) else None)
        err = None
        if len(failed):
            e = failed.iloc[0]["error"]
            e = None if e is None or e != e else str(e)
            err = e if not len(ok) else f"{len(failed)} of {len(rows)} runs failed: {e}"
        cols["error"].append(err)
        notes = ok["note"].dropna()
        cols["note"].append(str(notes.iloc[0]) if len(notes) else None)
    return frames.build("profile_summary", cols)
