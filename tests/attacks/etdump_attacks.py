"""Hostile ETDump traces (``.etdp``), built from the sample traces: a size prefix that lies,
offsets that refer to themselves, wrap or alias one table, vectors of length 2^32-1, unknown
value and event types, huge event and run counts (every events vector entry the same table),
and logged tensors whose debug buffer offsets lie outside the attached debug file.

Each trace that opens is also joined to its program with :func:`workbench.timeline`, which
must stay bounded too (its join is per event and per run).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import workbench as wb
from workbench.flatbuf import Table
from workbench.formats.etdump import schema as E

from ._common import SAMPLES, Case, patch, put, ref, root_table, sample, u32

ETDP = "mlp_portable.etdp"
DEBUG = "mlp_portable.debug.bin"
PROGRAM = SAMPLES / "mlp_portable.pte"
#: Events / runs of the "huge count" traces (every vector entry refers to one table).
MANY_EVENTS = 30_000
MANY_RUNS = 5_000


# -- locating structures in the sample (the verifying reader, on the intact file) --------------

def _root() -> Table:
    return root_table(SAMPLES / ETDP, E.FILE_IDENTIFIER, "ETDump", base=4)


def _run(i: int) -> Table:
    return _root().tables(E.ETDump.run_data)[i]


def _events(i: int = 1) -> list[Table]:
    return _run(i).tables(E.RunData.events)


def _first(kind: int) -> Table:
    """The first event table of ``kind`` (an ``Event`` slot) in the Execute run 1."""
    for ev in _events(1):
        t = ev.table(kind)
        if t is not None:
            return t
    raise LookupError(kind)


def _logged_tensor() -> Table:
    return _first(E.Event.debug_event).table(E.DebugEvent.debug_entry).table(E.Value.tensor)


def _value() -> Table:
    return _first(E.Event.debug_event).table(E.DebugEvent.debug_entry)


def _vector_len(table_fn: Callable[[], Table], slot: int) -> Callable[[], int]:
    return lambda: ref(table_fn(), slot)[1]


def _edit(locate: Callable[[], int], fmt: str, value: int, *, debug: bool = False,
          src: str = ETDP) -> Callable[[Path], Path]:
    """A builder writing ``value`` at ``locate()`` (the debug buffer copied next to it)."""
    def build(tmp: Path) -> Path:
        if debug:
            put(tmp, "x.bin", sample(DEBUG))
        return put(tmp, "x.etdp", patch(sample(src), locate(), fmt, value))
    return build


def _edits(*edits: tuple[Callable[[], int], str, int]) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        data = sample(ETDP)
        for locate, fmt, value in edits:
            data = patch(data, locate(), fmt, value)
        return put(tmp, "x.etdp", data)
    return build


# -- a forward-only flatbuffer appender (tables after the sample's buffer) ---------------------

class _Tail:
    """Flatbuffer objects appended after the sample trace's buffer, forward only: every
    uoffset points at something written after it (:meth:`point` patches it once the
    target exists); :meth:`finish` fixes the size prefix."""

    def __init__(self, data: bytes) -> None:
        self.b = bytearray(data[:4 + u32(data, 0)])
        self.pad(8)
        self._vtables: dict[bytes, int] = {}
        self._strings: dict[bytes, list[int]] = {}

    def pad(self, k: int) -> None:
        self.b += bytes(-len(self.b) % k)

    def vector(self, n: int) -> int:
        """A vector of ``n`` uoffsets (to be pointed); returns the position of its length."""
        self.pad(4)
        at = len(self.b)
        self.b += struct.pack("<I", n) + bytes(4 * n)
        return at

    def string(self, field: int, s: bytes) -> None:
        """Point the uoffset at ``field`` to the string ``s`` (written by :meth:`finish`,
        after everything else, once: equal strings share it, as builders do)."""
        self._strings.setdefault(s, []).append(field)

    def table(self, fields: list[tuple[int, str, int]]) -> tuple[int, dict[int, int]]:
        """A vtable and its table with ``(slot, struct format, value)`` fields (format ``ref``:
        a uoffset to point later). Returns the table position and each field's position."""
        sizes = {slot: 4 if fmt == "ref" else struct.calcsize("<" + fmt) for slot, fmt, _ in fields}
        layout, off = {}, 4
        for slot, _, _ in sorted(fields, key=lambda f: -sizes[f[0]]):
            off += -off % sizes[slot]
            layout[slot] = off
            off += sizes[slot]
        nslots = max(sizes) + 1
        vtable = struct.pack(f"<HH{nslots}H", 4 + 2 * nslots, off,
                             *(layout.get(s, 0) for s in range(nslots)))
        vt = self._vtables.get(vtable)
        if vt is None:  # equal vtables are shared, as builders do
            self.pad(2)
            vt = self._vtables[vtable] = len(self.b)
            self.b += vtable
        self.pad(8)
        at = len(self.b)
        self.b += bytes(off + -off % 4)
        struct.pack_into("<i", self.b, at, at - vt)
        for slot, fmt, value in fields:
            if fmt != "ref":
                struct.pack_into("<" + fmt, self.b, at + layout[slot], value)
        return at, {slot: at + layout[slot] for slot in layout}

    def point(self, at: int, target: int) -> None:
        struct.pack_into("<I", self.b, at, target - at)

    def finish(self) -> bytes:
        for s, fields in self._strings.items():
            self.pad(4)
            at = len(self.b)
            self.b += struct.pack("<I", len(s)) + s + b"\0"
            for f in fields:
                self.point(f, at)
        self.pad(4)
        struct.pack_into("<I", self.b, 0, len(self.b) - 4)
        return bytes(self.b)

    def profile_event(self, name: bytes = b"native_call_permute_copy.out", chain: int = 0,
                      instruction: int = 0, start: int = 1000, end: int = 1500,
                      debug: bool = False) -> int:
        """An Event holding one ProfileEvent (and, with ``debug``, a DebugEvent as well)."""
        P = E.ProfileEvent
        slots = [(E.Event.profile_event, "ref", 0)]
        if debug:
            slots.append((E.Event.debug_event, "ref", 0))
        ev, f = self.table(slots)
        p, pf = self.table([(P.name, "ref", 0), (P.chain_index, "i", chain),
                            (P.instruction_id, "i", instruction), (P.start_time, "Q", start),
                            (P.end_time, "Q", end)])
        self.point(f[E.Event.profile_event], p)
        self.string(pf[P.name], name)
        if debug:
            d, _ = self.table([(E.DebugEvent.instruction_id, "i", instruction)])
            self.point(f[E.Event.debug_event], d)
        return ev


