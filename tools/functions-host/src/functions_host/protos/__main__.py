"""``python -m functions_host.protos`` (``make protos``): compile the FunctionRpc protocol again."""

from __future__ import annotations

import sys

from functions_host.protos.compile import OUTPUTS, PROTO, compile_protos

compile_protos()
print(f"compiled {PROTO.name} -> {', '.join(OUTPUTS)}", file=sys.stderr)
