"""The Python tests' checks: check() counts and prints what failed; finish() prints the counts
and exits non-zero when a check failed."""
import sys

_counts = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    if ok:
        _counts["passed"] += 1
    else:
        _counts["failed"] += 1
        print(f"FAIL {name}" + (f": {detail}" if detail else ""))


def finish():
    print(f"{_counts['passed']} passed, {_counts['failed']} failed")
    sys.exit(1 if _counts["failed"] else 0)
