"""``Profile``: the result of :func:`~workbench.profiling.profile` — its frames, the summary,
the spread of repeated runs, an ETDump's account added as rows, CSV, a text table, HTML and
the load-path figure.

This module owns how a profile is shown; it runs nothing (:meth:`Profile.with_etdump` reads
a trace that already exists).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .._cols import missing as _missing
from ._tables import _OWN_COLOR, ETDUMP_PREFIX, _etdump_rows, _frame, _summary, _trace_events

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from ..artifact import Artifact

__all__ = ["Profile"]

MiB = 1 << 20


class Profile:
    """The result of :func:`profile`.

    Attributes:
        frame: one row per (path, run) — schema ``"profile"`` in :mod:`workbench.frames`.
        rooflines: ``name, device, gbps, bytes, seconds, note`` — the limits measured in the
            same run (``memcpy``, ``page_cache_read``, ``h2d_pinned``).
        info: the artifact, its files and sizes, and how the profile was run.

    Example:
        >>> prof = wb.profile("sample_models/mlp_portable.pte", repeat=1)   # doctest: +SKIP
        >>> prof.summary.query("status == 'ok'")[["path", "gbps"]]          # doctest: +SKIP
    """

    def __init__(self, frame: pd.DataFrame, rooflines: pd.DataFrame, info: dict[str, Any]) -> None:
        self.frame = frame
        self.rooflines = rooflines
        self.info = info
        self._summary: pd.DataFrame | None = None

    @property
    def summary(self) -> pd.DataFrame:
        """Medians per path over its ok runs, with fractions of its roofline and of memcpy
        (schema ``"profile_summary"``)."""
        if self._summary is None:
            self._summary = _summary(self.frame, self.rooflines)
        return self._summary

    def roofline(self, name: str) -> float | None:
        """GB/s of roofline ``name`` (None when it was not measured)."""
        s = self.rooflines.set_index("name")["gbps"]
        v = s.get(name)
        return None if v is None or v != v else float(v)

    def spread(self, column: str = "wall_s") -> pd.DataFrame:
        """The spread of ``column`` over each path's ok runs: ``runs, min, median, max`` (and
        ``rel_spread`` = (max - min) / median), one row per path that has ok runs.

        Example:
            >>> prof.spread("wall_s")[["min", "median", "max"]]        # doctest: +SKIP
        """
        import pandas as pd

        f = self.frame
        ok = f[f["status"] == "ok"]
        rows = []
        for path in dict.fromkeys(ok["path"]):
            v = ok.loc[ok["path"] == path, column].astype("float64").dropna()
            if not len(v):
                continue
            med = float(v.median())
            rows.append({"path": path, "runs": len(v), "min": float(v.min()), "median": med,
                         "max": float(v.max()),
                         "rel_spread": (float(v.max()) - float(v.min())) / med if med else None})
        return pd.DataFrame(rows, columns=["path", "runs", "min", "median", "max", "rel_spread"]
                            ).set_index("path")

    def with_etdump(self, etdump: str | os.PathLike[str] | Artifact | pd.DataFrame, *,
                    tick_s: float = 1e-9) -> Profile:
        """This profile plus the runtime's own account of its load phase, from an ETDump.

        Every framework event of the trace outside its ``Execute`` blocks — the load:
        ``Program::load_method`` and, nested inside it, ``Method::init`` — becomes one row
        of :attr:`frame` with ``path`` ``"etdump:<event name>"`` (``etdump:Program::load_method``),
        its duration as ``load_s`` (``wall_s``, ``read_s`` and the byte and memory columns
        missing: the runtime timed its load only, nothing was read) and a ``note`` saying
        where it comes from. The summary, :meth:`spread` (of ``load_s``), :meth:`table` and
        :meth:`plot` then show the workbench's timing of ``executorch_runtime`` (its
        ``load_s``: ``load_program`` + ``load_method`` seen from Python, in a fresh process)
        next to the runtime's own. The trace is taken to be of this program (an ETDump does
        not name it): record it with :func:`workbench.run` (``etdump="x.etdp"``) or
        ``_load_for_executorch(..., enable_etdump=True)``.

        Args:
            etdump: the ``.etdp`` path, an opened ETDump, its ``events`` frame, or the frame
                :func:`workbench.run` / :func:`workbench.timeline` returns.
            tick_s: seconds per tick of the trace's timestamps. ETDump stores raw runtime
                ticks and no unit (``workbench.frames``: "raw runtime units, ns with the
                default clock"); ExecuTorch's default clock counts nanoseconds: 1e-9.

        Returns:
            A new :class:`Profile` (this one is unchanged).

        Raises:
            UnknownFormatError: ``etdump`` is a file of another format.
            MissingDataError: the trace holds no load-phase event.

        Example:
            >>> prof = wb.profile("sample_models/mlp_portable.pte",
            ...                   paths=["executorch_runtime"], repeat=1)      # doctest: +SKIP
            >>> both = prof.with_etdump("sample_models/mlp_portable.etdp")     # doctest: +SKIP
            >>> (both.summary.set_index("path")["load_s"] * 1e3).round(3)      # doctest: +SKIP
            executorch_runtime                 1.266
            etdump:Program::load_method        0.027
            etdump:Method::init                0.023
        """
        from .. import frames

        if not (tick_s > 0 and tick_s != float("inf")):
            raise ValueError(f"tick_s must be a positive number of seconds, not {tick_s!r}")
        events, source = _trace_events(etdump)
        have = self.frame["path"].value_counts()
        added = _frame(_etdump_rows(events, source, tick_s,
                                    {str(p): int(n) - 1 for p, n in have.items()}), [])
        cols = {c.name: [None if _missing(v) else v for v in self.frame[c.name].tolist()]
                + [None if _missing(v) else v for v in added[c.name].tolist()]
                for c in frames.SCHEMAS["profile"]}
        info = dict(self.info, etdump=[*self.info.get("etdump", []), source or "<frame>"])
        return Profile(frames.build("profile", cols), self.rooflines, info)

    @property
    def cold_notes(self) -> list[str]:
        """The distinct ``cold_note`` texts: why runs that asked for a cold cache were warm.

        Example:
            >>> wb.profile(p, cold=True).cold_notes       # doctest: +SKIP
            []
        """
        return list(dict.fromkeys(self.frame["cold_note"].dropna().astype(str)))

    # -- output ------------------------------------------------------------------------------
    def to_csv(self, path: str | os.PathLike[str] | None = None, *, summary: bool = False
               ) -> str | None:
        """Write :attr:`frame` (or :attr:`summary`) as CSV; return the text when ``path`` is None.

        Example:
            >>> prof.to_csv("load_paths.csv")            # doctest: +SKIP
            >>> text = prof.to_csv(summary=True)         # doctest: +SKIP
        """
        df = self.summary if summary else self.frame
        return df.to_csv(path, index=False)

    def table(self) -> str:
        """The summary as a plain-text table for terminals (names escaped).

        ``load ms`` is the load alone, ``read ms`` the pass that reads every weight byte once
        (runtime paths: the first forward), ``total ms`` their sum with the min-max over runs.

        Example:
            >>> print(prof.table())        # doctest: +SKIP
        """
        from .._fmt import escape

        def mib(v: Any) -> str:
            return "" if _missing(v) else f"{v / MiB:,.1f}"

        def num(v: Any, fmt: str, scale: float = 1.0) -> str:
            return "" if _missing(v) else format(v * scale if scale != 1.0 else v, fmt)

        spread = self.spread("wall_s")
        head = ("path", "status", "runs", "load ms", "read ms", "total ms", "min-max ms", "GB/s",
                "x roof", "roofline", "peak MiB", "anon MiB", "file MiB", "lock MiB", "majflt",
                "minflt", "cuda MiB", "note / error")
        lines = [head]
        for r in self.summary.itertuples(index=False):
            extra = r.note if _missing(r.error) else r.error
            extra = "" if _missing(extra) else escape(extra)
            rng = (f"{spread.loc[r.path, 'min'] * 1e3:,.2f}-{spread.loc[r.path, 'max'] * 1e3:,.2f}"
                   if r.path in spread.index else "")
            lines.append((
                escape(r.path), str(r.status), str(r.runs), num(r.load_s, ",.2f", 1e3),
                num(r.read_s, ",.2f", 1e3), num(r.wall_s, ",.2f", 1e3), rng,
                num(r.gbps, ",.2f"), num(r.frac_roofline, ".2f"),
                "" if _missing(r.roofline) else str(r.roofline),
                mib(r.peak_rss_growth), mib(r.rss_anon_growth), mib(r.rss_file_growth),
                mib(r.locked), num(r.major_faults, ","), num(r.minor_faults, ","),
                mib(r.cuda_peak_bytes), extra[:90]))
        widths = [max(len(row[i]) for row in lines) for i in range(len(head) - 1)]
        right = {2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16}
        out = []
        for row in lines:
            cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in
                     enumerate(zip(row, widths))]
            out.append("  ".join(cells) + "  " + row[-1])
        lim = ", ".join(f"{n} {g:,.2f} GB/s" for n, g in zip(self.rooflines["name"],
                                                            self.rooflines["gbps"]) if g == g)
        info = self.info
        title = (f"{escape(os.path.basename(info['artifact']))} [{info['format']}] "
                 f"{info['bytes'] / MiB:,.1f} MiB in {len(info['files'])} file(s), "
                 f"{info['tensors']} stored tensor ranges; cold={info['cold']}, "
                 f"repeat={info['repeat']}")
        tail = [escape(n) for n in self.cold_notes[:1]]
        return "\n".join([title, f"rooflines: {lim or 'not measured'}", *out, *tail])

    def __repr__(self) -> str:
        return (f"<workbench.Profile {os.path.basename(self.info['artifact'])!r}: "
                f"{self.frame['path'].nunique()} paths, {len(self.frame)} rows>")

    def _repr_html_(self) -> str:
        import html

        info = self.info
        cols = ["path", "status", "runs", "consume", "load_s", "read_s", "wall_s", "gbps",
                "frac_roofline", "roofline", "peak_rss_growth", "rss_anon_growth",
                "rss_file_growth", "locked", "major_faults", "minor_faults", "cuda_peak_bytes",
                "cold_achieved", "error", "note"]
        s = self.summary[cols].copy()
        for c in ("peak_rss_growth", "rss_anon_growth", "rss_file_growth", "locked",
                  "cuda_peak_bytes"):
            s[c] = (s[c].astype("Float64") / MiB).round(1)
        s = s.rename(columns={c: c.replace("growth", "growth_mib") for c in s.columns
                              if c.endswith("growth")}
                     | {"locked": "locked_mib", "cuda_peak_bytes": "cuda_peak_mib"})
        rl = ", ".join(f"<b>{html.escape(n)}</b> {g:,.2f} GB/s"
                       for n, g in zip(self.rooflines["name"], self.rooflines["gbps"]) if g == g)
        cold = "".join(f"<p><b>{html.escape(n)}</b></p>" for n in self.cold_notes[:1])
        return (f"<div><b>workbench.Profile</b> · <code>{html.escape(info['artifact'])}</code> "
                f"[{html.escape(info['format'])}] · {info['bytes'] / MiB:,.1f} MiB · "
                f"cold={info['cold']} · repeat={info['repeat']}"
                f"<p>rooflines: {rl or 'not measured'}</p>{cold}"
                f"{s.to_html(index=False, na_rep='', float_format=lambda v: f'{v:,.3g}')}</div>")

    def plot(self) -> Figure:
        """Time until every weight byte was read once, per path; memory held below.

        Each bar stacks the load (solid: orange for copying paths, blue for zero-copy ones,
        dark gray for the runtime's own account from an ETDump, see :meth:`with_etdump`) and
        the read (light: the checksum of every weight byte, or the first forward for the
        runtime's loaders); the error bar spans the fastest to the slowest run (min-max of
        ``wall_s``); a black tick marks the floor, the path's weight bytes at the ``ram_read``
        roofline; each bar is labelled with its GB/s. The second panel stacks what is held at
        the end (anonymous, file-backed) and marks the peak growth. Skipped and failed paths
        are labelled at zero. Returns a ``matplotlib.figure.Figure`` (no pyplot state).

        Example:
            >>> fig = prof.plot(); fig.savefig("load_paths.png", dpi=120)   # doctest: +SKIP
        """
        import numpy as np
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch

        s = self.summary
        names = s["path"].tolist()
        x = np.arange(len(names))
        fig = Figure(figsize=(max(7.0, 0.6 * len(names) + 3), 7.5), layout="constrained")
        ax, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        ok = (s["status"] == "ok").to_numpy()
        load = s["load_s"].astype("float64").fillna(0).to_numpy() * 1e3
        read = s["read_s"].astype("float64").fillna(0).to_numpy() * 1e3
        copying = (s["bytes_copied"].astype("Float64").fillna(0) > 0).to_numpy(dtype=bool)
        color = np.where(copying, "tab:orange", "tab:blue")
        color = np.where(s["device"].astype(str).to_numpy() == "cuda", "tab:green", color)
        own = s["path"].astype(str).str.startswith(ETDUMP_PREFIX).to_numpy(dtype=bool)
        color = np.where(own, _OWN_COLOR, color)
        color = np.where(ok, color, "lightgray")
        ax.bar(x, load, color=color, edgecolor="white")
        ax.bar(x, read, bottom=load, color=color, alpha=0.35, edgecolor="white", hatch="..")
        spread = self.spread("wall_s")
        lo = np.array([spread.loc[n, "min"] * 1e3 if n in spread.index else np.nan for n in names])
        hi = np.array([spread.loc[n, "max"] * 1e3 if n in spread.index else np.nan for n in names])
        total = load + read
        has = ok & ~np.isnan(lo)
        if has.any():
            ax.errorbar(x[has], total[has], yerr=[np.clip(total[has] - lo[has], 0, None),
                                                  np.clip(hi[has] - total[has], 0, None)],
                        fmt="none", ecolor="black", capsize=3, lw=1)
        ram = self.roofline("ram_read")
        floor = s["read_bytes"].astype("float64").to_numpy() / (ram * 1e9) * 1e3 if ram else None
        if floor is not None and np.isfinite(floor[ok]).any():
            ax.scatter(x[ok], floor[ok], marker="_", s=400, color="black", zorder=3,
                       label=f"floor: weight bytes at ram_read {ram:,.2f} GB/s")
        for i, (st, g) in enumerate(zip(s["status"], s["gbps"])):
            if st != "ok":
                ax.text(i, 0, f" {st}", rotation=90, va="bottom", ha="center", fontsize=8,
                        color="dimgray")
            elif not _missing(g):
                ax.text(i, (hi[i] if np.isfinite(hi[i]) else total[i]), f"{g:,.2f}\nGB/s",
                        va="bottom", ha="center", fontsize=7)
        handles = [Patch(facecolor="tab:orange", label="load: copying"),
                   Patch(facecolor="tab:blue", label="load: zero-copy (pages mapped)"),
                   Patch(facecolor="gray", alpha=0.35, hatch="..",
                         label="read: every weight byte once / first forward")]
        if (s["device"].astype(str) == "cuda").any():
            handles.insert(2, Patch(facecolor="tab:green", label="load: to the GPU"))
        if own.any():
            handles.insert(2, Patch(facecolor=_OWN_COLOR,
                                    label="load: the runtime's own account (ETDump)"))
        ax.add_artist(ax.legend(handles=handles, fontsize=8, loc="upper right"))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left")
        pos = total[ok & (total > 0)]
        if len(pos) and pos.max() / max(pos.min(), 1e-9) > 50:
            ax.set_yscale("log")
        elif len(pos):
            top = np.nanmax(np.where(np.isfinite(hi), np.maximum(hi, total), total)[ok])
            ax.set_ylim(0, top * 1.3)
        ax.set_ylabel("ms until every weight byte was read\n(median; bars: min-max of runs)")
        info = self.info
        cold = f"cold={info['cold']}"
        if info["cold"]:
            ach = s["cold_achieved"].dropna()
            cold += " (achieved)" if len(ach) and bool(ach.all()) else " (NOT achieved: see cold_note)"
        ax.set_title(f"{os.path.basename(info['artifact'])} [{info['format']}] · "
                     f"{info['bytes'] / MiB:,.1f} MiB · {cold} · {info['repeat']} run(s) each",
                     fontsize=10)
        anon = s["rss_anon_growth"].astype("float64").fillna(0).clip(lower=0).to_numpy() / MiB
        file = s["rss_file_growth"].astype("float64").fillna(0).clip(lower=0).to_numpy() / MiB
        peak = s["peak_rss_growth"].astype("float64").to_numpy() / MiB
        ax2.bar(x, anon, color="tab:red", label="anonymous (private) held")
        ax2.bar(x, file, bottom=anon, color="tab:purple", label="file-backed held")
        ax2.scatter(x, peak, marker="_", s=300, color="black", zorder=3, label="peak growth")
        locked = s["locked"].astype("float64").fillna(0).to_numpy() / MiB
        if (locked > 1).any():
            ax2.scatter(x[locked > 1], locked[locked > 1], marker="x", color="black", zorder=3,
                        label="locked (mlock)")
        ax2.set_ylabel("RSS growth (MiB)")
        ax2.legend(fontsize=8, loc="upper left")
        ax2.set_xticks(x, names, rotation=45, ha="right", fontsize=8)
        return fig
