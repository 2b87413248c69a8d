"""The README's Python examples run as they are against a real broker."""

import os
import re
import unittest
from pathlib import Path
from unittest import mock

from helpers import env

README = Path(__file__).resolve().parent.parent / "README.md"

#: Stand-ins for the work the examples guard.
STUBS = {"make_report": lambda **kw: None}


def examples():
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


class Readme(unittest.TestCase):
    def test_every_python_example_runs(self):
        found = examples()
        self.assertGreaterEqual(len(found), 6, "one example per kind, listing and events")
        environment = {"LOCKBROKER_URL": env("LOCKBROKER_URL"), "LOCKBROKER_API_KEY": env("LOCKBROKER_API_KEY")}
        with mock.patch.dict(os.environ, environment):
            for n, code in enumerate(found, 1):
                with self.subTest(example=n, first_line=code.splitlines()[0]):
                    exec(compile(code, f"README.md example {n}", "exec"), dict(STUBS))


if __name__ == "__main__":
    unittest.main()