def _many_events(aliased: bool) -> Callable[[Path], Path]:
    """Run 1's events vector replaced by MANY_EVENTS entries: distinct Event tables (a real,
    long trace), or all naming one Event (read 30,000 times from a few bytes)."""
    def build(tmp: Path) -> Path:
        t = _Tail(sample(ETDP))
        vec = t.vector(MANY_EVENTS)
        one = t.profile_event() if aliased else 0
        for k in range(MANY_EVENTS):
            t.point(vec + 4 + 4 * k, one or t.profile_event(start=2 * k, end=2 * k + 1))
        t.point(_run(1).field_pos(E.RunData.events, 4), vec)
        return put(tmp, "x.etdp", t.finish())
    return build


def _many_runs(aliased: bool) -> Callable[[Path], Path]:
    """The root's run_data replaced by MANY_RUNS Execute runs of one kernel event each (the
    timeline attributes per run): distinct RunData tables, or all naming one."""
    def build(tmp: Path) -> Path:
        t = _Tail(sample(ETDP))
        runs = t.vector(MANY_RUNS)
        one = 0
        for k in range(MANY_RUNS):
            if not one:
                rd, rf = t.table([(E.RunData.name, "ref", 0), (E.RunData.events, "ref", 0)])
                t.string(rf[E.RunData.name], b"Execute")
                events = t.vector(1)
                t.point(rf[E.RunData.events], events)
                t.point(events + 4, t.profile_event())
                one = rd if aliased else 0
            t.point(runs + 4 + 4 * k, one or rd)
        t.point(_root().field_pos(E.ETDump.run_data, 4), runs)
        return put(tmp, "x.etdp", t.finish())
    return build


def _two_event_types(tmp: Path) -> Path:
    """One Event with both profile_event and debug_event set (exactly one may be)."""
    data = sample(ETDP)
    t = _Tail(data)
    vec = t.vector(1)
    t.point(vec + 4, t.profile_event(debug=True))
    t.point(_run(1).field_pos(E.RunData.events, 4), vec)
    return put(tmp, "x.etdp", t.finish())


