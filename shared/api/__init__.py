"""The HTTP API, free of any web framework: triggers translate to and from these types."""
