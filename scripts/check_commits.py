#!/usr/bin/env python3
"""Commit messages a person can scan: the subject (first line) at most 72 characters, not ending
with a period, and a blank line between it and the body. Standard library only.

    python3 scripts/check_commits.py                      # every commit in BASE..HEAD (what .ci/run does)
    python3 scripts/check_commits.py --base REV           # another base
    python3 scripts/check_commits.py --message-file FILE  # one message (scripts/hooks/commit-msg)
"""

from __future__ import annotations

import argparse
import subprocess
import sys

# The rule holds from this commit on (main's HEAD when it was introduced); history is not rewritten.
BASE = "e167be1ac4f597d4adfd48a960e2996634d3db04"
LIMIT = 72
SCISSORS = "# ------------------------ >8 ------------------------"
HINT = (f"a subject of at most {LIMIT} characters in the imperative, no final period, a blank "
        "second line; the why and the figures go in the body")


def problems(message: str) -> list[str]:
    """What is wrong with a commit message, as git would record it (comment lines dropped)."""
    lines = []
    for line in message.splitlines():
        if line.startswith(SCISSORS):
            break
        if not line.startswith("#"):
            lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        return ["the subject line is empty: write what the commit does, in the imperative"]
    subject, found = lines[0], []
    if len(subject) > LIMIT:
        found.append(f"the subject is {len(subject)} characters, the limit is {LIMIT}: "
                     "shorten it and move the detail to the body")
    if subject.endswith("."):
        found.append("the subject ends with a period: drop it")
    if len(lines) > 1 and lines[1]:
        found.append("the second line is not blank: leave one blank line between the subject and the body")
    return found


def check_message_file(path: str) -> int:
    with open(path, encoding="utf-8", errors="replace") as f:
        found = problems(f.read())
    for problem in found:
        print(f"commit-msg: {problem}", file=sys.stderr)
    if found:
        print(f"commit-msg: the message is kept in {path}: git commit -e -F {path}", file=sys.stderr)
    return 1 if found else 0


def check_range(base: str) -> int:
    if subprocess.run(["git", "cat-file", "-e", f"{base}^{{commit}}"], capture_output=True).returncode:
        print(f"check_commits: base {base} is not in this clone (shallow?): "
              "git fetch --unshallow, or --base REV", file=sys.stderr)
        return 2
    out = subprocess.run(["git", "log", "-z", "--format=%H%x00%s%x00%B", f"{base}..HEAD"],
                         capture_output=True, text=True, encoding="utf-8", errors="replace", check=True).stdout
    fields = out.split("\0")
    bad = 0
    for i in range(0, len(fields) - 2, 3):
        sha, subject, body = fields[i].strip(), fields[i + 1], fields[i + 2]
        found = problems(body)
        if found:
            bad += 1
            print(f"{sha[:10]}  {len(subject):3d}  {subject}")
            for problem in found:
                print(f"    {problem}")
    count = len(fields) // 3
    if bad:
        print(f"check_commits: {bad} of {count} commits since {base[:10]} break the rule ({HINT}); "
              "fix them with git rebase -i before they reach main", file=sys.stderr)
        return 1
    print(f"check_commits: {count} commits since {base[:10]}, all follow the rule")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--message-file", help="check one message (the commit-msg hook's argument)")
    parser.add_argument("--base", default=BASE, help="check the commits in BASE..HEAD (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.message_file:
        return check_message_file(args.message_file)
    return check_range(args.base)


if __name__ == "__main__":
    sys.exit(main())
