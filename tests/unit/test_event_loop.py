"""How a command's coroutine runs (``gapless.cli.options.run``): on uvloop, with what the process
held before it frozen out of the garbage collector's reach, a young generation larger than
Python's default, and every later cycle still collected."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.helpers import ROOT

PROBE = textwrap.dedent("""
    import asyncio, gc, json, weakref
    import gapless.api.app  # what a service holds before it runs: modules, classes, schemas
    from gapless.cli.options import run

    class Node:
        pass

    before = gc.get_freeze_count()

    async def probe():
        # A cycle made while the command runs: garbage the collector must still find.
        node = Node()
        node.self = node
        gone = weakref.ref(node)
        del node
        gc.collect()
        collected = gone() is None
        # One more, left to the collector alone: found once enough new objects live on.
        node = Node()
        node.self = node
        gone = weakref.ref(node)
        del node
        kept = [[] for _ in range(3 * gc.get_threshold()[0])]
        return {"before": before, "frozen": gc.get_freeze_count(),
                "cycle_collected": collected, "cycle_found_alone": gone() is None,
                "young": gc.get_threshold()[0], "kept": len(kept),
                "loop": type(asyncio.get_running_loop()).__module__}

    print(json.dumps(run(probe())))
""")


def test_a_command_runs_on_uvloop_with_its_startup_objects_frozen() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            cwd=ROOT, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["before"] == 0
    # The modules, classes and schemas imported before the run: tens of thousands of objects
    # a full collection no longer walks.
    assert seen["frozen"] > 20_000, seen
    assert seen["cycle_collected"], "a cycle made after the freeze must still be collected"
    assert seen["cycle_found_alone"], "the collector must still run by itself"
    # The young generation is collected every 50,000 new objects, not every 700.
    assert seen["young"] == 50_000, seen
    assert seen["loop"].startswith("uvloop"), seen
