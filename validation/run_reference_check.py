"""One CTest test = produce a snapshot, then check it with check_snapshot.py.

Runs GENERATOR (any command line, e.g. `mpiexec -n 2 miniattn deck.yaml --set
io.snapshot=S.h5 ...` or `python3 make_reference_snapshot.py S.h5 ...`), which
must exit 0 and leave SNAPSHOT behind, then runs check_snapshot.py on it with
this same interpreter. With `--expect pass` the check must exit 0; with
`--expect fail` it must exit exactly 1 (a value out of tolerance, not a
malformed file or a crash) and print every `--expect-text`.

With `--report PATH=VALUE` (repeatable) the generator's RESULT line must
hold VALUE (JSON) at PATH (dotted keys), e.g.
`attention_tiles.cudnn.blocks_on_gemm_fallback=0`; `PATH>VALUE` asks for
more than VALUE.

Every `--set section.key=value` of the generator must be in the snapshot's
own config (its `config` attribute): check_snapshot.py builds the PyTorch
model from the snapshot's attributes, so an override lost on the way would
otherwise check a different model than the test names.

    /usr/bin/python3 run_reference_check.py --snapshot S.h5 [--expect pass|fail]
        [--expect-text TEXT ...] [--check-arg=--grad-rtol=1e-6 ...] [--report PATH=VALUE ...] -- GENERATOR...

Exit status 0 when the outcome is the expected one, 1 otherwise.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def report_problems(output, expectations):
    """What the RESULT line in `output` does not hold of `expectations` (PATH=VALUE or PATH>VALUE)."""
    lines = [line[len("RESULT "):] for line in output.splitlines() if line.startswith("RESULT ")]
    if not lines:
        return ["no RESULT line in the generator's output"] if expectations else []
    report = json.loads(lines[-1])
    problems = []
    for expectation in expectations:
        more = ">" in expectation and ("=" not in expectation or expectation.index(">") < expectation.index("="))
        path, wanted = expectation.split(">" if more else "=", 1)
        value = report
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        wanted = json.loads(wanted)
        if value is None or (value <= wanted if more else value != wanted):
            problems.append(f"RESULT {path} is {json.dumps(value)}, expected {'more than ' if more else ''}{json.dumps(wanted)}")
    return problems


def set_overrides(generator):
    """The (section.key, value) pairs of the generator's `--set K=V` and `--set=K=V` arguments,
    the last of each key (the one miniattn takes)."""
    pairs = {}
    for i, arg in enumerate(generator):
        if arg == "--set" and i + 1 < len(generator):
            text = generator[i + 1]
        elif arg.startswith("--set="):
            text = arg[len("--set="):]
        else:
            continue
        key, _, value = text.partition("=")
        pairs[key] = value
    return list(pairs.items())


def same_setting(stored, value):
    """Whether the config's JSON value `stored` is what the text `value` of a --set asks for."""
    if isinstance(stored, bool):
        return value.strip().lower() == str(stored).lower()
    if isinstance(stored, (int, float)):
        try:
            return float(value) == float(stored)
        except ValueError:
            return False
    return str(stored) == value


def overrides_missing(snapshot, pairs):
    """The --set pairs the snapshot's config does not hold."""
    if not pairs:
        return []
    import h5py  # the checker's own dependency; needed only here
    with h5py.File(snapshot, "r") as f:
        text = f["/"].attrs.get("config")
        if text is None:
            return ["the snapshot has no config attribute to compare the --set overrides with"]
        config = json.loads(text.decode() if isinstance(text, bytes) else str(text))
    problems = []
    for key, value in pairs:
        section, _, name = key.partition(".")
        values = config.get(section)
        stored = values.get(name) if isinstance(values, dict) else None
        if stored is None:
            problems.append(f"--set {key}: the snapshot's config has no {key}")
        elif not same_setting(stored, value):
            problems.append(f"--set {key}={value}: the snapshot's config holds {json.dumps(stored)}")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshot", required=True)
    ap.add_argument("--expect", choices=("pass", "fail"), default="pass")
    ap.add_argument("--expect-text", action="append", default=[],
                    help="text the failing check must print (repeatable)")
    ap.add_argument("--check-arg", action="append", default=[],
                    help="extra argument for check_snapshot.py, e.g. --check-arg=--grad-rtol=1e-6")
    ap.add_argument("--report", action="append", default=[],
                    help="PATH=VALUE (or PATH>VALUE) the generator's RESULT line must hold (repeatable)")
    ap.add_argument("generator", nargs=argparse.REMAINDER, help="-- then the command writing the snapshot")
    args = ap.parse_args(argv)
    generator = args.generator[1:] if args.generator[:1] == ["--"] else args.generator
    if not generator:
        ap.error("no generator command given after --")

    if os.path.exists(args.snapshot):
        os.remove(args.snapshot)  # never check a stale file from an earlier run
    print("generating:", " ".join(generator), flush=True)
    run = subprocess.run(generator, stdout=subprocess.PIPE, text=True)
    print(run.stdout, end="", flush=True)
    if run.returncode != 0:
        print(f"run_reference_check: generator failed with exit status {run.returncode}")
        return 1
    problems = report_problems(run.stdout, args.report)
    for problem in problems:
        print(f"run_reference_check: {problem}")
    if problems:
        return 1
    if not os.path.isfile(args.snapshot):
        print(f"run_reference_check: generator succeeded but wrote no {args.snapshot}")
        return 1
    lost = overrides_missing(args.snapshot, set_overrides(generator))
    for problem in lost:
        print(f"run_reference_check: {problem}")
    if lost:
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
