"""The suite's one piece of set-up: tests/ on ``sys.path``, so that the test files in every subject folder
(tests/engine/, tests/io/, ...) import the shared helpers as ``from _kernel_paths import ...``.

pytest's default import mode puts each test file's own folder on ``sys.path``; the helpers stay in tests/ (one
copy for every folder), and the subject folders are not packages (``tests/io/__init__.py`` would shadow the
standard library's ``io``), so the folder above them is added here, once, before any test file is imported.
Test files keep unique basenames across folders (``python tools/sort_tests.py --check`` says where not).
"""

import os
import sys

_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
