"""Inferbus application package: contracts, use cases, ports and (in adapters/) the SDK edge."""
