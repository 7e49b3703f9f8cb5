"""One CTest test = produce a snapshot, then check it with check_snapshot.py.

Runs GENERATOR (any command line, e.g. `mpiexec -n 2 miniattn deck.yaml --set
io.snapshot=S.h5 ...` or `python3 make_reference_snapshot.py S.h5 ...`), which
must exit 0 and leave SNAPSHOT behind, then runs check_snapshot.py on it with
this same interpreter. With `--expect pass` the check must exit 0; with
`--expect fail` it must exit exactly 1 (a value out of tolerance, not a
malformed file or a crash) and print every `--expect-text`.

    /usr/bin/python3 run_reference_check.py --snapshot S.h5 [--expect pass|fail]
        [--expect-text TEXT ...] [--check-arg=--grad-rtol=1e-6 ...] -- GENERATOR...

Exit status 0 when the outcome is the expected one, 1 otherwise.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshot", required=True)
    ap.add_argument("--expect", choices=("pass", "fail"), default="pass")
    ap.add_argument("--expect-text", action="append", default=[],
                    help="text the failing check must print (repeatable)")
    ap.add_argument("--check-arg", action="append", default=[],
                    help="extra argument for check_snapshot.py, e.g. --check-arg=--grad-rtol=1e-6")
    ap.add_argument("generator", nargs=argparse.REMAINDER, help="-- then the command writing the snapshot")
    args = ap.parse_args(argv)
    generator = args.generator[1:] if args.generator[:1] == ["--"] else args.generator
    if not generator:
        ap.error("no generator command given after --")

    if os.path.exists(args.snapshot):
        os.remove(args.snapshot)  # never check a stale file from an earlier run
    print("generating:", " ".join(generator), flush=True)
    rc = subprocess.call(generator)
    if rc != 0:
        print(f"run_reference_check: generator failed with exit status {rc}")
        return 1
    if not os.path.isfile(args.snapshot):
        print(f"run_reference_check: generator succeeded but wrote no {args.snapshot}")
        return 1

    check = [sys.executable, os.path.join(HERE, "check_snapshot.py"), args.snapshot] + args.check_arg
    print("checking:", " ".join(check), flush=True)
    result = subprocess.run(check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(result.stdout, end="")
    if args.expect == "pass":
        ok = result.returncode == 0
        why = f"check exited {result.returncode}, expected 0"
    else:
        missing = [t for t in args.expect_text if t not in result.stdout]
        ok = result.returncode == 1 and "reference check: FAILED" in result.stdout and not missing
        why = (f"check exited {result.returncode}, expected 1" if result.returncode != 1
               else f"expected output not found: {missing or ['reference check: FAILED']}")
    print(f"run_reference_check: {'as expected' if ok else 'UNEXPECTED: ' + why} (expected {args.expect})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
