"""The `gpucourse` command: doctor, bench, grade."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="gpucourse", description="Helper commands for the gpucourse course.")
    ap.add_argument("command", choices=["doctor", "bench", "grade"], help="what to do")
    if not argv or argv[0] in ("-h", "--help"):
        ap.print_help()
        print("\n  gpucourse doctor [--measure]   what this machine can run, versions, known problems"
              "\n  gpucourse bench [NAME ...]     run registered benchmarks, write JSON with --out"
              "\n  gpucourse grade EXERCISE SUBMISSION ...   grade files, folders or an nbgrader course directory; "
              "a gradebook and a leaderboard (see gpucourse grade --help)")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "doctor":
        dp = argparse.ArgumentParser(prog="gpucourse doctor")
        dp.add_argument("--measure", action="store_true", help="also measure copy bandwidth and matmul rate (GPU)")
        args = dp.parse_args(rest)
        from .doctor import report

        print(report(do_measure=args.measure))
        return 0
    if command == "bench":
        from .benchmarks import main as bench_main

        return bench_main(rest)
    if command == "grade":
        from .grading.cli import main as grade_main

        return grade_main(rest)
    ap.parse_args(argv)  # unknown command: argparse prints usage and exits with 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
