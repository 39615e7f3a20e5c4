"""The app's functions, indexed once per test session as the Python worker indexes them.

``FunctionApp.get_functions()`` may run only once per app object (a second call reports
every function name as a duplicate), so every test that needs the index shares this one.
"""

from __future__ import annotations

import functools
from typing import Any

import function_app


@functools.cache
def indexed_functions() -> dict[str, Any]:
    return {f.get_function_name(): f for f in function_app.app.get_functions()}
