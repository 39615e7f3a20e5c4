"""The thin shell: one Blueprint module per transport family (the only users of azure.functions)."""
