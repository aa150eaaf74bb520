"""lagpilot vs the real KEDA, same stack, same trace (issue 27; lagpilot_dev.versus does the work).

    python -m bench.versus [--profile fast|default] [--rounds N] [--keda NAME:SETTINGS]... [--out DIR] [--json]
    python -m bench.versus --recheck DIR     # the KEDA model's checks of a finished DIR again, with today's model
    python -m bench.versus --no-lagpilot --keda NAME:SETTINGS --out DIR2   # KEDA rounds only, then:
    python -m bench.versus --recheck DIR --merge DIR2                     # DIR2's rounds added to DIR's

Every round replays the demo profile's trace once for lagpilot's BatchConsumerGroup and once per
KEDA variant (a plain consumer Deployment of the same command, batch settings and sink, scaled by a
ScaledObject with a kafka trigger, the same minReplicaCount/maxReplicaCount), alternating which runs
first. It needs the dev stack's keda part (built on first use: `lagpilot dev up --parts kube,kafka,keda`).

A KEDA variant is ``NAME:SETTING,SETTING...`` with settings lagThreshold=N, activationLagThreshold=N,
pollingInterval=S, cooldownPeriod=S, scaleDown=S (the HPA's scale-down stabilization window; unset:
the HPA's 300 s) and the flags limitToPartitionsWithLag, ensureEvenDistributionOfPartitions,
excludePersistentLag. Default: ``keda-default:`` (KEDA's defaults: lagThreshold 10) and
``keda-tuned:lagThreshold=1,scaleDown=0`` (the KEDA model's best of its sweep on the fast profile's trace, `lagpilot simulate`'s keda_tuned; docs/keda-comparison.md).

Output: <out>/versus.json (each round's figures, the model's prediction of each KEDA run, the
medians and the median of per-round ratios vs lagpilot), and each run's demo output in <out>/roundI-NAME.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from lagpilot_dev.paths import cache_dir
from lagpilot_dev.versus import Versus
from lagpilot_dev.versus_config import KedaVariant

DEFAULT_VARIANTS = ("keda-default:", "keda-tuned:lagThreshold=1,scaleDown=0")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bench/versus.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    p.add_argument(
        "--profile",
        choices=("fast", "default", "hot"),
        default="fast",
        help="the demo's profiles, or `hot`: a hot partition for 4 minutes (demo_traffic.VERSUS_PROFILES)",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--keda",
        action="append",
        default=None,
        metavar="NAME:SETTINGS",
        help=f"a KEDA variant (repeatable; default: {' and '.join(DEFAULT_VARIANTS)})",
    )
    p.add_argument("--out", default=None, help="output directory (default <cache>/versus/<timestamp>)")
    p.add_argument("--json", action="store_true", help="print versus.json's summary on stdout at the end")
    p.add_argument(
        "--first-round",
        type=int,
        default=0,
        metavar="I",
        help="index of the first round (odd: the variants run in reverse order first)",
    )
    p.add_argument(
        "--no-lagpilot",
        action="store_true",
        help="the KEDA variants only (rounds to add to another output with --recheck OUT --merge)",
    )
    p.add_argument(
        "--recheck",
        default=None,
        metavar="OUT",
        help="run nothing: recompute the KEDA model's checks and the plots of a finished OUT",
    )
    p.add_argument(
        "--merge",
        action="append",
        default=[],
        metavar="OTHER",
        help="with --recheck: add the rounds of another finished output (same profile; a variant "
        "in both with the same settings; a round index OUT has too is numbered after its last)",
    )
    args = p.parse_args(argv)
    if args.recheck:
        from lagpilot_dev.versus import recheck

        result = recheck(Path(args.recheck), [Path(m) for m in args.merge])
        if args.json:
            print(
                json.dumps(
                    {k: result[k] for k in ("profile", "keda_version", "variants", "summary")}, indent=1
                )
            )
        return 0
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    try:
        variants = [KedaVariant.parse(v) for v in (args.keda or DEFAULT_VARIANTS)]
    except ValueError as exc:
        p.error(str(exc))
    if len({v.name for v in variants} | {"lagpilot"}) != len(variants) + 1:
        p.error("KEDA variant names must be distinct and not 'lagpilot'")
    out = Path(args.out) if args.out else cache_dir() / "versus" / time.strftime("%Y%m%d-%H%M%S")
    result = Versus(
        profile=args.profile,
        variants=variants,
        rounds=args.rounds,
        out=out,
        first_round=args.first_round,
        lagpilot=not args.no_lagpilot,
    ).run()
    if args.json:
        print(
            json.dumps({k: result[k] for k in ("profile", "keda_version", "variants", "summary")}, indent=1)
        )
    print(f"versus.json: {out / 'versus.json'}", file=sys.stderr)
    ok = all(r.get("exactly_once") for rnd in result["rounds"] for r in rnd["results"].values())
    return 0 if ok and result["rounds"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
