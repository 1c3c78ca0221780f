"""The suite's one piece of set-up: tests/ and its subject folders on ``sys.path``, so that a test file in any
folder (tests/engine/, tests/io/, ...) imports the shared helpers as ``from _kernel_paths import ...`` and another
test file's cases as ``from test_native_kernels import CASES``, wherever that file lives.

pytest's default import mode puts each test file's own folder on ``sys.path`` as it imports the file; the helpers
stay in tests/ (one copy for every folder) and the subject folders are not packages (``tests/io/__init__.py``
would shadow the standard library's ``io``), so they are added here, once, before any test file is imported.
Test files keep unique basenames across folders (``python tools/sort_tests.py --check`` says where not), so a
basename names one module whichever folder pytest reached first.
"""

import os
import sys

_TESTS = os.path.dirname(os.path.abspath(__file__))
_FOLDERS = sorted(entry.path for entry in os.scandir(_TESTS)
                  if entry.is_dir() and not entry.name.startswith((".", "_")) and entry.name != "data")
for _path in reversed([_TESTS, *_FOLDERS]):
    if _path not in sys.path:
        sys.path.insert(0, _path)
