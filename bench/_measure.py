"""Peak-memory measurement shared by the benchmark workers (Linux /proc)."""

from __future__ import annotations

import resource


def status_kb(field: str) -> int | None:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``, ...), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS; return True if it demonstrably worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    hwm, rss = status_kb("VmHWM"), status_kb("VmRSS")
    # After a reset HWM equals the current RSS (allow a few pages of slack).
    return hwm is not None and rss is not None and hwm - rss <= 64


def maxrss_kb() -> int:
    """The process's lifetime peak RSS in KiB (Linux ``ru_maxrss``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
