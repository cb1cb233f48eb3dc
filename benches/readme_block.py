"""Keeps a generated block of the repository's README.md in step with a benchmark's results.

A block sits between two marker lines, `<!-- bench:NAME begin -->` and
`<!-- bench:NAME end -->` (the markers render as nothing). The benchmark modes that publish
figures in the README (`--scale`, `--rebalance`) call `replace_block` after a full run, so
the figures the README quotes are the ones the command just measured; the prose around the
block (what the figures mean, where we lose) is written by hand. Smoke runs and runs that
write elsewhere (an OUT other than benches/results) leave the README alone.
Standard library only.
"""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
RESULTS = os.path.join(ROOT, "benches", "results")


def publishes(out_dir):
    """True when `out_dir` is benches/results: a full run whose figures the README quotes."""
    return os.path.realpath(out_dir) == os.path.realpath(RESULTS)


def replace_block(name, text, readme=README):
    """Replaces the text between the `bench:NAME` markers of `readme` with `text`.

    Returns an error message (the markers are missing or out of order) or None. The file is
    rewritten only if the block changed."""
    begin, end = f"<!-- bench:{name} begin -->", f"<!-- bench:{name} end -->"
    with open(readme) as f:
        old = f.read()
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
    if len(pattern.findall(old)) != 1:
        return f"{readme}: expected one block between `{begin}` and `{end}`"
    new = pattern.sub(lambda _: begin + "\n" + text.rstrip("\n") + "\n" + end, old)
    if new != old:
        with open(readme, "w") as f:
            f.write(new)
    return None