def _unknown_event_type(tmp: Path) -> Path:
    """Run 1's events: one Event whose only field is slot 7 (a newer event type)."""
    data = sample(ETDP)
    t = _Tail(data)
    vec = t.vector(2)
    newer, _ = t.table([(7, "I", 1)])
    t.point(vec + 4, newer)
    t.point(vec + 8, t.profile_event())
    t.point(_run(1).field_pos(E.RunData.events, 4), vec)
    return put(tmp, "x.etdp", t.finish())


def _size_prefix_short(tmp: Path) -> Path:
    """The size prefix cuts the buffer 64 bytes short: the rest is outside the flatbuffer."""
    data = sample(ETDP)
    return put(tmp, "x.etdp", patch(data, 0, "I", u32(data, 0) - 64))


def _short_debug_buffer(tmp: Path) -> Path:
    """The debug buffer attached is cut to 1 KiB: most logged tensors lie past its end."""
    put(tmp, "x.bin", sample(DEBUG)[:1024])
    return put(tmp, "x.etdp", sample(ETDP))


# -- checks ----------------------------------------------------------------------------------

def _timeline(art: wb.Artifact) -> None:
    """The trace joins to its program (bounded, whatever the events)."""
    t = wb.timeline(PROGRAM, art)
    assert len(t) == len(art.frames["events"])


def _many_events_read(art: wb.Artifact) -> None:
    ev = art.frames["events"]
    assert (ev["run"] == 1).sum() == MANY_EVENTS
    assert (ev.loc[ev["run"] == 1, "duration"] == 1).all()
    _timeline(art)


def _many_runs_read(art: wb.Artifact) -> None:
    assert len(art.frames["runs"]) == MANY_RUNS
    assert len(art.frames["events"]) == MANY_RUNS
    t = wb.timeline(PROGRAM, art)
    assert (t["attribution"].astype(str) == "exact").all()
    assert t["op"].eq("aten::permute_copy.out").all()


def _newer_event_counted(art: wb.Artifact) -> None:
    runs = art.frames["runs"]
    assert runs.loc[runs["run"] == 1, "unknown_events"].tolist() == [1]
    assert "none of profile_event" in " ".join(art.validate()["message"])
    _timeline(art)


def _no_events(art: wb.Artifact) -> None:
    assert art.frames["events"].empty and art.frames["runs"]["unknown_events"].sum() > 0
    _timeline(art)


def _string_value(art: wb.Artifact) -> None:
    dv = art.frames["debug_values"]
    assert "String" in set(dv["type"].astype(str))
    _timeline(art)


def _aliased_runs(art: wb.Artifact) -> None:
    runs = art.frames["runs"]
    assert len(runs) == 4 and runs["block"].astype(str).tolist() == ["Execute"] * 4
    _timeline(art)


def _all_run_data_alias_run(k: int) -> Callable[[Path], Path]:
    """Every run_data entry refers to run ``k`` (one table read four times)."""
    def build(tmp: Path) -> Path:
        data = sample(ETDP)
        vec = ref(_root(), E.ETDump.run_data)[1]
        target = vec + 4 + u32(data, vec + 4 + 4 * k) + 4 * k
        for i in range(u32(data, vec)):
            at = vec + 4 + 4 * i
            data = patch(data, at, "I", target - at)
        return put(tmp, "x.etdp", data)
    return build


def _events_elem(k: int) -> int:
    return ref(_run(1), E.RunData.events)[1] + 4 + 4 * k


def _profile_wrapper() -> Table:
    """The first Event of run 1 that holds a ProfileEvent."""
    return next(ev for ev in _events(1) if ev.table(E.Event.profile_event) is not None)


def _profile_ref() -> int:
    return _profile_wrapper().field_pos(E.Event.profile_event, 4)


def _first_event_name() -> int:
    return ref(_profile_wrapper().table(E.Event.profile_event), E.ProfileEvent.name)[1]


def _event_vtable_profile_slot() -> int:
    """The vtable entry of Event.profile_event that the profile events share (0: absent)."""
    ev = _profile_wrapper()
    vt = ev.pos - struct.unpack_from("<i", ev.fb.buf, ev.pos)[0]
    return vt + 4 + 2 * E.Event.profile_event


def _tensor_offset() -> int:
    return _logged_tensor().field_pos(E.Tensor.offset, 8)


def _tensor_sizes() -> int:
    return ref(_logged_tensor(), E.Tensor.sizes)[1]


