#!/usr/bin/env python3
"""The README's commands, as the README writes them, for .ci/run.

The README is the contract a newcomer follows, so CI runs its blocks instead of copies of them:

  readme.py commands quickstart    the Quickstart's first block, one command a line
  readme.py script then            a bash script running the Quickstart's second block (ps, down)
  readme.py script walkthrough     a bash script running "A walk through" with its expected lines
  readme.py match FILE LINE        exit 0 when FILE has LINE (see below), else 1 naming what was seen

In a block, a comment line that starts with `#   ` (a hash and three spaces) right after a command
is a line the command must print: `…` stands for anything, the other pieces must appear in order
on one line of the command's output (stdout and stderr), runs of spaces counting as one. Other
comments are prose. A command that exits non-zero, or misses one of its lines, fails the script.
"""

import re
import shlex
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"

SECTIONS = {
    # name: (heading, which ```sh block under it)
    "quickstart": ("## Quickstart", 0),
    "then": ("## Quickstart", 1),
    "walkthrough": ("## A walk through", 0),
}


def block(name):
    heading, index = SECTIONS[name]
    text = README.read_text(encoding="utf-8")
    start = text.find("\n" + heading)
    if start < 0:
        sys.exit(f"README.md has no section `{heading}`")
    end = text.find("\n## ", start + len(heading) + 1)
    section = text[start : end if end >= 0 else len(text)]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    if len(blocks) <= index:
        sys.exit(f"README.md: `{heading}` has no sh block number {index + 1}")
    return blocks[index]


def steps(text):
    """(command, [expected lines]) in order; comments and blank lines are dropped."""
    out = []
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if pending:
            pending += "\n" + line
            if not line.endswith("\\"):
                out.append((pending, []))
                pending = ""
            continue
        if line.startswith("#   "):
            if not out:
                sys.exit(f"README.md: expected line before any command: {line}")
            out[-1][1].append(line[4:].strip())
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending = line
            continue
        out.append((line, []))
    return out


def normalize(s):
    return re.sub(r"\s+", " ", s).strip()


def matches(expected, line):
    pieces = [normalize(p) for p in expected.split("…")]
    line = normalize(line)
    at = 0
    for piece in pieces:
        if not piece:
            continue
        found = line.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def script(name):
    lines = [
        "set -uo pipefail",
        "shopt -s expand_aliases",
        'out=$(mktemp)',
        'trap \'rm -f "$out"\' EXIT',
    ]
    for i, (command, expected) in enumerate(steps(block(name)), 1):
        lines.append(f"printf '\\n$ %s\\n' {shlex.quote(command)}")
        # eval in this shell: the block's alias (and its $PWD) apply to later commands.
        lines.append(f"eval {shlex.quote(command)} >\"$out\" 2>&1; rc=$?")
        lines.append('cat "$out"')
        lines.append(
            f'if [ "$rc" -ne 0 ]; then echo "README {name} step {i} exited $rc: "{shlex.quote(command)}; exit 1; fi'
        )
        for e in expected:
            lines.append(
                f'python3 {shlex.quote(__file__)} match "$out" {shlex.quote(e)} || '
                f'{{ echo "README {name} step {i}: "{shlex.quote(command)}; exit 1; }}'
            )
    lines.append(f"echo 'README {name}: every command ran and printed what the README says'")
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) == 3 and argv[1] == "commands":
        for command, _ in steps(block(argv[2])):
            print(command)
    elif len(argv) == 3 and argv[1] == "script":
        sys.stdout.write(script(argv[2]))
    elif len(argv) == 4 and argv[1] == "match":
        text = Path(argv[2]).read_text(encoding="utf-8", errors="replace")
        if any(matches(argv[3], l) for l in text.splitlines()):
            return 0
        print(f"expected a line like: {argv[3]}\nin the output above; it has none")
        return 1
    elif len(argv) == 2 and argv[1] == "selftest":
        assert matches("Done: my findings are in notes.md.", "  Done: my findings are in notes.md.")
        assert matches("a … 1 … Up", "a   x  1 y   Up 3 seconds")
        assert not matches("a … 1 … Up", "Up a 1")
        got = steps("x \\\n  y\n#   out\n# prose\nz  # note\n")
        assert got == [("x \\\n  y", ["out"]), ("z  # note", [])], got
        print("readme.py selftest: ok")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
