"""The study's reported averages (docs/protocol.md §7): shown beside the ranking, never in it.

They were measured on the study's own unpublished 200-per-benchmark sample with Qwen3.5 models,
so cfbench cannot reproduce them question for question; they are labelled as such wherever shown.
"""

from __future__ import annotations

NOTE = "reported, not reproduced"
SOURCE = "the study's 7-benchmark Cover-EM averages (protocol.md section 7), on its own unpublished 1,325-question sample"
SCALES = ("Qwen3.5-4B", "Qwen3.5-9B")
_AVG7 = {
    "Base (Qwen3.5, untrained)": (0.384, 0.409),
    "Search-R1": (0.401, 0.434),
    "Dr. Zero": (0.400, 0.428),
    "MSV": (0.407, 0.436),
    "CrossFit": (0.488, 0.512),
    "MSV+CrossFit": (0.491, 0.515),
}
_SUITES = ("fixed1325",)  # the suite built to the study's design; other suites get no reference rows


def reported(suite: str) -> dict | None:
    if suite not in _SUITES:
        return None
    return {
        "note": NOTE,
        "source": SOURCE,
        "metric": "cover_em",
        "average": "avg7",
        "scales": list(SCALES),
        "rows": [{"treatment": t, "avg7": dict(zip(SCALES, values))} for t, values in _AVG7.items()],
    }
