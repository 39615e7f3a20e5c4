"""Adapters: the only modules that import Azure SDKs. Each implements a port of ``shared``."""