CASES = [
    # the size prefix
    Case("etdump_size_prefix_max", _edit(lambda: 0, "I", 0xFFFFFFFF), wb.TruncatedError,
         "size prefix"),
    Case("etdump_size_prefix_too_small", _edit(lambda: 0, "I", 4), wb.TruncatedError,
         "too small"),
    Case("etdump_size_prefix_short", _size_prefix_short, wb.TruncatedError, "past the end"),
    Case("etdump_size_prefix_zero", _edit(lambda: 0, "I", 0), wb.TruncatedError, "size prefix"),
    # offsets: to themselves, wrapping backwards, aliasing one table
    Case("etdump_event_refers_to_itself", _edit(lambda: _events_elem(0), "I", 0),
         wb.CorruptError),
    Case("etdump_profile_event_refers_to_itself", _edit(_profile_ref, "I", 0), wb.CorruptError),
    Case("etdump_offset_wraps_backwards", _edit(_profile_ref, "I", 0xFFFFFFFC),
         wb.OutOfBoundsError),
    Case("etdump_runs_alias_one_table", _all_run_data_alias_run(1), None, check=_aliased_runs),
    # vectors of length 2^32-1
    Case("etdump_events_len_max", _edit(_vector_len(lambda: _run(1), E.RunData.events), "I",
                                        0xFFFFFFFF), wb.TruncatedError, "events"),
    Case("etdump_tensor_sizes_len_max", _edit(_tensor_sizes, "I", 0xFFFFFFFF),
         wb.TruncatedError, "sizes"),
    Case("etdump_event_name_len_max", _edit(_first_event_name, "I", 0xFFFFFFFF),
         wb.TruncatedError, "name"),
    # unknown types
    Case("etdump_value_type_unknown", _edit(lambda: _value().field_pos(E.Value.val, 1), "B", 42),
         wb.CorruptError, "Value.val 42 is unknown"),
    Case("etdump_value_type_without_its_field",
         _edit(lambda: _value().field_pos(E.Value.val, 1), "B", E.Value.INT), wb.CorruptError,
         "Value.int_value is missing"),
    Case("etdump_value_type_string", _edit(lambda: _value().field_pos(E.Value.val, 1), "B",
                                           E.Value.STRING), None, check=_string_value),
    Case("etdump_scalar_type_unknown",
         _edit(lambda: _logged_tensor().field_pos(E.Tensor.scalar_type, 1), "B", 99),
         wb.CorruptError, "scalar_type 99"),
    Case("etdump_two_event_types", _two_event_types, wb.CorruptError, "exactly one must be"),
    Case("etdump_newer_event_type", _unknown_event_type, None, check=_newer_event_counted),
    Case("etdump_event_types_all_absent", _edit(_event_vtable_profile_slot, "H", 0), None,
         check=_no_events),
    # huge counts
    Case("etdump_30k_events", _many_events(False), None, check=_many_events_read),
    Case("etdump_30k_events_one_table", _many_events(True), wb.CorruptError, "amplification"),
    Case("etdump_5k_runs", _many_runs(False), None, check=_many_runs_read),
    Case("etdump_5k_runs_one_table", _many_runs(True), wb.CorruptError, "amplification"),
    # the debug buffer
    # (the frames and validate() are built first: reading the tensor is what fails, naming
    # the debug file, the tensor and its offset)
    Case("etdump_debug_offset_past_file", _edit(_tensor_offset, "q", 1 << 40, debug=True),
         wb.OutOfBoundsError, "x.bin: tensor '1/0' at 0x10000000000", data=("x.bin",)),
    Case("etdump_debug_offset_near_int64_max", _edit(_tensor_offset, "q", (1 << 63) - 8,
                                                     debug=True),
         wb.OutOfBoundsError, "run past the end of the file", data=("x.bin",)),
    Case("etdump_debug_offset_negative", _edit(_tensor_offset, "q", -64, debug=True),
         wb.CorruptError, "negative", data=("x.bin",)),
    Case("etdump_debug_buffer_short", _short_debug_buffer, wb.OutOfBoundsError,
         "run past the end of the file (size 0x400)", data=("x.bin",)),
    Case("etdump_tensor_sizes_huge", _edits((lambda: _tensor_sizes() + 4, "q", 1 << 31),
                                            (lambda: _tensor_sizes() + 12, "q", 1 << 31)),
         wb.CorruptError, "too many"),
]
