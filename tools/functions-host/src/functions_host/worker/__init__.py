"""The language worker process: a thin proxy between the host's gRPC stream and the runtime.

On Python 3.13+ Azure Functions runs a small proxy worker that connects to the host's
FunctionRpc ``EventStream`` and hands every request to the execution runtime from PyPI,
``azure-functions-runtime`` (the version the app pins in requirements.txt). This package
is that proxy for the local host; everything a worker decides (indexing, binding types,
conversions, invocation) is the runtime's.
"""
