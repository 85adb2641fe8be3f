"""The PWR paper's power figures on the OpenB trace (CCGrid 2025): datacenter power against
arrived GPU demand, savings against FGD and GRAR at x = 1.0, beside the paper's readings.

    python benchmarks/openb_power.py --pods default --seeds 10 \
        --policies fgd,best_fit,pwr,pwr_fgd:200,pwr_fgd:100,pwr_fgd:50 \
        --json benchmarks/results/openb_power_default.json \
        --png benchmarks/results/openb_power_default.png

It is `python -m vte.openb --power` with the paper's policies as the default --policies
(every flag of `python -m vte.openb` applies). Policies: the six published names, "pwr" and
"pwr_fgd:<a>" (a x PWR + (1000 - a) x FGD); "fgd" is needed (the reference of the
savings). Formulas: vte/openb/OPENB.md section 11.
"""

from __future__ import annotations

import sys

from vte.openb.__main__ import main as openb_main
from vte.openb.trace import TraceError

DEFAULT_POLICIES = "fgd,best_fit,pwr,pwr_fgd:200,pwr_fgd:100,pwr_fgd:50"


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--policies" or a.startswith("--policies=") for a in argv):
        argv += ["--policies", DEFAULT_POLICIES]
    return openb_main(["--power", *argv])


if __name__ == "__main__":
    try:
        main()
    except (ValueError, TraceError) as err:
        sys.exit(f"error: {err}")
