#!/usr/bin/env python3
"""The build targets a selection of tests runs: reads `ctest --show-only=json-v1`
on stdin and prints the names of the targets under BUILD_DIR that the
selected tests name, one line, space-separated: executables in their commands
(the test binary itself, or miniattn handed to a Python check), executables
in their REQUIRED_FILES (a test whose command is the executable itself: CTest
leaves its command out until it is built) and shared libraries in their
environment (the preloaded yield shim). The threaded and
sanitizer suites build only these instead of every target.

    ctest -N -L threads --show-only=json-v1 | scripts/test_targets.py BUILD_DIR
"""
import json
import os
import re
import sys


def target_of(word, build):
    """The target a command word or an environment value (NAME=PATH) names, or None."""
    value = word.split("=", 1)[1] if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word) else word
    path = os.path.realpath(value) if os.path.isabs(value) else ""
    if not path.startswith(build):
        return None
    name = os.path.basename(path)
    library = re.fullmatch(r"lib(.+)\.so", name)
    if library:
        return library.group(1)
    # Executables CMake places in the build tree have no extension; scripts and decks live in the sources.
    return name if name and "." not in name else None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ctest --show-only=json-v1 ... | test_targets.py BUILD_DIR")
    build = os.path.realpath(sys.argv[1]) + os.sep
    selection = json.load(sys.stdin)
    targets = set()
    for test in selection.get("tests", []):
        words = list(test.get("command", []))
        for prop in test.get("properties", []):
            # A test whose command is its own executable has no command in the JSON until that is
            # built: such tests name it in REQUIRED_FILES.
            if prop.get("name") in ("ENVIRONMENT", "REQUIRED_FILES"):
                words += prop.get("value", [])
        targets.update(t for t in (target_of(w, build) for w in words) if t)
    if not targets:
        sys.exit("test_targets.py: the selected tests name no executable of " + build)
    print(" ".join(sorted(targets)))


if __name__ == "__main__":
    main()
