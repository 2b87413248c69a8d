"""The Python examples of the README and of docs/ run as they are against the real brokers.

A ```` ```python ```` block runs with the plain broker's ``LOCKBROKER_URL``
and ``LOCKBROKER_API_KEY``; a ```` ```python tls ```` block with the HTTPS
broker's URL and the ``LOCKBROKER_CA_FILE``, ``LOCKBROKER_CLIENT_CERT`` and
``LOCKBROKER_CLIENT_KEY`` that reach it (the conformance harness's).
"""

import asyncio
import os
import re
import unittest
from pathlib import Path
from unittest import mock

from helpers import env

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


async def _async_work(**kw):
    await asyncio.sleep(0)


#: Stand-ins for the work the examples guard.
STUBS = {"make_report": lambda **kw: None, "make_report_async": _async_work}


def examples(page: Path):
    """``(kind, code)`` of each Python block of ``page``; kind is ``""`` or ``"tls"``."""
    return re.findall(r"```python(?: (tls))?\n(.*?)```", page.read_text(), re.S)


class Readme(unittest.TestCase):
    def environment(self, kind):
        if kind == "tls":
            return {
                "LOCKBROKER_URL": env("LOCKBROKER_TLS_URL"),
                "LOCKBROKER_API_KEY": env("LOCKBROKER_API_KEY"),
                "LOCKBROKER_CA_FILE": env("LOCKBROKER_TEST_CA_FILE"),
                "LOCKBROKER_CLIENT_CERT": env("LOCKBROKER_TEST_CLIENT_CERT"),
                "LOCKBROKER_CLIENT_KEY": env("LOCKBROKER_TEST_CLIENT_KEY"),
            }
        return {"LOCKBROKER_URL": env("LOCKBROKER_URL"), "LOCKBROKER_API_KEY": env("LOCKBROKER_API_KEY")}

    def test_every_python_example_runs(self):
        found = {page.relative_to(ROOT): examples(page) for page in PAGES}
        self.assertGreaterEqual(len(found[Path("README.md")]), 2, "a sync and an async example")
        self.assertGreaterEqual(sum(len(blocks) for blocks in found.values()), 15, "examples on every page")
        self.assertTrue(any(kind == "tls" for blocks in found.values() for kind, _ in blocks), "a TLS example")
        for page, blocks in found.items():
            for n, (kind, code) in enumerate(blocks, 1):
                with self.subTest(page=str(page), example=n, first_line=code.splitlines()[0]):
                    with mock.patch.dict(os.environ, self.environment(kind)):
                        exec(compile(code, f"{page} example {n}", "exec"), dict(STUBS))


if __name__ == "__main__":
    unittest.main()
